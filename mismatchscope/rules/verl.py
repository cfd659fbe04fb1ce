"""verl's ``rollout_rs`` family as one rule, so a verl setting can be pasted as is.

``--rule verl-rs:option=seq_mean_k3,threshold=0.01`` is verl's
``rollout_rs=seq_mean_k3, rollout_rs_threshold=0.01``. Semantics follow
``verl/trainer/ppo/rollout_corr_helper.py`` (``compute_rollout_rejection_mask``):

* the log ratio ``l = log p - log q`` is clamped to [-20, 20] first;
* per token k1 = -l, k2 = l^2 / 2, k3 = (e^l - 1) - l; ``token_*`` options judge
  each token, ``seq_sum_*`` / ``seq_mean_*`` / ``seq_max_*`` the sum, mean or
  max over the sequence (and reject all of its tokens);
* k1 options keep iff ``log L <= x <= log U`` with the threshold ``"L_U"`` (one
  number ``U`` means ``L = 1/U``); k2 and k3 options keep iff ``x <= U``.

Note verl's orientation: ``token_k1`` bounds apply to ``-l = log(1/r)``, so
``threshold=0.5_2.0`` keeps ``0.5 <= 1/r <= 2``. The generic ratio rules
(icepop, token-mask) keep the natural orientation; only this rule follows verl.

One deliberate strictness: verl accepts any positive bounds; here a k1 band
must contain r = 1 (``L <= 1 <= U``), since a band without it rejects every
perfectly matched token (``threshold=0.5`` would mean the empty band [2, 0.5]).
"""

from __future__ import annotations

import math
from dataclasses import MISSING, dataclass
from functools import lru_cache

import numpy as np

from ..divergence import CLAMP_LOG_RATIO, TokenTerms, clamped_k_terms, k3_per_token
from .base import REJECT, Level, SequenceInputs, Statistic, param, parse_number, register, where

OPTIONS = (
    "token_k1",
    "token_k2",
    "token_k3",
    "seq_sum_k1",
    "seq_sum_k2",
    "seq_sum_k3",
    "seq_mean_k1",
    "seq_mean_k2",
    "seq_mean_k3",
    "seq_max_k2",
    "seq_max_k3",
)


@lru_cache(maxsize=256)
def parse_threshold(option: str, threshold: str) -> tuple[float | None, float]:
    """verl's threshold string -> (L, U) for k1 options, (None, U) for k2/k3. Raises ValueError."""
    text = threshold.strip()
    if option.endswith("k1"):
        lo_text, sep, hi_text = text.partition("_")
        hi, lo = parse_number(hi_text if sep else text), parse_number(lo_text) if sep else None
        if hi is None or (sep and lo is None) or (not sep and hi == 0):
            raise ValueError(f"threshold {threshold!r} for {option} is not 'L_U' or one number U (e.g. 0.5_2.0 or 2)")
        lo = lo if lo is not None else 1.0 / hi  # lo is None exactly when there is no separator
        if not (lo > 0 and hi > 0) or math.isnan(lo) or math.isnan(hi):
            raise ValueError(f"threshold {threshold!r} for {option}: both bounds must be positive")
        if not lo <= 1.0 <= hi:
            raise ValueError(
                f"threshold {threshold!r} for {option} means the band [{lo:g}, {hi:g}], which leaves out r = 1 "
                f"(give U >= 1, or L_U with L <= 1 <= U)"
            )
        return lo, hi
    if "_" in text:
        raise ValueError(f"threshold {threshold!r} for {option} takes one upper bound U, not 'L_U'")
    hi = parse_number(text)
    if hi is None:
        raise ValueError(f"threshold {threshold!r} for {option} is not a number")
    if not hi > 0:
        raise ValueError(f"threshold {threshold!r} for {option} must be a positive number")
    return None, hi


@dataclass(frozen=True)
class VerlRSConfig:
    option: str = param(
        MISSING, "verl's rollout_rs option: " + ", ".join(OPTIONS), choices=OPTIONS, example="seq_mean_k3"
    )
    threshold: str = param(
        MISSING,
        "verl's rollout_rs_threshold: 'L_U' or one number U for k1 options "
        "(U alone means L = 1/U), one number U for k2/k3",
        example="0.01",
    )

    def __post_init__(self):
        parse_threshold(self.option, self.threshold)

    @property
    def bounds(self) -> tuple[float | None, float]:
        return parse_threshold(self.option, self.threshold)


def _level(cfg: VerlRSConfig) -> Level:
    return "token" if cfg.option.startswith("token_") else "sequence"


