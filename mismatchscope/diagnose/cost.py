"""What each configuration costs, and which ones are worth their cost.

Throughput is measured apart from start-up: ``sampler_tokens_per_s`` is the
generated tokens over the ``generate`` time of the probe's sampling round
(the engine's start-up and one two-token warm-up generate are in
``startup_s``); ``trainer_tokens_per_s`` the scored tokens over the trainer's
scoring time. ``pipeline_tokens_per_s = tokens / (sampling + scoring time)``
is what an RL step would see from the two sides in series. Measured once per
configuration, minutes apart, it follows the machine's load; so a variant's
``relative_to_baseline`` (and the rate the picture plots, the baseline's
times it) comes from interleaved rounds against the baseline
(:mod:`.timing`): a median, with the rounds' range.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .document import Timing

PARETO_NAME = "diagnose_pareto"
"""the Pareto picture's file name (without ``.png``) in the ``--plots`` folder, checked before any work."""


def relative_rate(timing: Timing | None, rate: float | None, base_rate: float | None) -> float | None:
    """A variant's pipeline throughput relative to the baseline's: the median of its interleaved timing
    rounds (:mod:`.timing`) when it has them, else its single measurement (``rate``) over the baseline's."""
    if timing is not None:
        return timing.median
    return rate / base_rate if rate and base_rate else None


def pipeline_rate(tokens: int, sampling_s: float | None, scoring_s: float | None) -> float | None:
    total = (sampling_s or 0.0) + (scoring_s or 0.0)
    return tokens / total if tokens and total > 0 else None


def pareto_front(points: list[tuple[str, float, float]]) -> list[str]:
    """Names of the points no other point beats on both axes: (name, mismatch lower-better, throughput higher-better)."""
    front = []
    for name, m, t in points:
        if not (math.isfinite(m) and math.isfinite(t)):
            continue
        dominated = any(
            (m2 <= m and t2 >= t) and (m2 < m or t2 > t)
            for n2, m2, t2 in points
            if n2 != name and math.isfinite(m2) and math.isfinite(t2)
        )
        if not dominated:
            front.append(name)
    return front
