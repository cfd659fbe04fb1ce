"""The causes ``doctor`` can name: one module each, one registry.

A new cause is a module here that builds one ``registry.Cause`` (its detector,
its correction or share model, its rivals) and one entry in :data:`REGISTRY`,
in the order the detectors run; docs/doctor.md documents it. Nothing else
lists causes: the document's schema, the examination and the renderers read
them from here.
"""

from __future__ import annotations

from ..registry import Cause
from . import (
    contract_difference,
    fallback,
    log_base,
    low_precision,
    misaligned_sequences,
    off_policy_minibatches,
    padding,
    persists_in_float32,
    policy_lag,
    prompt_boundary,
    replay_invalid,
    retokenized,
    routing_replay,
    sharpening,
    shifted,
    step_jump,
    temperature,
    truncation,
)

REGISTRY: tuple[Cause, ...] = (
    contract_difference.CAUSE,
    retokenized.CAUSE,
    shifted.CAUSE,
    temperature.CAUSE,
    truncation.CAUSE,
    log_base.CAUSE,
    policy_lag.CAUSE,
    off_policy_minibatches.CAUSE,
    misaligned_sequences.CAUSE,
    padding.CAUSE,
    prompt_boundary.CAUSE,
    low_precision.CAUSE,
    routing_replay.CAUSE,
    replay_invalid.CAUSE,
    step_jump.CAUSE,
    sharpening.CAUSE,
    persists_in_float32.CAUSE,
    fallback.CAUSE,
)
"""every cause, in the order its detector runs."""

NUMERICS = "numerics"
"""the closing finding: what the gap is when no cause explains it (``examine.numerics``), not a registered cause."""

BY_NAME: dict[str, Cause] = {c.name: c for c in REGISTRY}


def cause_names() -> tuple[str, ...]:
    """Every id a finding can carry: the registry's, then numerics."""
    return (*BY_NAME, NUMERICS)
