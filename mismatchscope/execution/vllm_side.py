"""A vLLM engine's side, read off a started ``vllm.LLM``: its resolved configuration and the model it built.

What the engine resolved (``llm.llm_engine.vllm_config``) is what it runs:
the model dtype after ``auto``, prefix caching and chunked prefill after
their defaults, the CUDA graph and compilation modes after ``enforce_eager``,
the parallel layout. The attention kernel each layer runs is what the
engine's own model inspection names (``repr(llm)``: one call to its workers,
also across processes); the MoE kernel is what its log names at the INFO
level, else the experts' method in that inspection. Nothing here imports
vLLM: the engine passed in has.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Mapping
from typing import Any

from ..documents import json_edge
from .record import Deployment, Numerics
from .torch_side import dtype_name, torch_switches

SAMPLING_FIELDS = (
    "n",
    "temperature",
    "top_p",
    "top_k",
    "min_p",
    "presence_penalty",
    "frequency_penalty",
    "repetition_penalty",
    "seed",
    "max_tokens",
    "min_tokens",
    "logprobs",
    "prompt_logprobs",
    "ignore_eos",
)
"""what a ``SamplingParams`` holds that shapes the tokens and their logprobs."""
_BACKEND = re.compile(r"\bbackend=(\w+)")
_EXPERTS_METHOD = re.compile(r"\(quant_method\): (\w*MoE\w*)")


def _name(value: Any) -> str | None:
    """An enum's name (``CUDAGraphMode.NONE`` -> ``none``), a string as it is."""
    if value is None:
        return None
    name = getattr(value, "name", None)
    return (name if isinstance(name, str) else str(value)).lower()


@json_edge
def sampling_params(params: Any, logprobs_mode: str | None = None) -> dict[str, Any]:
    """A ``SamplingParams`` (or any object or mapping with its field names) as recorded: the fields that shape
    tokens and logprobs, ``top_k`` 0 when off (vLLM takes -1 and 0 alike), and the engine's logprobs mode."""
    get = params.get if isinstance(params, Mapping) else lambda k, d=None: getattr(params, k, d)
    out: dict[str, Any] = {}
    for key in SAMPLING_FIELDS:
        value = get(key, None)
        if isinstance(value, (bool, int, float, str)) or value is None:
            out[key] = value
    if isinstance(out.get("top_k"), int) and out["top_k"] < 0:
        out["top_k"] = 0
    out = {k: v for k, v in out.items() if v is not None}
    if logprobs_mode is not None:
        out["logprobs_mode"] = logprobs_mode
    return out


def engine_config(llm: Any) -> Any:
    return llm.llm_engine.vllm_config


def used_numerics(llm: Any, inspection: str, log_backends: tuple[str | None, str | None]) -> Numerics:
    """What the engine runs, from its resolved configuration, its model inspection and its log."""
    config = engine_config(llm)
    model, cache = config.model_config, config.cache_config
    weights = dtype_name(getattr(model, "dtype", None))
    head = _head_dtype(model) or weights
    kv = getattr(cache, "cache_dtype", None)
    backends = sorted(set(_BACKEND.findall(inspection)))
    attention = log_backends[0] or (", ".join(backends) if backends else None)
    experts = sorted(set(_EXPERTS_METHOD.findall(inspection)))
    moe = log_backends[1] or (", ".join(experts) if experts else "none (dense model)" if inspection else None)
    compilation = config.compilation_config
    scheduler = config.scheduler_config
    return Numerics(
        weights_dtype=weights,
        lm_head_dtype=head,
        kv_cache_dtype=weights if kv in (None, "auto") else str(kv),
        logits_dtype="float32",  # vLLM's sampler takes log-softmax of float32 logits
        attention_backend=attention,
        moe_kernel=moe,
        batch_invariant=_batch_invariant(),
        cuda_graphs=_name(getattr(compilation, "cudagraph_mode", None)),
        compile=_name(getattr(compilation, "mode", None)),
        prefix_caching=_bool(getattr(cache, "enable_prefix_caching", None)),
        chunked_prefill=_bool(getattr(scheduler, "enable_chunked_prefill", None)),
    )


