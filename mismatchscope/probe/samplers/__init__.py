"""Samplers under test, by name.

Each sampler is a class taking ``(SamplerConfig, CheckpointInfo)`` and
implementing :class:`Sampler`. Adding one is one module and one entry in
:data:`SAMPLERS`. Importing this package imports no engine: every module
imports vLLM/torch inside the code that needs it.
"""

from __future__ import annotations

from collections.abc import Callable

from mismatchscope.errors import UsageError
from mismatchscope.probe.checkpoint import CheckpointInfo
from mismatchscope.probe.samplers.base import Sampler
from mismatchscope.probe.samplers.hf_generate import HFGenerateSampler
from mismatchscope.probe.samplers.hf_zero import HFZeroSampler
from mismatchscope.probe.samplers.vllm_offline import VLLMOfflineSampler
from mismatchscope.probe.samplers.vllm_server import VLLMServerSampler
from mismatchscope.probe.types import SamplerConfig, SamplingConfig

SAMPLERS: dict[str, Callable[..., Sampler]] = {
    "vllm": VLLMOfflineSampler,
    "vllm-server": VLLMServerSampler,
    "hf": HFGenerateSampler,
}


def make_sampler(cfg: SamplerConfig, info: CheckpointInfo, *, sampling: SamplingConfig | None = None) -> Sampler:
    """The sampler ``cfg.kind`` for this checkpoint.

    ``sampling`` is optional: given, engines that fix sampling-related options
    at start-up (vLLM's ``logprobs_mode``) start now and fail fast; otherwise
    they start on the first ``sample`` call.
    """
    try:
        factory = SAMPLERS[cfg.kind]
    except KeyError:
        raise UsageError(f"unknown sampler {cfg.kind!r}", hint=f"use one of {', '.join(SAMPLERS)}") from None
    if cfg.kind == "hf" and cfg.zero:
        factory = HFZeroSampler  # the zero-mismatch profile (probe/zero.py)
    return factory(cfg, info, sampling=sampling)


__all__ = ["SAMPLERS", "Sampler", "make_sampler"]
