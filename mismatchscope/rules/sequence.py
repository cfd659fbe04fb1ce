"""Sequence-level rules: one action for every token of a sequence.

Each function is pure: ``(config, SequenceInputs) -> action_S``. Products of
ratios are compared in log space (``S`` against ``log(bound)``), since
``prod_t r`` over a long completion overflows float64 long before a threshold
would matter.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..metrics import GEO_RATIO, LOG_PPL_DIFF
from ..metrics import SEQ_LOG_RATIO as SEQ_LOG_RATIO_METRIC
from .base import NONNEG, RATIO_HIGH, RATIO_LOW, REJECT, REWEIGHT, SequenceInputs, Statistic, param, register, where
from .token import R_HIGH, R_LOW

SEQ_LOG_RATIO = Statistic(SEQ_LOG_RATIO_METRIC.name, "S = sum_t l, the log of prod_t r", lambda c, s: s.seq_log_ratio_S)
"""what seq-tis and seq-mis threshold, in log space as they compare it (prod_t r overflows where S does not); the
per-sequence statistics are named as the metric catalog names them."""


def _log(x: float | None, default: float) -> float:
    if x is None:
        return default
    return math.log(x) if x > 0 else -math.inf


@dataclass(frozen=True)
class SeqTISConfig:
    C: float = param(2.0, "reweight the sequence when prod_t r > C (TRL uses 3.0)", range=RATIO_HIGH, grid=R_HIGH)


@register(
    "seq-tis",
    level="sequence",
    config=SeqTISConfig,
    uses_advantage=False,
    acts="reweight",
    source="verl decoupled_seq_is; TRL sequence_truncate",
    summary="sequence-level truncated IS: reweight sequences whose ratio product exceeds C",
    quantity="prod_t r",
    statistics=(SEQ_LOG_RATIO,),
    weight=lambda c, s: np.exp(np.minimum(s.seq_log_ratio_S, _log(c.C, math.inf))),
)
def seq_tis(cfg: SeqTISConfig, s: SequenceInputs) -> np.ndarray:
    return where(s.seq_log_ratio_S > _log(cfg.C, math.inf), REWEIGHT)


@dataclass(frozen=True)
class SeqMISConfig:
    lo: float = param(0.5, "reject the sequence when prod_t r < lo", range=RATIO_LOW, grid=R_LOW)
    hi: float = param(
        2.0, "reject the sequence when prod_t r > hi (TRL sequence_mask: 3.0)", range=RATIO_HIGH, grid=R_HIGH
    )


@register(
    "seq-mis",
    level="sequence",
    config=SeqMISConfig,
    uses_advantage=False,
    acts="reject",
    source="'When Speed Kills Stability'; verl seq_sum_k1; TRL default mode",
    summary="masked IS: reject sequences whose ratio product leaves [lo, hi]",
    quantity="prod_t r",
    statistics=(SEQ_LOG_RATIO,),
)
def seq_mis(cfg: SeqMISConfig, s: SequenceInputs) -> np.ndarray:
    S = s.seq_log_ratio_S
    return where((S < _log(cfg.lo, -math.inf)) | (S > _log(cfg.hi, math.inf)), REJECT)


@dataclass(frozen=True)
class GeoMaskConfig:
    lo: float = param(0.999, "reject when exp(mean_t l) < lo (SkyRL: 0.99)", range=RATIO_LOW)
    hi: float = param(
        1.001, "reject when exp(mean_t l) > hi (SkyRL: 1.01)", range=RATIO_HIGH, grid=(1.0001, 1.001, 1.01, 1.1)
    )


@register(
    "geo-mask",
    level="sequence",
    config=GeoMaskConfig,
    uses_advantage=False,
    acts="reject",
    source="verl decoupled_geo_rs; SkyRL geometric mask",
    summary="reject sequences whose geometric-mean ratio leaves [lo, hi]",
    quantity="exp(mean_t l)",
    statistics=(Statistic(GEO_RATIO.name, "exp(mean_t l)", lambda c, s: np.exp(s.mean_log_ratio_S)),),
)
def geo_mask(cfg: GeoMaskConfig, s: SequenceInputs) -> np.ndarray:
    geo = np.exp(s.mean_log_ratio_S)
    return where((geo < cfg.lo) | (geo > cfg.hi), REJECT)


K3_ORIENTATIONS = ("r", "1/r")


@dataclass(frozen=True)
class K3SeqConfig:
    delta: float = param(0.01, "reject when mean_t k3 > delta", range=NONNEG, grid=(1e-4, 1e-3, 0.01, 0.1))
    orientation: str = param(
        "r", "k3 of r = p/q, (r - 1) - log r (verl), or of 1/r, (1/r - 1) + log r (AReaL)", choices=K3_ORIENTATIONS
    )


def k3_inverse(log_ratio_T: np.ndarray) -> np.ndarray:
    """Per token k3 of 1/r: expm1(-l) + l, >= 0 (AReaL's kl_k3 of the trainer against the sampler)."""
    with np.errstate(over="ignore"):
        return np.maximum(np.expm1(-log_ratio_T) + log_ratio_T, 0.0)


def needs_inverse_k3(rules) -> bool:
    """Whether any of these rule instances reads ``SequenceInputs.mean_k3_inverse_S`` (the aggregators add it then)."""
    return any(r.spec.name == "k3-seq" and r.config.orientation == "1/r" for r in rules)


@register(
    "k3-seq",
    level="sequence",
    config=K3SeqConfig,
    uses_advantage=False,
    acts="reject",
    source="verl decoupled_k3_rs; AReaL rejection sampling metric kl_k3 (orientation 1/r)",
    summary="reject sequences whose mean k3 (KL estimate) exceeds delta",
    quantity="mean_t k3",
    notes="Orientation: k3 estimates KL(sampler || trainer) as (r - 1) - log r with r = p/q (verl's k3, the default); "
    "AReaL computes its kl_k3 from the trainer's logprob minus the sampler's with the sign flipped, "
    "exp(lq - lp) - 1 - (lq - lp), which is k3 of 1/r: (1/r - 1) + log r. The two agree to second order "
    "in log r and part beyond it: orientation=1/r (or the areal reading) gives AReaL's.",
    statistics=(
        Statistic(
            lambda c: "mean_k3" if c.orientation == "r" else "mean_k3_inverse",
            "mean_t k3, of r ((r - 1) - log r) or, orientation=1/r, of 1/r ((1/r - 1) + log r)",
            lambda c, s: s.mean_k3_S if c.orientation == "r" else s.mean_k3_inverse_S,
        ),
    ),
)
def k3_seq(cfg: K3SeqConfig, s: SequenceInputs) -> np.ndarray:
    if cfg.orientation == "r":
        return where(s.mean_k3_S > cfg.delta, REJECT)
    if s.mean_k3_inverse_S is None:  # pragma: no cover - every caller in the package fills it when needed
        raise ValueError(
            "k3-seq:orientation=1/r needs the per-sequence mean of k3 of 1/r (SequenceInputs.mean_k3_inverse_S)"
        )
    return where(s.mean_k3_inverse_S > cfg.delta, REJECT)


@dataclass(frozen=True)
class VetoConfig:
    lo: float = param(
        1e-4, "reject when any token has r < lo", range=RATIO_LOW, grid=(1e-6, 1e-5, 1e-4, 1e-3, 0.01, 0.1)
    )
    hi: float | None = param(
        None,
        "also reject when any token has r > hi (off by default as in verl; SkyRL's outlier mask uses 100)",
        range=RATIO_HIGH,
        optional=True,
    )


@register(
    "veto",
    level="sequence",
    config=VetoConfig,
    uses_advantage=False,
    acts="reject",
    source="SkyRL outlier mask (outlier_token_is_threshold_low/high); verl's rollout_token_veto_threshold up to "
    "v0.7.0 (removed by #4544, 97eac90)",
    summary="reject a sequence if any single token's ratio is catastrophic",
    quantity="min_t r, max_t r",
    ratio_thresholds=lambda c: [("lo", c.lo), ("hi", c.hi)],
    statistics=(
        Statistic("min_ratio", "min_t r", lambda c, s: np.exp(s.min_log_ratio_S)),
        Statistic("max_ratio", "max_t r", lambda c, s: np.exp(s.max_log_ratio_S)),
    ),
)
def veto(cfg: VetoConfig, s: SequenceInputs) -> np.ndarray:
    bad = np.exp(s.min_log_ratio_S) < cfg.lo
    if cfg.hi is not None:
        bad |= np.exp(s.max_log_ratio_S) > cfg.hi
    return where(bad, REJECT)


@dataclass(frozen=True)
class OPSMConfig:
    delta: float = param(
        1e-4,
        "reject when A < 0 and mean_t (log q - log p) > delta (slime; TRL example: 0.5)",
        range=NONNEG,
        grid=(1e-4, 1e-3, 0.01, 0.1, 0.5),
    )


@register(
    "opsm",
    level="sequence",
    config=OPSMConfig,
    uses_advantage=True,
    acts="reject",
    source="DeepSeek-V3.2 OPSM; TRL off_policy_mask_threshold; slime compute_opsm_mask",
    summary="off-policy sequence mask: reject negative-advantage sequences the trainer finds less likely",
    quantity="mean_t (lq - lp)",
    statistics=(Statistic(LOG_PPL_DIFF.name, "mean_t (log q - log p)", lambda c, s: -s.mean_log_ratio_S),),
)
def opsm(cfg: OPSMConfig, s: SequenceInputs) -> np.ndarray:
    assert s.advantage_S is not None  # uses_advantage: the runner passes it
    return where((s.advantage_S < 0) & (-s.mean_log_ratio_S > cfg.delta), REJECT)
