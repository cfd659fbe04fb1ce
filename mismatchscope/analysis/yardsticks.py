"""Readings of the headline numbers against published yardsticks, each with its source.

Kept apart from the arithmetic: a yardstick is an opinion with a citation,
and the policy-lag caveat depends on the run's metadata, not on the numbers.
"""

from __future__ import annotations

from ..metrics import K3_MEAN, RATIO_BAND, TV_TOKEN_MEAN
from .results import Reading, TokenMetrics


def interpret(metrics: TokenMetrics, run: dict | None) -> list[Reading]:
    """Short readings against published yardsticks, each with its source."""
    lag = policy_lag(run)
    out = [
        r
        for r in (_tv_reading(metrics.tv_token_mean, lag), _k3_reading(metrics.k3_mean), _band_reading(metrics))
        if r is not None
    ]
    if lag is not None:
        out.append(Reading("trainer_logprob", None, lag, "file metadata"))
    return out


def _tv_reading(tv: float | None, lag: str | None) -> Reading | None:
    """TV against verl's yardstick (a yardstick for numerics alone: with policy lag, not a verdict)."""
    if tv is None:
        return None
    if tv < 0.005:
        verdict = "normal (below 0.005)"
    elif tv <= 0.01:
        verdict = "elevated (0.005 to 0.01)"
    elif lag is None:
        verdict = "high (above 0.01): points at an inference precision problem"
    else:  # the yardstick is for numerics alone; lag moves the distributions by itself
        verdict = "high (above 0.01); with policy lag in the gap, not a verdict on inference precision"
    return Reading(
        TV_TOKEN_MEAN.name, tv, verdict, "verl FAQ on rollout_probs_diff (<0.005 normal, >0.01 precision problem)"
    )


def _k3_reading(k3: float | None) -> Reading | None:
    """k3 against NeMo-RL's typical value."""
    if k3 is None:
        return None
    reading = (
        "around or below the ~1e-3 typical of healthy runs"
        if k3 <= 2e-3
        else "well above the ~1e-3 typical of healthy runs"
    )
    return Reading(K3_MEAN.name, k3, reading, "NeMo-RL gen_kl_error (~1e-3 typical)")


def _band_reading(metrics: TokenMetrics) -> Reading | None:
    """The share of tokens outside the default token mask's band (``RATIO_BAND``): what it would reject."""
    cut = f"{RATIO_BAND[1]:g}"  # r > 2 or r < 1/2
    tail = metrics.ratio_tail_high.get(cut)
    low = metrics.ratio_tail_low.get(cut)
    if tail is None or low is None:
        return None
    frac = tail + low
    band = f"[{RATIO_BAND[0]:g}, {RATIO_BAND[1]:g}]"
    return Reading(
        f"ratio outside {band}",
        frac,
        f"{frac:.2%} of tokens would be rejected by a {band} token mask",
        "SkyRL/TRL token_mask defaults",
    )


def policy_lag(run: dict | None) -> str | None:
    """Why the trainer's weights differ from the sampler's, when the run says they do.

    Imports carry it in ``source.semantics`` (an asynchronous trainer, e.g.
    prime-rl), probes in ``semantics`` (``--trainer-checkpoint``); both set
    ``policy_lag: true`` and may explain it in ``policy_lag_note``.
    """
    for sem in ((run or {}).get("semantics"), ((run or {}).get("source") or {}).get("semantics")):
        if isinstance(sem, dict) and sem.get("policy_lag") is True:
            return sem.get("policy_lag_note") or (
                "trainer logprobs were taken at update time by an asynchronous trainer: "
                "the gap mixes policy lag with numerical mismatch"
            )
    return None
