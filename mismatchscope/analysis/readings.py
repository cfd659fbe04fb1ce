"""Readings of the headline numbers against published yardsticks, each with its source.

Kept apart from the arithmetic: a yardstick is an opinion with a citation,
and the policy-lag caveat depends on the run's metadata, not on the numbers.
"""

from __future__ import annotations

from ..metrics import K3_MEAN, RATIO_BAND, TV_TOKEN_MEAN
from .results import Reading, TokenMetrics


def interpret(metrics: TokenMetrics, run: dict | None) -> list[Reading]:
    """Short readings against published yardsticks, each with its source."""
    out = []
    lag = policy_lag(run)
    tv = metrics.tv_token_mean
    if tv is not None:
        if tv < 0.005:
            verdict = "normal (below 0.005)"
        elif tv <= 0.01:
            verdict = "elevated (0.005 to 0.01)"
        elif lag is None:
            verdict = "high (above 0.01): points at an inference precision problem"
        else:  # the yardstick is for numerics alone; lag moves the distributions by itself
            verdict = "high (above 0.01); with policy lag in the gap, not a verdict on inference precision"
        out.append(
            Reading(
                TV_TOKEN_MEAN.name,
                tv,
                verdict,
                "verl FAQ on rollout_probs_diff (<0.005 normal, >0.01 precision problem)",
            )
        )
    k3 = metrics.k3_mean
    if k3 is not None:
        reading = (
            "around or below the ~1e-3 typical of healthy runs"
            if k3 <= 2e-3
            else "well above the ~1e-3 typical of healthy runs"
        )
        out.append(Reading(K3_MEAN.name, k3, reading, "NeMo-RL gen_kl_error (~1e-3 typical)"))
    cut = f"{RATIO_BAND[1]:g}"  # r > 2 or r < 1/2
    tail = metrics.ratio_tail_high.get(cut)
    low = metrics.ratio_tail_low.get(cut)
    if tail is not None and low is not None:
        frac = tail + low
        band = f"[{RATIO_BAND[0]:g}, {RATIO_BAND[1]:g}]"
        out.append(
            Reading(
                f"ratio outside {band}",
                frac,
                f"{frac:.2%} of tokens would be rejected by a {band} token mask",
                "SkyRL/TRL token_mask defaults",
            )
        )
    if lag is not None:
        out.append(Reading("trainer_logprob", None, lag, "file metadata"))
    return out


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