def _keep(option: str, lo: float | None, hi: float, x: np.ndarray) -> np.ndarray:
    if option.endswith("k1"):
        return (x >= math.log(lo)) & (x <= math.log(hi))  # type: ignore[arg-type]
    return x <= hi


def _sequence_stat(option: str, s: SequenceInputs) -> np.ndarray:
    kind, _, k = option.rpartition("_")
    if kind == "seq_max":
        # k2 and k3 are convex in l with their minimum at l = 0: a sequence's max sits at its min or max l
        lo = np.clip(s.min_log_ratio_S, -CLAMP_LOG_RATIO, CLAMP_LOG_RATIO)
        hi = np.clip(s.max_log_ratio_S, -CLAMP_LOG_RATIO, CLAMP_LOG_RATIO)
        return np.maximum(0.5 * lo * lo, 0.5 * hi * hi) if k == "k2" else np.maximum(k3_per_token(lo), k3_per_token(hi))
    sums = {"k1": s.clamped_sum_k1_S, "k2": s.clamped_sum_k2_S, "k3": s.clamped_sum_k3_S}[k]
    if sums is None:  # pragma: no cover - every caller in the package fills them
        raise ValueError("verl-rs sequence options need the clamped per-sequence sums (SequenceInputs.clamped_sum_*)")
    return sums / s.n_tokens_S if kind == "seq_mean" else sums


def _sweeps(cfg: VerlRSConfig) -> dict[str, tuple]:
    kind, _, k = cfg.option.rpartition("_")
    if k == "k1":
        grid = (1.0001, 1.001, 1.01, 1.1, 1.5, 2.0) if kind == "seq_mean" else (1.1, 1.25, 1.5, 2.0, 3.0, 5.0, 10.0)
    else:
        grid = {
            "token": (1e-4, 1e-3, 0.01, 0.1, 0.5, 1.0, 2.0),
            "seq_sum": (1e-3, 0.01, 0.1, 1.0, 10.0),
            "seq_mean": (1e-4, 1e-3, 0.01, 0.1, 1.0),
            "seq_max": (1e-3, 0.01, 0.1, 0.5, 1.0, 2.0, 5.0),
        }[kind]
    return {"threshold": tuple(f"{v:g}" for v in grid)}


def _ratio_thresholds(cfg: VerlRSConfig) -> list[tuple[str, float | None]]:
    lo, hi = cfg.bounds
    if cfg.option == "token_k1":  # keeps log L <= -l <= log U, i.e. 1/U <= r <= 1/L
        return [("1/U", 1.0 / hi), ("1/L", 1.0 / lo)]  # type: ignore[operator]
    if cfg.option == "token_k2":  # keeps |l| <= sqrt(2 U)
        w = math.sqrt(2.0 * hi)
        return [("exp(-sqrt(2U))", math.exp(-w)), ("exp(sqrt(2U))", math.exp(min(w, 700.0)))]
    return []


def _statistic(cfg: VerlRSConfig, x: TokenTerms | SequenceInputs) -> np.ndarray:
    """The estimator the option thresholds: per token (l clamped), or the sequence's sum, mean or max."""
    if isinstance(x, TokenTerms):
        k1, k2, k3 = clamped_k_terms(x.log_ratio_T)
        return {"token_k1": k1, "token_k2": k2}.get(cfg.option, k3)
    return _sequence_stat(cfg.option, x)


@register(
    "verl-rs",
    level=_level,
    config=VerlRSConfig,
    uses_advantage=False,
    acts="reject",
    source="verl verl/trainer/ppo/rollout_corr_helper.py (rollout_rs, rollout_rs_threshold)",
    summary="verl's rollout_rs as configured there (l clamped to +-20; token_k1 bounds apply to -l = log(1/r), as in verl); "
    "token or sequence level by option",
    quantity="k1 = -l, k2 = l^2/2, k3 = expm1(l) - l per token (l clamped to [-20, 20]); per token, or sum, mean or max over the sequence",
    ratio_thresholds=_ratio_thresholds,
    sweeps=_sweeps,
    notes=__doc__ or "",
    statistics=(
        Statistic(
            lambda c: f"verl_{c.option}",
            "verl's estimator of the option: k1 = -l, k2 = l^2/2 or k3 = expm1(l) - l (l clamped to [-20, 20]), "
            "per token or its sum, mean or max over the sequence",
            _statistic,
        ),
    ),
)
def verl_rs(cfg: VerlRSConfig, x: TokenTerms | SequenceInputs, advantage_T: np.ndarray | None = None) -> np.ndarray:
    """Token options get ``TokenTerms`` (and an unused advantage), sequence options ``SequenceInputs``."""
    lo, hi = cfg.bounds
    return where(~_keep(cfg.option, lo, hi, _statistic(cfg, x)), REJECT)
