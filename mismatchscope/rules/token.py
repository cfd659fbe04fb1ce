"""Token-level masking and correction rules (docs/rules.md).

Each function is pure: ``(config, terms, advantage_T) -> action_T`` with
actions KEEP / REJECT / REWEIGHT. Comparisons use the ratio ``r`` or ``p - q``
exactly as the sources state them, so thresholds mean what users expect.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import cast

import numpy as np

from ..divergence import TokenTerms, binary_kl_candidates, binary_kl_logs_both
from .base import (
    NONNEG,
    RATIO_HIGH,
    RATIO_LOW,
    REJECT,
    REWEIGHT,
    UNIT,
    Range,
    Statistic,
    param,
    register,
    where,
)

R_LOW = (0.1, 0.2, 0.3, 0.5, 0.7, 0.8, 0.9)
R_HIGH = (1.1, 1.25, 1.5, 2.0, 3.0, 5.0, 10.0)
PQ = (0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.3, 0.5)
"""sweep grids: lower and upper ratio bounds, probability gaps."""


RATIO = Statistic("ratio", "r = p/q", lambda c, t: t.ratio_T)
P_MINUS_Q = Statistic("p_minus_q", "p - q", lambda c, t: t.p_T - t.q_T)
ABS_P_MINUS_Q = Statistic("abs_p_minus_q", "|p - q|", lambda c, t: t.tv_T, absolute_of=P_MINUS_Q)
"""what the token rules threshold, shared where several read the same quantity (one audit column each)."""


def _logs(t: TokenTerms) -> tuple[np.ndarray, np.ndarray]:
    """(log q, log p): ``token_terms`` always fills them; the annotation allows None for hand-built terms."""
    return cast(np.ndarray, t.lq_T), cast(np.ndarray, t.lp_T)


def _exps(t: TokenTerms) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(q, p, 1 - q, 1 - p) as the binary KLs take them from a batch's terms (:func:`binary_kl_logs_both`)."""
    return t.q_T, t.p_T, t.one_minus_q_T, t.one_minus_p_T


def _outside(r: np.ndarray, lo: float, hi: float) -> np.ndarray:
    """``r`` outside the band ``[lo, hi]`` (its edges inside): the predicate of icepop, token-mask and cispo."""
    return (r < lo) | (r > hi)


def _on_edges(r: np.ndarray, lo: float, hi: float) -> np.ndarray:
    """``r`` exactly on an edge of ``[lo, hi]``, where a ``<`` and a ``<=`` would disagree."""
    return (r == lo) | (r == hi)


@dataclass(frozen=True)
class IcePopConfig:
    alpha: float = param(0.5, "reject when r < alpha", range=RATIO_LOW, grid=R_LOW)
    beta: float = param(5.0, "reject when r > beta", range=RATIO_HIGH, grid=R_HIGH)


@register(
    "icepop",
    level="token",
    config=IcePopConfig,
    uses_advantage=False,
    acts="reject",
    source="Ring-1T (arXiv 2510.18855); verl decoupled_token_icepop; slime icepop_function",
    summary="reject tokens whose ratio r = p/q leaves [alpha, beta]",
    quantity="r = p/q",
    ratio_thresholds=lambda c: [("alpha", c.alpha), ("beta", c.beta)],
    drawn_by_default=True,
    at_threshold=lambda c, t: _on_edges(t.ratio_T, c.alpha, c.beta),
    statistics=(RATIO,),
)
def icepop(cfg: IcePopConfig, t: TokenTerms, advantage_T: np.ndarray | None) -> np.ndarray:
    """IcePop: drop the gradient of tokens whose ratio falls outside the band."""
    return where(_outside(t.ratio_T, cfg.alpha, cfg.beta), REJECT)


@dataclass(frozen=True)
class IPOConfig:
    delta: float = param(
        0.3,
        "reject when |p - q| > delta (prime-rl's pending PR #3586; its main still defaults to 0.1, "
        "ipo@prime-rl; 0.2 at IPO's first release: pass --rule ipo:delta=0.2)",
        range=UNIT,
        grid=PQ,
    )


