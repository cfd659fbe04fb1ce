"""Token-level masking and correction rules (``rules-and-metrics.md``).

Each function is pure: ``(config, terms, advantage_T) -> action_T`` with
actions KEEP / REJECT / REWEIGHT. Comparisons use the ratio ``r`` or ``p - q``
exactly as the sources state them, so thresholds mean what users expect.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..divergence import TokenTerms, binary_kl
from .base import REJECT, REWEIGHT, check_bounds, param, register, where


@dataclass(frozen=True)
class IcePopConfig:
    alpha: float = param(0.5, "reject when r < alpha")
    beta: float = param(5.0, "reject when r > beta")

    def __post_init__(self):
        check_bounds(self.alpha, self.beta, "alpha", "beta")


@register("icepop", level="token", config=IcePopConfig, uses_advantage=False, acts="reject",
          source="Ring-1T (arXiv 2510.18855); verl decoupled_token_icepop; slime icepop_function",
          summary="reject tokens whose ratio r = p/q leaves [alpha, beta]")
def icepop(cfg: IcePopConfig, t: TokenTerms, advantage_T: np.ndarray | None) -> np.ndarray:
    """IcePop: drop the gradient of tokens whose ratio falls outside the band."""
    return where((t.ratio_T < cfg.alpha) | (t.ratio_T > cfg.beta), REJECT)


@dataclass(frozen=True)
class IPOConfig:
    delta: float = param(0.1, "reject when |p - q| > delta")

    def __post_init__(self):
        check_bounds(0.0, self.delta, "0", "delta")


@register("ipo", level="token", config=IPOConfig, uses_advantage=False, acts="reject",
          source="prime-rl ipo_loss_fn / IPOLossConfig",
          summary="reject tokens whose probability gap |p - q| exceeds delta")
def ipo(cfg: IPOConfig, t: TokenTerms, advantage_T: np.ndarray | None) -> np.ndarray:
    """IPO mask: a probability-space band, blind to tiny-probability tokens."""
    return where(t.tv_T > cfg.delta, REJECT)


@dataclass(frozen=True)
class DPPOTVConfig:
    delta_low: float = param(0.15, "A <= 0: reject when p - q < -delta_low")
    delta_high: float = param(0.15, "A > 0: reject when p - q > delta_high (prime-rl uses 0.2)")


@register("dppo-tv", level="token", config=DPPOTVConfig, uses_advantage=True, acts="reject",
          source="DPPO arXiv 2602.04879; sail-sg/Stable-RL _compute_token_mask_for_policy_loss",
          summary="reject when p - q moves past delta in the advantage's direction (A == 0 counts as negative, as in the reference code; SkyRL uses A < 0)")
def dppo_tv(cfg: DPPOTVConfig, t: TokenTerms, advantage_T: np.ndarray) -> np.ndarray:
    diff = t.p_T - t.q_T
    pos = advantage_T > 0
    return where((pos & (diff > cfg.delta_high)) | (~pos & (diff < -cfg.delta_low)), REJECT)


@dataclass(frozen=True)
class DPPOKLConfig:
    delta: float = param(0.05, "reject when the binary KL D(q || p) > delta in the advantage's direction")


@register("dppo-kl", level="token", config=DPPOKLConfig, uses_advantage=True, acts="reject",
          source="DPPO arXiv 2602.04879; sail-sg/Stable-RL",
          summary="binary-KL variant of dppo-tv: D = q log(q/p) + (1-q) log((1-q)/(1-p)); A == 0 counts as negative")
def dppo_kl(cfg: DPPOKLConfig, t: TokenTerms, advantage_T: np.ndarray) -> np.ndarray:
    d = binary_kl(t.q_T, t.p_T)
    pos = advantage_T > 0
    up = t.p_T > t.q_T
    down = t.p_T < t.q_T
    return where(((pos & up) | (~pos & down)) & (d > cfg.delta), REJECT)


@dataclass(frozen=True)
class TISConfig:
    C: float = param(2.0, "truncate the importance weight to C when r > C")


@register("tis", level="token", config=TISConfig, uses_advantage=False, acts="reweight",
          source="Yao et al., 'Your Efficient RL Framework Secretly Brings You Off-Policy RL Training'; verl #2953",
          summary="truncated importance sampling: reweight tokens with r > C")
def tis(cfg: TISConfig, t: TokenTerms, advantage_T: np.ndarray | None) -> np.ndarray:
    return where(t.ratio_T > cfg.C, REWEIGHT)


@dataclass(frozen=True)
class TokenMaskConfig:
    lo: float = param(0.5, "reject when r < lo")
    hi: float = param(2.0, "reject when r > hi")

    def __post_init__(self):
        check_bounds(self.lo, self.hi, "lo", "hi")


@register("token-mask", level="token", config=TokenMaskConfig, uses_advantage=False, acts="reject",
          source="SkyRL token_mask_is_threshold_*; TRL token_mask mode",
          summary="reject tokens whose ratio leaves [lo, hi]")
def token_mask(cfg: TokenMaskConfig, t: TokenTerms, advantage_T: np.ndarray | None) -> np.ndarray:
    return where((t.ratio_T < cfg.lo) | (t.ratio_T > cfg.hi), REJECT)


@dataclass(frozen=True)
class CISPOConfig:
    eps_low: float = param(1.0, "clip the weight when r < 1 - eps_low")
    eps_high: float = param(4.0, "clip the weight when r > 1 + eps_high")


@register("cispo", level="token", config=CISPOConfig, uses_advantage=False, acts="reweight",
          source="MiniMax-M1 (arXiv 2506.13585); ScaleRL bounds 0 and 5; SkyRL/TRL cispo",
          summary="reweight (clip) tokens whose ratio leaves [1 - eps_low, 1 + eps_high]")
def cispo(cfg: CISPOConfig, t: TokenTerms, advantage_T: np.ndarray | None) -> np.ndarray:
    return where((t.ratio_T < 1.0 - cfg.eps_low) | (t.ratio_T > 1.0 + cfg.eps_high), REWEIGHT)


@dataclass(frozen=True)
class PPOClipConfig:
    eps_low: float = param(0.2, "A < 0: zero gradient when r < 1 - eps_low")
    eps_high: float = param(0.28, "A > 0: zero gradient when r > 1 + eps_high (DAPO clip-higher)")


@register("ppo-clip", level="token", config=PPOClipConfig, uses_advantage=True, acts="reject",
          source="PPO; DAPO clip-higher; verl bypass mode (rollout policy as the old policy)",
          summary="tokens the PPO clip would zero with the rollout as old policy (A == 0: kept)")
def ppo_clip(cfg: PPOClipConfig, t: TokenTerms, advantage_T: np.ndarray) -> np.ndarray:
    r = t.ratio_T
    return where(((advantage_T > 0) & (r > 1.0 + cfg.eps_high)) | ((advantage_T < 0) & (r < 1.0 - cfg.eps_low)), REJECT)
