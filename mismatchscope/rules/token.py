"""Token-level masking and correction rules (``rules-and-metrics.md``).

Each function is pure: ``(config, terms, advantage_T) -> action_T`` with
actions KEEP / REJECT / REWEIGHT. Comparisons use the ratio ``r`` or ``p - q``
exactly as the sources state them, so thresholds mean what users expect.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..divergence import TokenTerms, binary_kl, binary_kl_candidates, binary_kl_logs_both
from .base import (
    NONNEG, RATIO_HIGH, RATIO_LOW, REJECT, REWEIGHT, UNIT, Range, param, register, where,
)

R_LOW = (0.1, 0.2, 0.3, 0.5, 0.7, 0.8, 0.9)
R_HIGH = (1.1, 1.25, 1.5, 2.0, 3.0, 5.0, 10.0)
PQ = (0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.3, 0.5)
"""sweep grids: lower and upper ratio bounds, probability gaps."""


@dataclass(frozen=True)
class IcePopConfig:
    alpha: float = param(0.5, "reject when r < alpha", range=RATIO_LOW, grid=R_LOW)
    beta: float = param(5.0, "reject when r > beta", range=RATIO_HIGH, grid=R_HIGH)


@register("icepop", level="token", config=IcePopConfig, uses_advantage=False, acts="reject",
          source="Ring-1T (arXiv 2510.18855); verl decoupled_token_icepop; slime icepop_function",
          summary="reject tokens whose ratio r = p/q leaves [alpha, beta]", quantity="r = p/q",
          ratio_thresholds=lambda c: [("alpha", c.alpha), ("beta", c.beta)], drawn_by_default=True)
def icepop(cfg: IcePopConfig, t: TokenTerms, advantage_T: np.ndarray | None) -> np.ndarray:
    """IcePop: drop the gradient of tokens whose ratio falls outside the band."""
    return where((t.ratio_T < cfg.alpha) | (t.ratio_T > cfg.beta), REJECT)


@dataclass(frozen=True)
class IPOConfig:
    delta: float = param(0.3, "reject when |p - q| > delta (prime-rl's default since PR #3586; "
                              "0.2 at IPO's first release, then 0.1: pass --rule ipo:delta=0.2 or 0.1)",
                         range=UNIT, grid=PQ)


@register("ipo", level="token", config=IPOConfig, uses_advantage=False, acts="reject",
          source="prime-rl ipo_loss_fn / IPOLossConfig (default 0.3, PR #3586; earlier 0.2, #1930, and 0.1, #2798)",
          summary="reject tokens whose probability gap |p - q| exceeds delta", quantity="p - q",
          drawn_by_default=True)
def ipo(cfg: IPOConfig, t: TokenTerms, advantage_T: np.ndarray | None) -> np.ndarray:
    """IPO mask: a probability-space band, blind to tiny-probability tokens."""
    return where(t.tv_T > cfg.delta, REJECT)


@dataclass(frozen=True)
class KPopConfig:
    phi: float = param(0.1, "reject when max(D(q||p), D(p||q)) > phi (binary KL, nats)", range=NONNEG,
                       grid=(1e-4, 1e-3, 0.01, 0.05, 0.1, 0.3, 1.0))
    eps: float = param(1e-6, "clamp p and q to [eps, 1 - eps] first, as prime-rl and verl do (0: no clamp)",
                       range=Range(0.0, 0.5, hi_open=True))


@register("kpop", level="token", config=KPopConfig, uses_advantage=False, acts="reject",
          source="KPop (Ant Group Ring team); AReaL #1405; verl #6800 (rollout_rs=binary_kl); prime-rl #3283",
          summary="reject tokens whose two-outcome KL between p and q exceeds phi in either direction; "
                  "p and q clamped to [eps, 1 - eps] (1e-6, as prime-rl), so a logprob that rounds to 0 is not an infinite KL",
          quantity="max(D(q||p), D(p||q)), D(a||b) = a log(a/b) + (1-a) log((1-a)/(1-b))", drawn_by_default=True,
          notes="p and q are clamped to [eps, 1 - eps] before the KL, eps = 1e-6 by default, as prime-rl (#3283) and verl's "
                "binary_kl do: an fp32 logprob of exactly 0 (a near-certain token) would otherwise make D(q||p) infinite and "
                "reject a token both sides agree on. eps=0 turns the clamp off. The KL is computed from the logprobs "
                "(1 - q as -expm1(log q)), so tokens near 0 and 1 keep their precision and equal logprobs give exactly 0.")
def kpop(cfg: KPopConfig, t: TokenTerms, advantage_T: np.ndarray | None) -> np.ndarray:
    """KPop: a symmetric binary-KL trust region on each sampled token.

    Clamped by default: an fp32 logprob of exactly 0 (a near-certain token)
    would otherwise make D(q||p) infinite and reject a token both sides agree on.
    """
    lq, lp = t.lq_T, t.lp_T
    maybe = binary_kl_candidates(t.p_T, t.q_T, cfg.phi)  # the others are surely below phi
    if maybe is None:
        return where(np.maximum(*binary_kl_logs_both(lq, lp, cfg.eps)) > cfg.phi, REJECT)
    hit = np.zeros(lq.size, bool)
    hit[maybe] = np.maximum(*binary_kl_logs_both(lq[maybe], lp[maybe], cfg.eps)) > cfg.phi
    return where(hit, REJECT)


@dataclass(frozen=True)
class DPPOTVConfig:
    delta_low: float = param(0.15, "A <= 0: reject when p - q < -delta_low", range=UNIT, grid=PQ)
    delta_high: float = param(0.15, "A > 0: reject when p - q > delta_high (prime-rl uses 0.2)", range=UNIT, grid=PQ)


@register("dppo-tv", level="token", config=DPPOTVConfig, uses_advantage=True, acts="reject",
          source="DPPO arXiv 2602.04879; sail-sg/Stable-RL _compute_token_mask_for_policy_loss",
          summary="reject when p - q moves past delta in the advantage's direction (A == 0 counts as negative, as in the reference code; SkyRL uses A < 0)",
          quantity="p - q")
def dppo_tv(cfg: DPPOTVConfig, t: TokenTerms, advantage_T: np.ndarray) -> np.ndarray:
    diff = t.p_T - t.q_T
    pos = advantage_T > 0
    return where((pos & (diff > cfg.delta_high)) | (~pos & (diff < -cfg.delta_low)), REJECT)


@dataclass(frozen=True)
class DPPOKLConfig:
    delta: float = param(0.05, "reject when the binary KL D(q || p) > delta in the advantage's direction", range=NONNEG,
                         grid=(1e-4, 1e-3, 0.01, 0.05, 0.1, 0.3))


@register("dppo-kl", level="token", config=DPPOKLConfig, uses_advantage=True, acts="reject",
          source="DPPO arXiv 2602.04879; sail-sg/Stable-RL",
          summary="binary-KL variant of dppo-tv: D = q log(q/p) + (1-q) log((1-q)/(1-p)); A == 0 counts as negative",
          quantity="D(q||p) = q log(q/p) + (1-q) log((1-q)/(1-p))")
def dppo_kl(cfg: DPPOKLConfig, t: TokenTerms, advantage_T: np.ndarray) -> np.ndarray:
    pos = advantage_T > 0
    up = t.p_T > t.q_T
    down = t.p_T < t.q_T
    moved = (pos & up) | (~pos & down)  # the KL decides only where p moved the advantage's way
    maybe = binary_kl_candidates(t.p_T, t.q_T, cfg.delta)  # and could exceed delta
    if maybe is not None:
        maybe = maybe[moved[maybe]]
    else:
        maybe = np.flatnonzero(moved)
    hit = np.zeros(t.p_T.size, bool)
    hit[maybe] = binary_kl(t.q_T[maybe], t.p_T[maybe]) > cfg.delta
    return where(hit, REJECT)


@dataclass(frozen=True)
class TISConfig:
    C: float = param(2.0, "truncate the importance weight to C when r > C", range=RATIO_HIGH, grid=R_HIGH)


@register("tis", level="token", config=TISConfig, uses_advantage=False, acts="reweight",
          source="Yao et al., 'Your Efficient RL Framework Secretly Brings You Off-Policy RL Training'; verl #2953",
          summary="truncated importance sampling: reweight tokens with r > C", quantity="r = p/q",
          ratio_thresholds=lambda c: [("C", c.C)], drawn_by_default=True)
def tis(cfg: TISConfig, t: TokenTerms, advantage_T: np.ndarray | None) -> np.ndarray:
    return where(t.ratio_T > cfg.C, REWEIGHT)


@dataclass(frozen=True)
class TokenMaskConfig:
    lo: float = param(0.5, "reject when r < lo", range=RATIO_LOW, grid=R_LOW)
    hi: float = param(2.0, "reject when r > hi", range=RATIO_HIGH, grid=R_HIGH)


@register("token-mask", level="token", config=TokenMaskConfig, uses_advantage=False, acts="reject",
          source="SkyRL token_mask_is_threshold_*; TRL token_mask mode",
          summary="reject tokens whose ratio leaves [lo, hi]", quantity="r = p/q",
          ratio_thresholds=lambda c: [("lo", c.lo), ("hi", c.hi)], drawn_by_default=True)
def token_mask(cfg: TokenMaskConfig, t: TokenTerms, advantage_T: np.ndarray | None) -> np.ndarray:
    return where((t.ratio_T < cfg.lo) | (t.ratio_T > cfg.hi), REJECT)


def _one_pm_eps(c) -> list[tuple[str, float]]:
    return [("1-eps_low", 1 - c.eps_low), ("1+eps_high", 1 + c.eps_high)]


@dataclass(frozen=True)
class CISPOConfig:
    eps_low: float = param(1.0, "clip the weight when r < 1 - eps_low", range=UNIT)
    eps_high: float = param(4.0, "clip the weight when r > 1 + eps_high", range=NONNEG,
                            grid=(0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 9.0))


@register("cispo", level="token", config=CISPOConfig, uses_advantage=False, acts="reweight",
          source="MiniMax-M1 (arXiv 2506.13585); ScaleRL bounds 0 and 5; SkyRL/TRL cispo",
          summary="reweight (clip) tokens whose ratio leaves [1 - eps_low, 1 + eps_high]", quantity="r = p/q",
          ratio_thresholds=_one_pm_eps)
def cispo(cfg: CISPOConfig, t: TokenTerms, advantage_T: np.ndarray | None) -> np.ndarray:
    return where((t.ratio_T < 1.0 - cfg.eps_low) | (t.ratio_T > 1.0 + cfg.eps_high), REWEIGHT)


@dataclass(frozen=True)
class PPOClipConfig:
    eps_low: float = param(0.2, "A < 0: zero gradient when r < 1 - eps_low", range=UNIT, grid=(0.05, 0.1, 0.2, 0.3, 0.5))
    eps_high: float = param(0.28, "A > 0: zero gradient when r > 1 + eps_high (DAPO clip-higher)", range=NONNEG,
                            grid=(0.05, 0.1, 0.2, 0.28, 0.5, 1.0))


@register("ppo-clip", level="token", config=PPOClipConfig, uses_advantage=True, acts="reject",
          source="PPO; DAPO clip-higher; verl bypass mode (rollout policy as the old policy)",
          summary="tokens the PPO clip would zero with the rollout as old policy (A == 0: kept)",
          quantity="r = p/q (rollout as old policy)", ratio_thresholds=_one_pm_eps)
def ppo_clip(cfg: PPOClipConfig, t: TokenTerms, advantage_T: np.ndarray) -> np.ndarray:
    r = t.ratio_T
    return where(((advantage_T > 0) & (r > 1.0 + cfg.eps_high)) | ((advantage_T < 0) & (r < 1.0 - cfg.eps_low)), REJECT)
