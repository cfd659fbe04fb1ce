"""The provenance record: what each side of a run ran, as the run's manifest holds it under ``provenance``.

Two sides (sampler and trainer), each in four parts: the identities that make
the two sides one program (weights, tokenizer, chat template, generation
config, sampling parameters), the software, the numerics as requested and as
used, and the deployment. Every field is ``null`` where its writer could not
say (an import whose dump does not hold it, a run recorded before provenance):
readers show it as "not recorded", never guess it.

The record is typed: :func:`record_schema` is its JSON Schema
(``docs/schemas/provenance-record.json``), and :func:`read_record` reads a
manifest's entry back through :func:`mismatchscope.documents.from_json`, which
refuses a key or a type the record does not declare.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from ..documents import json_edge

MANIFEST_KEY = "provenance"
"""the manifest's key for the record."""
RECORD_VERSION = 1
"""the record's layout version (``version``): raised when a field is renamed, removed or retyped."""
NO_TEMPLATE = "none"
"""``chat_template`` of a tokenizer that has none (``null`` means not recorded)."""


@dataclass
class WeightsDigest:
    """The weight files' digests: each file's, and one over all of them that anyone can recompute."""

    combined: str = field(
        metadata={
            "doc": "sha256 of the lines 'SHA256  NAME' (one per weight file, sorted by name, each ending in a "
            "newline): what `sha256sum *.safetensors` prints, hashed"
        }
    )
    files: dict[str, str] = field(metadata={"doc": "each weight file's sha256, by its name in the checkpoint folder"})


@dataclass
class Identities:
    """What must be equal on both sides for their logprobs to be two readings of one program."""

    weights: WeightsDigest | None = None
    tokenizer: str | None = field(
        default=None,
        metadata={
            "doc": "sha256 over the tokenizer files (tokenizer.json, vocab, merges, special tokens; "
            "tokenizer_config.json without its chat_template), as 'SHA256  NAME' lines"
        },
    )
    chat_template: str | None = field(
        default=None, metadata={"doc": "sha256 of the chat template's text; 'none' when the tokenizer has none"}
    )
    generation_config: dict[str, Any] | None = field(
        default=None,
        metadata={"doc": "generation_config.json as the checkpoint holds it (without transformers_version)"},
    )
    sampling: dict[str, Any] | None = field(
        default=None,
        metadata={
            "doc": "the sampling parameters as the engine received them (sampler), or as the trainer applied "
            "them to its logits (trainer): temperature, top_p, top_k (0: off), logprobs_mode, ..."
        },
    )
    checkpoint_sha256: str | None = field(
        default=None,
        metadata={"doc": "the digest every probe run records over config, weights and tokenizer files together"},
    )


@dataclass
class Numerics:
    """How a side computes: what was asked for (``requested``) and what ran (``used``); null where unknown."""

    weights_dtype: str | None = None
    lm_head_dtype: str | None = None
    kv_cache_dtype: str | None = None
    logits_dtype: str | None = field(default=None, metadata={"doc": "the dtype the log-softmax runs in"})
    attention_backend: str | None = None
    moe_kernel: str | None = None
    batch_invariant: bool | None = None
    deterministic: bool | None = field(default=None, metadata={"doc": "torch's deterministic algorithms"})
    cuda_graphs: str | None = field(default=None, metadata={"doc": "the CUDA graph mode ('none' when off)"})
    compile: str | None = field(default=None, metadata={"doc": "the compilation mode ('none' when eager)"})
    prefix_caching: bool | None = None
    chunked_prefill: bool | None = None
    tf32_matmul: bool | None = None
    tf32_cudnn: bool | None = None
    float32_matmul_precision: str | None = None
    fp16_reduced_precision_reduction: bool | None = None
    bf16_reduced_precision_reduction: bool | None = None


@dataclass
class Deployment:
    devices: list[str] | None = field(default=None, metadata={"doc": "the devices' names (GPU model, or the CPU's)"})
    tensor_parallel: int | None = None
    pipeline_parallel: int | None = None
    expert_parallel: int | None = None
    data_parallel: int | None = None
    max_batch_sequences: int | None = None
    max_batch_tokens: int | None = None


@dataclass
class SideProvenance:
    """One side of a run: the sampler (the inference engine) or the trainer."""

    source: str = field(
        metadata={
            "doc": "who filled the record: probe, rescore, recorder, import:FORMAT, or manifest (read from a run "
            "recorded before provenance)"
        }
    )
    engine: str | None = None
    identities: Identities = field(default_factory=Identities)
    software: dict[str, str | None] = field(
        default_factory=dict,
        metadata={"doc": "versions by name: python, torch, cuda, rocm, transformers, vllm, rl_stack, ..."},
    )
    requested: Numerics = field(default_factory=Numerics)
    used: Numerics = field(default_factory=Numerics)
    environment: dict[str, str] | None = field(
        default=None,
        metadata={
            "doc": "the engine's and torch's environment variables (VLLM_*, TORCH_*, CUDA_*, NCCL_*, ...); "
            "never a credential, paths shown as <path>"
        },
    )
    fallbacks: list[str] | None = field(
        default=None,
        metadata={"doc": "every fallback the engine logged, one line each; null when its log was not read"},
    )
    deployment: Deployment = field(default_factory=Deployment)


@dataclass
class RunProvenance:
    """What ran on each side of a run."""

    version: int = field(metadata={"doc": "the record's layout version"})
    sampler: SideProvenance
    trainer: SideProvenance


@json_edge
def to_record(prov: RunProvenance) -> dict[str, Any]:
    """The manifest's entry: every field in declaration order, nulls included."""
    from ..documents import to_json

    return to_json(prov)


def read_record(data: Any) -> RunProvenance:
    """A manifest's entry as the typed record; ``TypeError`` when it is not one (another layout, edited by hand).

    A manifest is written with its keys sorted: they are put back in the record's order first, so only a key
    the record does not declare, a missing one or a value of another type is refused.
    """
    from ..documents import from_json

    return from_json(RunProvenance, in_order(RunProvenance, data))


def in_order(tp: Any, data: Any) -> Any:
    """``data`` with the keys of each object in the order ``tp`` declares them (undeclared keys last)."""
    import typing

    if dataclasses.is_dataclass(tp) and isinstance(tp, type) and isinstance(data, dict):
        hints = typing.get_type_hints(tp)
        names = [f.name for f in dataclasses.fields(tp)]
        out = {name: in_order(hints[name], data[name]) for name in names if name in data}
        out.update({k: v for k, v in data.items() if k not in out})
        return out
    if isinstance(data, dict):  # an object inside a union (``WeightsDigest | None``), or a mapping of data
        for option in typing.get_args(tp):
            if dataclasses.is_dataclass(option):
                return in_order(option, data)
    return data


@json_edge
def record_schema() -> dict[str, Any]:
    """The JSON Schema of the manifest's ``provenance`` entry."""
    from ..documents import json_schema

    schema = json_schema(
        RunProvenance,
        "mismatchscope provenance record",
        "manifest.json's provenance entry: what ran on each side of the run",
    )
    schema["properties"].pop("schema_version")  # a manifest entry, not a command's document
    schema["required"].remove("schema_version")
    schema["properties"]["version"] = {**schema["properties"]["version"], "const": RECORD_VERSION}
    return schema