@register(
    "ipo",
    level="token",
    config=IPOConfig,
    uses_advantage=False,
    acts="reject",
    source="prime-rl ipo_loss_fn / IPOLossConfig (0.3 in the pending PR #3586; main's default is 0.1, since #2798; "
    "0.2 at #1930)",
    summary="reject tokens whose probability gap |p - q| exceeds delta",
    quantity="p - q",
    drawn_by_default=True,
    at_threshold=lambda c, t: t.tv_T == c.delta,
    statistics=(ABS_P_MINUS_Q,),
)
def ipo(cfg: IPOConfig, t: TokenTerms, advantage_T: np.ndarray | None) -> np.ndarray:
    """IPO mask: a probability-space band, blind to tiny-probability tokens."""
    return where(t.tv_T > cfg.delta, REJECT)


@dataclass(frozen=True)
class KPopConfig:
    phi: float = param(
        0.1,
        "reject when max(D(q||p), D(p||q)) > phi (binary KL, nats)",
        range=NONNEG,
        grid=(1e-4, 1e-3, 0.01, 0.05, 0.1, 0.3, 1.0),
    )
    eps: float = param(
        1e-6,
        "clamp p and q to [eps, 1 - eps] first, as prime-rl and verl do (0: no clamp)",
        range=Range(0.0, 0.5, hi_open=True),
    )


@register(
    "kpop",
    level="token",
    config=KPopConfig,
    uses_advantage=False,
    acts="reject",
    source="KPop (Ant Group Ring team); AReaL #1405; verl #6800 (rollout_rs=binary_kl); prime-rl #3283",
    summary="reject tokens whose two-outcome KL between p and q exceeds phi in either direction; "
    "p and q clamped to [eps, 1 - eps] (1e-6, as prime-rl), so a logprob that rounds to 0 is not an infinite KL",
    quantity="max(D(q||p), D(p||q)), D(a||b) = a log(a/b) + (1-a) log((1-a)/(1-b))",
    drawn_by_default=True,
    at_threshold=lambda c, t: np.maximum(*binary_kl_logs_both(*_logs(t), c.eps)) == c.phi,
    notes="p and q are clamped to [eps, 1 - eps] before the KL, eps = 1e-6 by default, as prime-rl (#3283) and verl's "
    "binary_kl do: an fp32 logprob of exactly 0 (a near-certain token) would otherwise make D(q||p) infinite and "
    "reject a token both sides agree on. eps=0 turns the clamp off. The KL is computed from the logprobs "
    "(1 - q as -expm1(log q)), so tokens near 0 and 1 keep their precision and equal logprobs give exactly 0.",
    statistics=(
        Statistic(
            "binary_kl_max",
            "max(D(q||p), D(p||q)), p and q clamped to [eps, 1 - eps]",
            lambda c, t: np.maximum(*binary_kl_logs_both(*_logs(t), c.eps, _exps(t))),
            params=("eps",),
        ),
    ),
)
def kpop(cfg: KPopConfig, t: TokenTerms, advantage_T: np.ndarray | None) -> np.ndarray:
    """KPop: a symmetric binary-KL trust region on each sampled token.

    Clamped by default: an fp32 logprob of exactly 0 (a near-certain token)
    would otherwise make D(q||p) infinite and reject a token both sides agree on.
    """
    lq, lp = _logs(t)
    maybe = binary_kl_candidates(t, cfg.phi)  # the others are surely below phi
    if maybe is None:
        return where(np.maximum(*binary_kl_logs_both(lq, lp, cfg.eps)) > cfg.phi, REJECT)
    hit = np.zeros(lq.size, bool)
    hit[maybe] = np.maximum(*binary_kl_logs_both(lq[maybe], lp[maybe], cfg.eps)) > cfg.phi
    return where(hit, REJECT)


