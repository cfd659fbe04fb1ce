"""A record read from what a run's manifest held before runs recorded provenance, and from what an import knows.

A probe or rescore manifest always held its configuration (``config``: the
checkpoint digest, the sampling, each side's options) and what each engine
reported (``sampler_info``, ``trainer_info``: versions, dtypes, devices). Those
fields fill the record as far as they go, every other field stays null ("not
recorded"), and the record says where it came from (``source: manifest``). A
Recorder run contributes the flat ``scope`` keys ``certify`` reads; an import
the stack it came from, and the engines that stack is built on where its dumps
leave no doubt. Nothing here fails on an odd manifest: a field of another type
is simply not recorded.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..documents import json_edge
from .record import RECORD_VERSION, Deployment, Identities, Numerics, RunProvenance, SideProvenance
from .vllm_side import requested_numerics

SOURCE = "manifest"
STACK_ENGINES: dict[str, tuple[str | None, str | None]] = {
    "prime-rl": ("vllm", None),
    "nemo-rl": ("vllm", None),
    "slime": ("sglang", "megatron"),
}
"""(sampler engine, trainer engine) where the stack's dumps say which engine wrote them."""


def _map(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _strings(value: Any) -> list[str] | None:
    return [str(v) for v in value] if isinstance(value, list) and value else None


def from_manifest(manifest: Mapping[str, Any]) -> RunProvenance:
    """The record a manifest without one implies."""
    source = _map(manifest.get("source"))
    if _str(source.get("format")):
        return imported(str(source["format"]), manifest)
    config = _map(manifest.get("config"))
    if "checkpoint" in config:
        return RunProvenance(RECORD_VERSION, _probe_sampler(manifest, config), _probe_trainer(manifest, config))
    return _from_scope(manifest, SOURCE)


def imported(fmt: str, manifest: Mapping[str, Any] | None = None) -> RunProvenance:
    """An import's record: the stack it came from, the engines where the stack fixes them, the rest unknown."""
    sampler_engine, trainer_engine = STACK_ENGINES.get(fmt, (None, None))
    source = f"import:{fmt}"
    stack = {"rl_stack": fmt}
    prov = RunProvenance(
        RECORD_VERSION,
        SideProvenance(source=source, engine=sampler_engine, software=dict(stack)),
        SideProvenance(source=source, engine=trainer_engine, software=dict(stack)),
    )
    return _with_scope(prov, manifest or {})


def _python(manifest: Mapping[str, Any]) -> dict[str, str | None]:
    python = _str(_map(manifest.get("host")).get("python"))
    version = _str(_map(manifest.get("config")).get("mismatchscope_version"))
    return {"python": python, "mismatchscope": version}


@json_edge
def _sampling(config: Mapping[str, Any]) -> dict[str, Any] | None:
    """The record's ``identities.sampling`` entry from a manifest's ``config.sampling``."""
    s = _map(config.get("sampling"))
    if not s:
        return None
    names = {"top_k_logprobs": "logprobs"}
    keys = ("n", "temperature", "top_p", "top_k", "seed", "max_tokens", "top_k_logprobs", "logprobs_mode")
    out = {
        names.get(k, k): s[k] for k in keys if isinstance(s.get(k), (int, float, str)) and not isinstance(s[k], bool)
    }
    if isinstance(out.get("top_k"), int) and out["top_k"] < 0:
        out["top_k"] = 0
    return out


@json_edge
def trainer_sampling(sampling: Mapping[str, Any]) -> dict[str, Any]:
    """The trainer's ``identities.sampling`` entry: the distribution a probe's trainer reads its logprobs from: the sampler's, at T = 1 without truncation
    for raw logprobs (``probe.scoring.semantics``)."""
    if str(sampling.get("logprobs_mode", "")).startswith("raw"):
        return {"temperature": 1.0, "top_p": 1.0, "top_k": 0}
    top_k = sampling.get("top_k")
    return {
        "temperature": sampling.get("temperature"),
        "top_p": sampling.get("top_p"),
        "top_k": 0 if not isinstance(top_k, int) or top_k < 0 else top_k,
    }


def _probe_sampler(manifest: Mapping[str, Any], config: Mapping[str, Any]) -> SideProvenance:
    info, cfg = _map(manifest.get("sampler_info")), _map(config.get("sampler"))
    engine = _str(info.get("engine")) or _str(cfg.get("kind"))
    software = _python(manifest)
    if engine and engine.startswith("vllm"):
        software["vllm"] = _str(info.get("version"))
    elif engine:
        software.update(torch=_str(info.get("torch")), transformers=_str(info.get("transformers")))
    requested = Numerics()
    if engine and engine.startswith("vllm"):  # an engine's options: the transformers sampler takes none of them
        args = {**_map(cfg.get("engine_args")), "enforce_eager": cfg.get("enforce_eager")}
        requested = requested_numerics(args, {})
    requested.weights_dtype = _str(info.get("requested_dtype")) or _str(cfg.get("dtype"))
    requested.lm_head_dtype = "float32" if cfg.get("fp32_lm_head") is True else None
    used = Numerics(weights_dtype=_str(info.get("dtype")), attention_backend=_str(info.get("attn_implementation")))
    return SideProvenance(
        source=SOURCE,
        engine=engine,
        identities=Identities(
            checkpoint_sha256=_str(_map(config.get("checkpoint")).get("sha256")), sampling=_sampling(config)
        ),
        software=software,
        requested=requested,
        used=used,
        deployment=Deployment(
            devices=_strings(info.get("device_names")),
            tensor_parallel=_int(cfg.get("tensor_parallel_size")),
            max_batch_sequences=_int(cfg.get("max_num_seqs")) or _int(info.get("batch_size")),
        ),
    )


def _probe_trainer(manifest: Mapping[str, Any], config: Mapping[str, Any]) -> SideProvenance:
    info, cfg = _map(manifest.get("trainer_info")), _map(config.get("trainer"))
    weights = _map(config.get("trainer_checkpoint")).get("sha256") or _map(config.get("checkpoint")).get("sha256")
    software = {
        **_python(manifest),
        "torch": _str(info.get("torch")),
        "cuda": _str(info.get("cuda")),
        "transformers": _str(info.get("transformers")),
    }
    head = "float32" if cfg.get("fp32_lm_head") is True else None
    used_head = "float32" if info.get("fp32_lm_head") is True else _str(info.get("dtype"))
    sampling = _sampling(config)
    return SideProvenance(
        source=SOURCE,
        engine=_str(info.get("engine")),
        identities=Identities(
            checkpoint_sha256=_str(weights), sampling=trainer_sampling(sampling) if sampling else None
        ),
        software=software,
        requested=Numerics(
            weights_dtype=_str(info.get("requested_dtype")) or _str(cfg.get("dtype")),
            lm_head_dtype=head,
            attention_backend=_str(cfg.get("attn_implementation")),
        ),
        used=Numerics(
            weights_dtype=_str(info.get("dtype")),
            lm_head_dtype=used_head if info else None,
            attention_backend=_str(info.get("attn_implementation")),
        ),
        deployment=Deployment(
            devices=_strings(info.get("device_names")), max_batch_tokens=_int(info.get("batch_tokens"))
        ),
    )


def _from_scope(manifest: Mapping[str, Any], source: str) -> RunProvenance:
    prov = RunProvenance(RECORD_VERSION, SideProvenance(source=source), SideProvenance(source=source))
    return _with_scope(prov, manifest)


def _with_scope(prov: RunProvenance, manifest: Mapping[str, Any]) -> RunProvenance:
    """The flat keys a Recorder run or an import may carry under ``scope`` (``certify``'s), filled in."""
    scope = {**_map(_map(manifest.get("meta")).get("scope")), **_map(manifest.get("scope"))}
    s, t = prov.sampler, prov.trainer
    s.engine = _str(scope.get("sampler")) or s.engine
    t.engine = _str(scope.get("trainer")) or t.engine
    for side, role in ((s, "sampler"), (t, "trainer")):
        version = _str(scope.get(f"{role}_version"))
        if version is not None:
            side.software[side.engine or "engine"] = version
        side.used.weights_dtype = _str(scope.get(f"{role}_dtype")) or side.used.weights_dtype
        side.used.attention_backend = _str(scope.get(f"{role}_attention")) or side.used.attention_backend
    s.used.moe_kernel = _str(scope.get("moe_kernel")) or s.used.moe_kernel
    s.deployment.tensor_parallel = _int(scope.get("tensor_parallel_size")) or s.deployment.tensor_parallel
    s.deployment.expert_parallel = _int(scope.get("expert_parallel_size")) or s.deployment.expert_parallel
    s.deployment.max_batch_sequences = _int(scope.get("sampler_batch")) or s.deployment.max_batch_sequences
    weights = _str(scope.get("weights_sha256"))
    if weights is not None:
        s.identities.checkpoint_sha256 = t.identities.checkpoint_sha256 = weights
    return prov
