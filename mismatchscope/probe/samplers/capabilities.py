"""What a sampler can do, declared by the sampler: the checks and commands ask for a capability, never for the
sampler's name, so a new sampler is accepted or refused everywhere by what it declares.

Each sampler class carries its :class:`Capabilities` as ``capabilities``; :func:`capabilities` finds them by the
``--sampler`` name without starting an engine (the sampler modules import their engines inside their code).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True)
class Capabilities:
    remote: bool = False
    """a server reached at ``--url``: its engine runs elsewhere, its options are the server's."""
    transformers: bool = False
    """the engine is transformers: the trainer's own program, which takes no vLLM-only dtype."""
    starts_here: bool = False
    """the engine starts in this process (or a child of it): diagnose runs each configuration of it, and
    ``rescore --locate`` starts it again."""
    can_prefill: bool = False
    """scores a prefill of its own completions (``--sampler-prefill``)."""
    has_full_rows: bool = False
    """gives every token's whole vocabulary row (``--full-vocab``)."""
    can_zero: bool = False
    """runs the zero-mismatch profile (``--zero``): the trainer's kernels, the same program on both sides."""
    logprobs_mode_at_start: bool = False
    """the logprobs mode is fixed when the engine starts (an engine argument that must agree with the probe's)."""
    capture: Literal["vllm", "transformers"] | None = None
    """whose forward pass a localisation hooks: vLLM's model runner or a transformers model (None: none)."""
    package: str | None = None
    """the package the engine needs installed, checked before the run directory is made."""


def capabilities(kind: str) -> Capabilities:
    """The capabilities the sampler named ``kind`` declares (an unknown name declares none)."""
    from . import SAMPLERS

    factory = SAMPLERS.get(kind)
    return getattr(factory, "capabilities", Capabilities()) if factory is not None else Capabilities()


def kinds_with(capability: str) -> list[str]:
    """The samplers that declare ``capability``, in the registry's order (for a hint that names them)."""
    from . import SAMPLERS

    return [k for k in SAMPLERS if getattr(capabilities(k), capability)]