ZERO_ADVANTAGE = ("negative", "keep")
"""where a token with A == 0 goes in the DPPO rules: the negative branch (the reference code, verl, prime-rl)
or nowhere, never masked (SkyRL: only A < 0 takes the negative branch)."""


def _zero_advantage_param():
    return param(
        "negative",
        "A == 0: 'negative' judges it as A < 0 (reference code); 'keep' never masks it (SkyRL)",
        choices=ZERO_ADVANTAGE,
    )


def _dppo_branches(zero_advantage: str, advantage_T: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(positive, negative) branch of each token: A > 0, and A <= 0 or A < 0 by ``zero_advantage``."""
    pos = advantage_T > 0
    return pos, (~pos if zero_advantage == "negative" else advantage_T < 0)


@dataclass(frozen=True)
class DPPOTVConfig:
    delta_low: float = param(0.15, "negative branch: reject when p - q < -delta_low", range=UNIT, grid=PQ)
    delta_high: float = param(0.15, "A > 0: reject when p - q > delta_high (prime-rl uses 0.2)", range=UNIT, grid=PQ)
    zero_advantage: str = _zero_advantage_param()


@register(
    "dppo-tv",
    level="token",
    config=DPPOTVConfig,
    uses_advantage=True,
    acts="reject",
    source="DPPO arXiv 2602.04879; sail-sg/Stable-RL _compute_token_mask_for_policy_loss",
    summary="reject when p - q moves past delta in the advantage's direction (A == 0 counts as negative, as in the "
    "reference code; zero_advantage=keep or the skyrl reading: SkyRL's A < 0)",
    quantity="p - q",
    at_threshold=lambda c, t: (t.p_T - t.q_T == c.delta_high) | (t.p_T - t.q_T == -c.delta_low),
    statistics=(P_MINUS_Q,),
)
def dppo_tv(cfg: DPPOTVConfig, t: TokenTerms, advantage_T: np.ndarray) -> np.ndarray:
    diff = t.p_T - t.q_T
    pos, neg = _dppo_branches(cfg.zero_advantage, advantage_T)
    return where((pos & (diff > cfg.delta_high)) | (neg & (diff < -cfg.delta_low)), REJECT)


def dppo_binary_kl(
    lq_T: np.ndarray,
    lp_T: np.ndarray,
    eps: float,
    exps: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None,
) -> np.ndarray:
    """D = q (log q - log p) + (1-q) log((1-q+eps) / (1-p+eps)), the DPPO reference code's binary KL.

    The epsilon keeps D finite where the trainer's p is exactly 1 (an fp32
    logprob of 0): the reference code, verl and SkyRL all add 1e-8 there.
    Evaluated in float64 from the logprobs, 1 - p as -expm1(log p): a
    logprob of -1e-9 is p = 1 - 1e-9 here, where an fp32 evaluation rounds
    it to 1. ``eps = 0`` is the plain formula (+inf at p = 1 < q's side).
    ``exps``: ``(exp(lq), -expm1(lq), -expm1(lp))`` where the caller holds them (a batch's terms), the same
    values, so the same result to the bit.
    """
    lq = np.asarray(lq_T, dtype=np.float64)
    lp = np.asarray(lp_T, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        q, q1, p1 = (np.exp(lq), -np.expm1(lq), -np.expm1(lp)) if exps is None else exps
        a = np.where(q > 0, q * (lq - lp), 0.0)
        b = np.where(q1 > 0, q1 * (np.log(q1 + eps) - np.log(p1 + eps)), 0.0)
    return np.maximum(a + b, 0.0)


@dataclass(frozen=True)
class DPPOKLConfig:
    delta: float = param(
        0.05,
        "reject when the binary KL D(q || p) > delta in the advantage's direction",
        range=NONNEG,
        grid=(1e-4, 1e-3, 0.01, 0.05, 0.1, 0.3),
    )
    eps: float = param(
        1e-8,
        "added to 1 - q and 1 - p inside the log, as the reference code, verl and SkyRL do "
        "(keeps D finite at p = 1; 0: the plain formula, D = inf there)",
        range=Range(0.0, 0.5, hi_open=True),
    )
    zero_advantage: str = _zero_advantage_param()


@register(
    "dppo-kl",
    level="token",
    config=DPPOKLConfig,
    uses_advantage=True,
    acts="reject",
    source="DPPO arXiv 2602.04879; sail-sg/Stable-RL _compute_token_mask_for_policy_loss",
    summary="binary-KL variant of dppo-tv: D = q log(q/p) + (1-q) log((1-q+eps)/(1-p+eps)); A == 0 counts as negative",
    quantity="D(q||p) = q log(q/p) + (1-q) log((1-q+eps)/(1-p+eps))",
    at_threshold=lambda c, t: dppo_binary_kl(*_logs(t), c.eps) == c.delta,
    notes="The complement term carries the reference code's epsilon (1e-8, parameter eps): a trainer logprob of "
    "exactly 0 (p = 1) gives a finite D instead of +inf. At q = 0.999, p = 1 the reference's D is "
    "0.999 ln 0.999 + 0.001 ln((0.001 + 1e-8) / 1e-8) = 0.0105: kept at delta 0.05. eps=0 gives the plain "
    "formula. D is computed in float64 from the logprobs (1 - p as -expm1(log p)).",
    statistics=(
        Statistic(
            "binary_kl_qp",
            "D(q||p) = q log(q/p) + (1-q) log((1-q+eps)/(1-p+eps))",
            lambda c, t: dppo_binary_kl(*_logs(t), c.eps, (t.q_T, t.one_minus_q_T, t.one_minus_p_T)),
            params=("eps",),
        ),
    ),
)
def dppo_kl(cfg: DPPOKLConfig, t: TokenTerms, advantage_T: np.ndarray) -> np.ndarray:
    pos, neg = _dppo_branches(cfg.zero_advantage, advantage_T)
    moved = (pos & (t.p_T > t.q_T)) | (neg & (t.p_T < t.q_T))  # the KL decides only where p moved the advantage's way
    # the epsilon raises D by at most eps (where p < q), so the chi-square screen, which leaves a factor 4 of margin,
    # still holds while eps <= 3/4 delta
    maybe = binary_kl_candidates(t, cfg.delta) if cfg.eps <= 0.75 * cfg.delta else None
    maybe = maybe[moved[maybe]] if maybe is not None else np.flatnonzero(moved)
    hit = np.zeros(t.p_T.size, bool)
    lq, lp = _logs(t)
    hit[maybe] = dppo_binary_kl(lq[maybe], lp[maybe], cfg.eps) > cfg.delta
    return where(hit, REJECT)


@dataclass(frozen=True)
class TISConfig:
    C: float = param(2.0, "truncate the importance weight to C when r > C", range=RATIO_HIGH, grid=R_HIGH)


@register(
    "tis",
    level="token",
    config=TISConfig,
    uses_advantage=False,
    acts="reweight",
    source="Yao et al., 'Your Efficient RL Framework Secretly Brings You Off-Policy RL Training'; verl #2953",
    summary="truncated importance sampling: reweight tokens with r > C",
    quantity="r = p/q",
    ratio_thresholds=lambda c: [("C", c.C)],
    drawn_by_default=True,
    at_threshold=lambda c, t: t.ratio_T == c.C,
    statistics=(RATIO,),
    weight=lambda c, t: np.minimum(t.ratio_T, c.C),
)
def tis(cfg: TISConfig, t: TokenTerms, advantage_T: np.ndarray | None) -> np.ndarray:
    return where(t.ratio_T > cfg.C, REWEIGHT)


@dataclass(frozen=True)
class TokenMaskConfig:
    lo: float = param(0.5, "reject when r < lo", range=RATIO_LOW, grid=R_LOW)
    hi: float = param(2.0, "reject when r > hi", range=RATIO_HIGH, grid=R_HIGH)


@register(
    "token-mask",
    level="token",
    config=TokenMaskConfig,
    uses_advantage=False,
    acts="reject",
    source="SkyRL token_mask_is_threshold_*; TRL token_mask mode",
    summary="reject tokens whose ratio leaves [lo, hi]",
    quantity="r = p/q",
    ratio_thresholds=lambda c: [("lo", c.lo), ("hi", c.hi)],
    drawn_by_default=True,
    at_threshold=lambda c, t: _on_edges(t.ratio_T, c.lo, c.hi),
    statistics=(RATIO,),
)
def token_mask(cfg: TokenMaskConfig, t: TokenTerms, advantage_T: np.ndarray | None) -> np.ndarray:
    """The same band as icepop under SkyRL's and TRL's names (and their default upper bound)."""
    return where(_outside(t.ratio_T, cfg.lo, cfg.hi), REJECT)


def _one_pm_eps(c) -> list[tuple[str, float]]:
    return [("1-eps_low", 1 - c.eps_low), ("1+eps_high", 1 + c.eps_high)]


def _on_one_pm_eps(c, t: TokenTerms) -> np.ndarray:
    return _on_edges(t.ratio_T, 1.0 - c.eps_low, 1.0 + c.eps_high)


@dataclass(frozen=True)
class CISPOConfig:
    eps_low: float = param(1.0, "clip the weight when r < 1 - eps_low", range=UNIT)
    eps_high: float = param(
        4.0, "clip the weight when r > 1 + eps_high", range=NONNEG, grid=(0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 9.0)
    )


@register(
    "cispo",
    level="token",
    config=CISPOConfig,
    uses_advantage=False,
    acts="reweight",
    source="MiniMax-M1 (arXiv 2506.13585); ScaleRL bounds 0 and 5; SkyRL/TRL cispo",
    summary="reweight (clip) tokens whose ratio leaves [1 - eps_low, 1 + eps_high]",
    quantity="r = p/q",
    ratio_thresholds=_one_pm_eps,
    at_threshold=lambda c, t: _on_one_pm_eps(c, t),
    statistics=(RATIO,),
    weight=lambda c, t: np.clip(t.ratio_T, 1.0 - c.eps_low, 1.0 + c.eps_high),
)
def cispo(cfg: CISPOConfig, t: TokenTerms, advantage_T: np.ndarray | None) -> np.ndarray:
    return where(_outside(t.ratio_T, 1.0 - cfg.eps_low, 1.0 + cfg.eps_high), REWEIGHT)


@dataclass(frozen=True)
class PPOClipConfig:
    eps_low: float = param(
        0.2, "A < 0: zero gradient when r < 1 - eps_low", range=UNIT, grid=(0.05, 0.1, 0.2, 0.3, 0.5)
    )
    eps_high: float = param(
        0.28,
        "A > 0: zero gradient when r > 1 + eps_high (DAPO clip-higher)",
        range=NONNEG,
        grid=(0.05, 0.1, 0.2, 0.28, 0.5, 1.0),
    )


@register(
    "ppo-clip",
    level="token",
    config=PPOClipConfig,
    uses_advantage=True,
    acts="reject",
    source="PPO; DAPO clip-higher; verl bypass mode (rollout policy as the old policy)",
    summary="tokens the PPO clip would zero with the rollout as old policy (A == 0: kept)",
    quantity="r = p/q (rollout as old policy)",
    ratio_thresholds=_one_pm_eps,
    at_threshold=lambda c, t: _on_one_pm_eps(c, t),
    statistics=(RATIO,),
)
def ppo_clip(cfg: PPOClipConfig, t: TokenTerms, advantage_T: np.ndarray) -> np.ndarray:
    r = t.ratio_T
    return where(((advantage_T > 0) & (r > 1.0 + cfg.eps_high)) | ((advantage_T < 0) & (r < 1.0 - cfg.eps_low)), REJECT)
