"""What a certificate holds for (the stack) and over what (the tokens it saw).

A bit-equal pair certifies one exact combination: these weights, these two
engines at these versions, these dtypes and kernels, this parallel layout and
batch shape. Every one of them can change the bytes, so the verdict carries
them, read from the run's manifest (a probe run records them all; an import
or a Recorder run carries what its writer passed under ``scope``) and
``"unknown"`` where the run does not say.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..documents import json_edge
from .compare import Tokens

UNKNOWN = "unknown"
LONG_POSITION = 512
"""positions from here on are "long": kernels switch tiling and accumulation order with length."""
SCOPE_KEYS = (
    "model",
    "weights_sha256",
    "sampler",
    "sampler_version",
    "trainer",
    "trainer_version",
    "sampler_dtype",
    "trainer_dtype",
    "sampler_attention",
    "trainer_attention",
    "moe_kernel",
    "tensor_parallel_size",
    "expert_parallel_size",
    "sampler_batch",
    "trainer_batch",
    "seed",
)
"""also the flat keys an import or a Recorder run may carry under ``scope`` in its metadata."""


@dataclass(frozen=True)
class Coverage:
    tokens: int
    sequences: int
    longest_position: int
    """the largest 0-based completion position certified."""
    share_past_512: float
    """share of tokens at position >= 512."""

    @classmethod
    def of(cls, tokens: Tokens) -> Coverage:
        n = len(tokens)
        return cls(
            n,
            len(np.unique(tokens.sequence_id)),
            int(tokens.position.max()) if n else -1,
            float((tokens.position >= LONG_POSITION).mean()) if n else 0.0,
        )


def _get(d: Any, *keys: str) -> Any:
    for k in keys:
        if not isinstance(d, Mapping) or d.get(k) is None:
            return None
        d = d[k]
    return d


def _first(*values: Any) -> Any:
    return next((v for v in values if v not in (None, "", {})), UNKNOWN)


@json_edge
def scope_of(manifest: Mapping[str, Any] | None, file_meta: Mapping[str, Any] | None) -> dict[str, Any]:
    """The stack a certificate holds for; a probe run's manifest first, then the shards' metadata."""
    m: Mapping[str, Any] = manifest or {}
    cfg = _get(m, "config") or file_meta or {}
    flat = {**(_get(m, "meta", "scope") or {}), **(_get(m, "scope") or {}), **(_get(file_meta, "scope") or {})}
    si, ti = _get(m, "sampler_info") or {}, _get(m, "trainer_info") or {}
    sampler_cfg, trainer_cfg = _get(cfg, "sampler") or {}, _get(cfg, "trainer") or {}
    engine_args = _get(sampler_cfg, "engine_args") or {}
    tp = _get(sampler_cfg, "tensor_parallel_size")
    out = {
        "model": _first(_get(cfg, "checkpoint", "path"), _get(cfg, "checkpoint", "model_type")),
        "weights_sha256": _first(_get(cfg, "checkpoint", "sha256")),
        "sampler": _first(_get(si, "engine"), _get(sampler_cfg, "kind")),
        "sampler_version": _first(_get(si, "version"), _get(si, "transformers")),
        "trainer": _first(_get(ti, "engine")),
        "trainer_version": _first(_get(ti, "transformers")),
        "sampler_dtype": _first(_get(si, "dtype"), _get(sampler_cfg, "dtype")),
        "trainer_dtype": _first(_get(ti, "dtype"), _get(trainer_cfg, "dtype")),
        "sampler_attention": _first(
            _get(si, "attn_implementation"),
            engine_args.get("attn_implementation"),
            engine_args.get("attention_backend"),
        ),
        "trainer_attention": _first(_get(ti, "attn_implementation"), _get(trainer_cfg, "attn_implementation")),
        "moe_kernel": _moe_kernel(m, cfg, engine_args),
        "tensor_parallel_size": _first(tp),
        "expert_parallel_size": _first(
            engine_args.get("expert_parallel_size"),
            1 if tp == 1 and not engine_args.get("enable_expert_parallel") else None,
        ),
        "sampler_batch": _first(
            _get(si, "batch_size"), _get(sampler_cfg, "max_num_seqs"), engine_args.get("max_num_seqs")
        ),
        "trainer_batch": _first(
            f"{_get(trainer_cfg, 'batch_tokens')} tokens" if _get(trainer_cfg, "batch_tokens") else None
        ),
        "seed": _first(_get(cfg, "sampling", "seed")),
    }
    if _get(cfg, "trainer_checkpoint", "same_as_sampler") is False:
        out["trainer_weights_sha256"] = _first(_get(cfg, "trainer_checkpoint", "sha256"))
    for key in SCOPE_KEYS:
        if out.get(key) == UNKNOWN and flat.get(key) is not None:
            out[key] = flat[key]
    return out


def _moe_kernel(manifest: Mapping[str, Any], cfg: Mapping[str, Any], engine_args: Mapping[str, Any]) -> Any:
    if _get(cfg, "checkpoint", "is_moe") is False:
        return "none (dense model)"
    return _first(engine_args.get("moe_backend"), _get(manifest, "routing", "family"))
