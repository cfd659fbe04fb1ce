"""The provenance a probe, a rescore and an imported run's rescore record: each side read off its live engine.

The sampler's side is recorded once its engine has sampled (with the round,
so a killed probe keeps it), the trainer's once it has loaded; both take the
engines' fallbacks from the output the probe captured (``engine_log``), read
again when the run finishes. A resumed run keeps what an earlier session
recorded for a side it does not start again.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..documents import to_json
from ..execution import record as rec
from ..execution.derived import trainer_sampling
from ..execution.digests import checkpoint_identities
from ..execution.environment import engine_environment
from ..execution.logs import fallbacks
from ..execution.record import Deployment, Identities, Numerics, SideProvenance
from ..execution.torch_side import model_numerics, software
from .checkpoint import CheckpointInfo
from .types import SamplingConfig

NEUTRAL = {"min_p": 0.0, "presence_penalty": 0.0, "frequency_penalty": 0.0, "repetition_penalty": 1.0}
"""what a trainer scoring with a temperature and a truncation applies of the rest: nothing."""


def identities(info: CheckpointInfo, sampling: dict[str, Any] | None, *, weights: bool = True) -> Identities:
    """The checkpoint's identities (``weights=False``: weights not known to be these files, a server's)."""
    ids = checkpoint_identities(info.path, info.file_sha256, info.weight_files if weights else (), info.sha256)
    ids.sampling = sampling
    if not weights:
        ids.checkpoint_sha256 = None
    return ids


def sampler_side(
    sampler: Any,
    info: CheckpointInfo,
    sampling: SamplingConfig,
    source: str,
    *,
    sampled: bool = True,
    conversation: bool = False,
) -> SideProvenance:
    """The sampler's side: its own record where it can give one (``sampler.provenance()``), else its description.

    ``sampled=False`` before this run has sampled anything: an engine the caller started and used before keeps
    the sampling of its last request, which is not this run's, so the run's own sampling is recorded until the
    engine has received it. ``conversation``: the engine's last request was a later turn's, which asks one
    completion with the seed moved on by the turn (``conversations``); the run's record is its first turn's
    request, the one every later turn derives from, so its ``n`` and ``seed`` are the run's own."""
    own = getattr(sampler, "provenance", None)
    side = own() if callable(own) else _described(sampler.describe(), sampling)
    assert isinstance(side, SideProvenance)
    side.source = source
    received = (side.identities.sampling if sampled else None) or to_json(_sent(sampling))
    if conversation:
        received = {**received, "n": sampling.n, "seed": sampling.seed}
    side.identities = identities(info, received, weights=callable(own))  # a server's weights are not visible
    side.fallbacks = _logged(engine=True)
    return side


@dataclass(frozen=True)
class SentSampling:
    """The sampling a probe sends an engine, in the engines' names (``identities.sampling``)."""

    n: int
    temperature: float
    top_p: float
    top_k: int
    seed: int | None
    max_tokens: int
    logprobs: int
    logprobs_mode: str


def _sent(sampling: SamplingConfig) -> SentSampling:
    """The sampling a sampler without a record of its own was sent: the probe's, in the engines' names."""
    s = sampling
    return SentSampling(
        n=s.n,
        temperature=s.temperature,
        top_p=s.top_p,
        top_k=max(s.top_k, 0),
        seed=s.seed,
        max_tokens=s.max_tokens,
        logprobs=s.top_k_logprobs,
        logprobs_mode=s.logprobs_mode,
    )


def _described(desc: dict[str, Any], sampling: SamplingConfig) -> SideProvenance:
    """A server's side: what its description says (version, the dtype asked for); the rest is not visible."""
    engine = desc.get("engine")
    version = desc.get("version")
    return SideProvenance(
        source="probe",
        engine=engine,
        software={"vllm": version} if isinstance(version, str) else {},
        requested=Numerics(weights_dtype=desc.get("requested_dtype")),
        used=Numerics(weights_dtype=desc.get("dtype")),
        identities=Identities(sampling=to_json(_sent(sampling))),
    )


