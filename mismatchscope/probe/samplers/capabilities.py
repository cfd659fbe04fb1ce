"""What a sampler can do, declared in its registry entry (``samplers.SAMPLERS``): the checks and commands ask for
a capability (``samplers.capabilities_of``), never for the sampler's name, so a new sampler is accepted or refused
everywhere by what it declares."""

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