def requested_numerics(args: Mapping[str, Any], environ: Mapping[str, str]) -> Numerics:
    """What the engine's arguments (and its environment) asked for: only what was asked, nothing defaulted."""
    eager = args.get("enforce_eager")
    given = args.get("hf_overrides")
    overrides: Mapping[str, Any] = given if isinstance(given, Mapping) else {}
    attention = _str(args.get("attention_backend") or environ.get("VLLM_ATTENTION_BACKEND"))
    invariant = environ.get("VLLM_BATCH_INVARIANT")
    out = Numerics(
        weights_dtype=_str(args.get("dtype")) if args.get("dtype") not in (None, "auto") else None,
        lm_head_dtype=_str(overrides.get("head_dtype")),
        kv_cache_dtype=_str(args.get("kv_cache_dtype")) if args.get("kv_cache_dtype") not in (None, "auto") else None,
        attention_backend=attention.upper() if attention else None,
        moe_kernel=_str(args.get("moe_backend")) if args.get("moe_backend") not in (None, "auto") else None,
        batch_invariant=invariant.strip() not in ("", "0") if invariant is not None else None,
        cuda_graphs="none" if eager is True else None,
        compile="none" if eager is True else None,
        prefix_caching=_bool(args.get("enable_prefix_caching")),
        chunked_prefill=_bool(args.get("enable_chunked_prefill")),
    )
    return out


def deployment(llm: Any, device_names: list[str] | None) -> Deployment:
    config = engine_config(llm)
    parallel, scheduler = config.parallel_config, config.scheduler_config
    tp = _int(getattr(parallel, "tensor_parallel_size", None))
    dp = _int(getattr(parallel, "data_parallel_size", None))
    expert = getattr(parallel, "enable_expert_parallel", None)
    ep = (tp or 1) * (dp or 1) if expert is True else 1 if expert is False else None
    return Deployment(
        devices=device_names,
        tensor_parallel=tp,
        pipeline_parallel=_int(getattr(parallel, "pipeline_parallel_size", None)),
        expert_parallel=ep,
        data_parallel=dp,
        max_batch_sequences=_int(getattr(scheduler, "max_num_seqs", None)),
        max_batch_tokens=_int(getattr(scheduler, "max_num_batched_tokens", None)),
    )


def software() -> dict[str, str | None]:
    vllm = sys.modules.get("vllm")
    from .torch_side import software as process_software

    return process_software(vllm=getattr(vllm, "__version__", None) if vllm is not None else None)


def inspection(llm: Any) -> str:
    """The engine's model inspection (``repr(llm)``); empty when the engine cannot give it."""
    try:
        return repr(llm)
    except Exception:  # an engine version without it, or a worker that does not answer: the kernels stay unknown
        return ""


def torch_in_engine(llm: Any) -> Numerics:
    """torch's switches, where the engine runs in this process (vLLM's in-process engine); unknown otherwise."""
    core = getattr(getattr(llm, "llm_engine", None), "engine_core", None)
    in_process = type(core).__name__ == "InprocClient"
    return torch_switches() if in_process else Numerics()


def _head_dtype(model: Any) -> str | None:
    head = getattr(model, "head_dtype", None)
    return dtype_name(head) if head is not None else None


def _batch_invariant() -> bool | None:
    envs = sys.modules.get("vllm.envs")
    value = getattr(envs, "VLLM_BATCH_INVARIANT", None) if envs is not None else None
    return bool(value) if isinstance(value, (bool, int)) else None


def _bool(value: Any) -> bool | None:
    return value if isinstance(value, bool) else None


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _str(value: Any) -> str | None:
    return None if value is None else str(value).removeprefix("torch.")