def model_side(
    model: Any,
    engine: str,
    requested: Numerics,
    device_names: list[str],
    *,
    moe: bool,
    fp32_lm_head: bool = False,
    max_batch_tokens: int | None = None,
    max_batch_sequences: int | None = None,
) -> SideProvenance:
    """A transformers model in this process: the trainer, or the ``hf`` sampler."""
    used = model_numerics(model)
    used.logits_dtype = "float32"  # both upcast the logits before the log-softmax
    if fp32_lm_head:
        used.lm_head_dtype = "float32"
    config = getattr(model, "config", None)
    used.moe_kernel = getattr(config, "_experts_implementation", None) if moe else "none (dense model)"
    return SideProvenance(
        source="probe",
        engine=engine,
        software=software(),
        requested=requested,
        used=used,
        environment=engine_environment(),
        deployment=Deployment(
            devices=device_names, max_batch_tokens=max_batch_tokens, max_batch_sequences=max_batch_sequences
        ),
    )


def trainer_side(trainer: Any, info: CheckpointInfo, sampling: SamplingConfig, source: str) -> SideProvenance:
    """The trainer's side: its model as loaded, the weights it loaded, the distribution it reads logprobs from."""
    from .hf_model import canonical_dtype, model_description

    cfg = trainer.cfg
    requested = Numerics(
        weights_dtype=canonical_dtype(cfg.dtype),
        lm_head_dtype="float32" if cfg.fp32_lm_head else None,
        attention_backend=cfg.attn_implementation,
    )
    names = model_description(trainer.model).device_names
    side = model_side(
        trainer.model,
        "transformers",
        requested,
        names,
        moe=info.is_moe,
        fp32_lm_head=cfg.fp32_lm_head,
        max_batch_tokens=cfg.batch_tokens,
    )
    side.source = source
    side.identities = identities(info, {**trainer_sampling(sampling.to_dict()), **NEUTRAL})
    side.fallbacks = _logged(engine=False)
    return side


def _logged(engine: bool) -> list[str] | None:
    """The fallbacks in the engines' output captured so far (vLLM's, or everyone else's); None when the output
    is not captured (``--verbose``, a library call outside the command line)."""
    from .engine_log import captured_text

    text = captured_text()
    if text is None:
        return None
    return fallbacks(text)[0 if engine else 1]


def record_side(manifest: dict[str, Any], role: str, side: SideProvenance) -> None:
    """Put one side into ``manifest``'s record, keeping the other (an earlier session's, on a resume)."""
    current = _current(manifest)
    current[role] = side
    manifest[rec.MANIFEST_KEY] = rec.to_record(
        rec.RunProvenance(rec.RECORD_VERSION, current["sampler"], current["trainer"])
    )


def refresh_fallbacks(manifest: dict[str, Any], source: str) -> None:
    """At the end of a run: the fallbacks in all the output captured, added to those of each side ``source`` (the
    command finishing) recorded; a side copied from another run keeps its own."""
    if rec.MANIFEST_KEY not in manifest:
        return
    current = _current(manifest)
    for role, engine in (("sampler", True), ("trainer", False)):
        side = current[role]
        found = _logged(engine)
        if found is None or side.source != source:
            continue
        side.fallbacks = list(dict.fromkeys([*(side.fallbacks or []), *found]))
    manifest[rec.MANIFEST_KEY] = rec.to_record(
        rec.RunProvenance(rec.RECORD_VERSION, current["sampler"], current["trainer"])
    )


def _current(manifest: dict[str, Any]) -> dict[str, SideProvenance]:
    """The record so far: this run's, or what the manifest of a run begun before provenance implies (a resume)."""
    from ..execution.read import of_manifest

    prov = of_manifest("", manifest).provenance
    return {"sampler": prov.sampler, "trainer": prov.trainer}


def copy_sampler_side(old: dict[str, Any], manifest: dict[str, Any]) -> None:
    """A rescore keeps the recorded run's sampler side (its samples are that engine's), or what its manifest
    implies when it was recorded before provenance."""
    from ..execution.read import of_manifest

    record_side(manifest, "sampler", of_manifest("", old).provenance.sampler)
