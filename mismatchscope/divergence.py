"""The one primitive every command uses: per-token log-ratio, ratio, TV and
the k1/k2/k3 KL estimators (``rules-and-metrics.md``, "Token metrics").

``report``, ``compare-masks``, ``gate`` and the probe recorder all call
:func:`token_terms`, so their numbers cannot drift apart (prime-rl computes its
importance ratio and mismatch KL in one function for the same reason).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class TokenTerms:
    """Aligned per-token arrays, shape ``[T]``, float64."""

    log_ratio_T: np.ndarray
    """l = log p - log q (trainer over sampler)."""
    ratio_T: np.ndarray
    """r = exp(l) = p / q (may be +inf when q underflows)."""
    p_T: np.ndarray
    q_T: np.ndarray
    tv_T: np.ndarray
    """|p - q|: binary TV of the sampled token, a lower bound of full-vocab TV."""
    k1_T: np.ndarray
    """-l: unbiased for KL(sampler || trainer), can be negative."""
    k2_T: np.ndarray
    """l^2 / 2: biased, low variance, >= 0."""
    k3_T: np.ndarray
    """(r - 1) - l: unbiased for KL(sampler || trainer), >= 0."""
    kl_reverse_k3_T: np.ndarray
    """r l - (r - 1): unbiased for KL(trainer || sampler) from sampler draws, >= 0."""


def token_terms(trainer_logprob_T: np.ndarray, sampler_logprob_T: np.ndarray) -> TokenTerms:
    """Compute every per-token divergence term from the two logprob columns.

    ``(r - 1) - l`` is evaluated as ``expm1(l) - l`` so that tiny mismatches
    (|l| ~ 1e-7, the fp32-vs-fp32 regime) keep their precision instead of
    cancelling to zero.
    """
    lp = np.asarray(trainer_logprob_T, dtype=np.float64)
    lq = np.asarray(sampler_logprob_T, dtype=np.float64)
    if lp.shape != lq.shape:
        raise ValueError(f"trainer and sampler logprobs differ in length: {lp.shape} vs {lq.shape}")
    with np.errstate(over="ignore", invalid="ignore"):
        log_ratio = lp - lq
        rm1 = np.expm1(log_ratio)
        ratio = rm1 + 1.0
        p = np.exp(lp)
        q = np.exp(lq)
        k3 = rm1 - log_ratio
        krev = ratio * log_ratio - rm1
    return TokenTerms(
        log_ratio_T=log_ratio,
        ratio_T=ratio,
        p_T=p,
        q_T=q,
        tv_T=np.abs(p - q),
        k1_T=-log_ratio,
        k2_T=0.5 * log_ratio * log_ratio,
        k3_T=np.maximum(k3, 0.0),
        kl_reverse_k3_T=np.maximum(krev, 0.0),
    )


def binary_kl(q_T: np.ndarray, p_T: np.ndarray) -> np.ndarray:
    """KL(Bern(q) || Bern(p)) = q log(q/p) + (1-q) log((1-q)/(1-p)), the DPPO-KL quantity.

    Terms with a zero weight are 0 (0 log 0 = 0); a zero denominator with a
    nonzero weight gives +inf.
    """
    q = np.asarray(q_T, dtype=np.float64)
    p = np.asarray(p_T, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        a = np.where(q > 0, q * (np.log(q) - np.log(p)), 0.0)
        q1, p1 = 1.0 - q, 1.0 - p
        b = np.where(q1 > 0, q1 * (np.log(q1) - np.log(p1)), 0.0)
    return np.maximum(a + b, 0.0)
