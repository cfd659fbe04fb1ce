"""``mismatchscope.provenance(...)``: both sides' record, collected in one call from what a training loop holds.

    rec = Recorder("runs/rl", provenance=mismatchscope.provenance(
        sampler=llm,                      # a vllm.LLM in this process, or what you know of a remote one (a mapping)
        trainer=model,                    # the torch / transformers model the loss runs
        checkpoint="ckpt/step-0",         # the weights, tokenizer, chat template and generation config both loaded
        sampling=sampling_params,         # the vllm.SamplingParams the engine received
        trainer_sampling={"temperature": 0.7},  # what the trainer divides its logits by (and truncates to)
        stack="verl 0.5.0",
    ))

A live object is read where it is (nothing is imported for it); a mapping is
taken as the record's own layout, any subset of it (``{"software": {"vllm":
"0.33.0"}, "used": {"attention_backend": "FLASH_ATTN"}}``), for a side that runs
elsewhere. What neither gives stays null: not recorded. Every text passes
through :mod:`mismatchscope.redact`; no path is recorded unless ``paths=True``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..errors import UsageError
from ..redact import redact_obj
from .digests import checkpoint_identities, hash_files
from .environment import engine_environment
from .record import RECORD_VERSION, Identities, RunProvenance, SideProvenance
from .vllm_side import sampling_params

RECORDER = "recorder"


def provenance(
    *,
    sampler: Any = None,
    trainer: Any = None,
    checkpoint: str | os.PathLike | None = None,
    trainer_checkpoint: str | os.PathLike | None = None,
    sampling: Any = None,
    trainer_sampling: Mapping[str, Any] | None = None,
    stack: str | None = None,
    paths: bool = False,
) -> RunProvenance:
    """Both sides' provenance, from the objects a training loop holds (see the module's docstring).

    ``checkpoint``: the folder both sides loaded (``trainer_checkpoint``: the trainer's, when it loaded another);
    its files are hashed now. ``sampling``: a ``SamplingParams`` or a mapping of its fields. ``trainer_sampling``:
    the temperature, top_p and top_k the trainer applies to its logits. ``stack``: the RL framework and its version.
    """
    env = engine_environment(paths=paths)
    s = _side("sampler", sampler, env, paths)
    t = _side("trainer", trainer, env, paths)
    sampler_ids = _identities(checkpoint)
    trainer_ids = _identities(trainer_checkpoint) if trainer_checkpoint is not None else _identities(checkpoint)
    _fill_identities(s, sampler_ids)
    _fill_identities(t, trainer_ids)
    if sampling is not None:
        mode = _logprobs_mode(sampler)
        s.identities.sampling = redact_obj(sampling_params(sampling, mode))
    if trainer_sampling is not None:
        t.identities.sampling = redact_obj(sampling_params(trainer_sampling))
    if stack is not None:
        for side in (s, t):
            side.software["rl_stack"] = str(redact_obj(str(stack)))
    return RunProvenance(RECORD_VERSION, s, t)


def _side(role: str, obj: Any, env: dict[str, str], paths: bool) -> SideProvenance:
    if obj is None:
        return SideProvenance(source=RECORDER)
    if isinstance(obj, Mapping):
        return side_from_mapping(obj, RECORDER, role, paths=paths)
    if hasattr(obj, "llm_engine"):  # vllm.LLM
        from .vllm_side import deployment, engine_config, inspection, software, torch_in_engine, used_numerics

        used = used_numerics(obj, inspection(obj), (None, None))
        switches = torch_in_engine(obj)
        for name in ("deterministic", "tf32_matmul", "tf32_cudnn", "float32_matmul_precision"):
            setattr(used, name, getattr(switches, name))
        device = str(getattr(engine_config(obj).device_config, "device", "")) or None
        return SideProvenance(
            source=RECORDER,
            engine="vllm",
            software=software(),
            used=used,
            environment=env,
            deployment=deployment(obj, [device] if device else None),
        )
    if hasattr(obj, "parameters"):  # a torch module
        from .torch_side import model_deployment, model_numerics, software

        engine = "transformers" if type(obj).__module__.startswith("transformers") else "torch"
        return SideProvenance(
            source=RECORDER,
            engine=engine,
            software=software(),
            used=model_numerics(obj),
            environment=env,
            deployment=model_deployment(obj),
        )
    raise UsageError(
        f"provenance: {role}= takes a vllm.LLM, a torch model or a mapping of the record's fields, "
        f"not {type(obj).__name__}",
        hint="pass what you know of a side that runs elsewhere as a mapping, e.g. {'software': {'vllm': '0.33.0'}}",
    )


def side_from_mapping(
    data: Mapping[str, Any], source: str, role: str = "side", *, paths: bool = False
) -> SideProvenance:
    """A side from any subset of the record's own layout, every text redacted, an environment kept as the
    process's is (the engines' and torch's variables, no credential, no path unless ``paths``); a key or a type
    the record does not declare is a :class:`UsageError` naming it."""
    from ..documents import from_json, to_json

    given = dict(data)
    if isinstance(given.get("environment"), Mapping):
        given["environment"] = engine_environment(
            {str(k): str(v) for k, v in given["environment"].items()}, paths=paths
        )
    base = to_json(SideProvenance(source=source))
    merged = _merge(base, redact_obj(given))
    try:
        return from_json(SideProvenance, merged)
    except TypeError as e:
        raise UsageError(
            f"provenance: {role}= does not fit the record: {e}",
            hint="use the record's own field names (docs/provenance.md lists them)",
        ) from None


def _merge(base: Any, given: Any) -> Any:
    if isinstance(base, dict) and isinstance(given, Mapping) and base:
        out = dict(base)
        for k, v in given.items():
            out[k] = _merge(base.get(k), v) if k in base else v
        return out
    return given


def _identities(path: str | os.PathLike | None) -> Identities | None:
    if path is None:
        return None
    root = Path(path)
    if not root.is_dir():
        raise UsageError(f"provenance: checkpoint {str(root)!r} is not a folder", hint="pass the checkpoint's folder")
    weights = sorted(p.name for p in root.glob("*.safetensors") if p.is_file())
    return checkpoint_identities(root, hash_files(root, weights)[1], weights, None)


def _fill_identities(side: SideProvenance, found: Identities | None) -> None:
    """The checkpoint's identities where the side's own record leaves them null."""
    if found is None:
        return
    ids = side.identities
    for name in ("weights", "tokenizer", "chat_template", "generation_config"):
        if getattr(ids, name) is None:
            setattr(ids, name, getattr(found, name))


def _logprobs_mode(sampler: Any) -> str | None:
    if hasattr(sampler, "llm_engine"):
        mode = getattr(sampler.llm_engine.vllm_config.model_config, "logprobs_mode", None)
        return str(mode) if mode is not None else None
    if isinstance(sampler, Mapping):
        mode = (sampler.get("identities") or {}).get("sampling", {}).get("logprobs_mode")
        return str(mode) if mode is not None else None
    return None


def record_of(value: Any) -> RunProvenance:
    """What ``Recorder(provenance=...)`` takes: a record from :func:`provenance`, or its JSON form."""
    if isinstance(value, RunProvenance):
        return value
    if isinstance(value, Mapping):
        from .record import read_record

        try:
            return read_record(dict(value))
        except TypeError as e:
            raise UsageError(
                f"provenance= is not a provenance record: {e}", hint="build it with mismatchscope.provenance(...)"
            ) from None
    raise UsageError(
        f"provenance= takes what mismatchscope.provenance(...) returns, not {type(value).__name__}",
        hint="build it with mismatchscope.provenance(...)",
    )
