"""Samplers under test, by name, and what each can do.

Each sampler is a class taking ``(SamplerConfig, CheckpointInfo)`` and implementing :class:`Sampler`. Adding one is
one module and one entry in :data:`SAMPLERS`: where its class is, and its :class:`Capabilities`, which every check
reads (:func:`capabilities_of`) instead of the sampler's name. Importing this package imports no sampler module (a
check of the command line needs only the declarations), and a sampler module imports vLLM/torch inside the code
that needs it.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass

from mismatchscope.errors import UsageError
from mismatchscope.probe.checkpoint import CheckpointInfo
from mismatchscope.probe.samplers.base import Sampler
from mismatchscope.probe.samplers.capabilities import Capabilities
from mismatchscope.probe.types import SamplerConfig, SamplingConfig


@dataclass(frozen=True)
class SamplerEntry:
    """A sampler in the registry: its class (``module:Class`` under ``probe/samplers/``, loaded on first use) and
    what it can do."""

    path: str
    capabilities: Capabilities

    def load(self) -> type:
        module, name = self.path.split(":")
        return getattr(importlib.import_module(f"{__name__}.{module}"), name)


SAMPLERS: dict[str, SamplerEntry] = {
    "vllm": SamplerEntry(
        "vllm_offline:VLLMOfflineSampler",
        Capabilities(starts_here=True, can_prefill=True, logprobs_mode_at_start=True, capture="vllm", package="vllm"),
    ),
    "vllm-server": SamplerEntry("vllm_server:VLLMServerSampler", Capabilities(remote=True)),
    "trl-server": SamplerEntry("trl_server:TRLServerSampler", Capabilities(remote=True)),
    "hf": SamplerEntry(
        "hf_generate:HFGenerateSampler",
        Capabilities(
            transformers=True,
            starts_here=True,
            can_prefill=True,
            has_full_rows=True,
            can_zero=True,
            capture="transformers",
        ),
    ),
}
ZERO_SAMPLER = "hf_zero:HFZeroSampler"
"""the ``hf`` sampler under the zero-mismatch profile (``probe/zero.py``)."""


def capabilities_of(kind: str) -> Capabilities:
    """What the sampler named ``kind`` declares (an unknown name declares nothing)."""
    entry = SAMPLERS.get(kind)
    return entry.capabilities if entry is not None else Capabilities()


def kinds_with(capability: str) -> list[str]:
    """The samplers that declare ``capability``, in the registry's order (for a hint that names them)."""
    return [k for k, e in SAMPLERS.items() if getattr(e.capabilities, capability)]


def make_sampler(cfg: SamplerConfig, info: CheckpointInfo, *, sampling: SamplingConfig | None = None) -> Sampler:
    """The sampler ``cfg.kind`` for this checkpoint.

    ``sampling`` is optional: given, engines that fix sampling-related options
    at start-up (vLLM's ``logprobs_mode``) start now and fail fast; otherwise
    they start on the first ``sample`` call.
    """
    try:
        entry = SAMPLERS[cfg.kind]
    except KeyError:
        raise UsageError(f"unknown sampler {cfg.kind!r}", hint=f"use one of {', '.join(SAMPLERS)}") from None
    if entry.capabilities.can_zero and cfg.zero:
        entry = SamplerEntry(ZERO_SAMPLER, entry.capabilities)  # the zero-mismatch profile (probe/zero.py)
    return entry.load()(cfg, info, sampling=sampling)


__all__ = ["SAMPLERS", "Capabilities", "Sampler", "SamplerEntry", "capabilities_of", "kinds_with", "make_sampler"]
