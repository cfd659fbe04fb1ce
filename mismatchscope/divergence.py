"""The one primitive every command uses: per-token log-ratio, ratio, TV and
the k1/k2/k3 KL estimators (docs/metrics.md).

``report``, ``compare-masks``, ``gate`` and the probe run writer all call
:func:`token_terms`, so their numbers cannot drift apart (prime-rl computes its
importance ratio and mismatch KL in one function for the same reason).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property

import numpy as np


@dataclass(frozen=True)
class TokenTerms:
    """Aligned per-token arrays, shape ``[T]``, float64."""

    log_ratio_T: np.ndarray
    """l = log p - log q (trainer over sampler)."""
    ratio_T: np.ndarray
    """r = exp(l) = p / q (may be +inf when q underflows)."""
    ratio_sq_T: np.ndarray
    """r^2, for chi2 and ESS; +inf once l passes ~354.9, as chi2 should then read."""
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
    lp_T: np.ndarray | None = None
    """log p and log q as given (float64): the binary-KL rules work in log space near 0 and 1."""
    lq_T: np.ndarray | None = None

    @cached_property
    def one_minus_q_T(self) -> np.ndarray:
        """1 - q as -expm1(log q): exact near q = 1, where 1 - exp(log q) rounds to 0 (the binary KLs use it)."""
        with np.errstate(over="ignore"):
            return -np.expm1(np.asarray(self.lq_T, dtype=np.float64))

    @cached_property
    def one_minus_p_T(self) -> np.ndarray:
        """1 - p as -expm1(log p)."""
        with np.errstate(over="ignore"):
            return -np.expm1(np.asarray(self.lp_T, dtype=np.float64))

    @cached_property
    def chi2_screen(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``((p - q)^2, min(p(1-p), q(1-q)), min(...) <= 1e-12)``: what :func:`binary_kl_candidates` compares,
        whatever the threshold, computed once for every rule that screens the same tokens."""
        p, q = np.asarray(self.p_T, dtype=np.float64), np.asarray(self.q_T, dtype=np.float64)
        v = np.minimum(p * (1.0 - p), q * (1.0 - q))
        d = p - q
        return d * d, v, v <= 1e-12


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
        ratio_sq = ratio * ratio
        p = np.exp(lp)
        q = np.exp(lq)
        # the rest in place: each result is the same expression's value, without a temporary a step
        k3 = np.subtract(rm1, log_ratio)
        np.maximum(k3, 0.0, out=k3)
        krev = np.multiply(ratio, log_ratio)
        krev -= rm1
        overflow = rm1 == np.inf  # l > ~709.8: r l - (r - 1) is +inf, not inf - inf = NaN
        if overflow.any():
            krev[overflow] = np.inf
        np.maximum(krev, 0.0, out=krev)
        tv = np.subtract(p, q)
        np.abs(tv, out=tv)
        k2 = np.multiply(0.5, log_ratio)
        k2 *= log_ratio
    return TokenTerms(
        log_ratio_T=log_ratio,
        ratio_T=ratio,
        ratio_sq_T=ratio_sq,
        p_T=p,
        q_T=q,
        tv_T=tv,
        k1_T=-log_ratio,
        k2_T=k2,
        k3_T=k3,
        kl_reverse_k3_T=krev,
        lp_T=lp,
        lq_T=lq,
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


KL_SCREEN_MIN = 1e-10
"""Below this threshold the chi-square screen is not used: rounding of the KL itself could matter."""


def binary_kl_candidates(t: TokenTerms, threshold: float) -> np.ndarray | None:
    """Indices of the tokens whose two-outcome KL, in either direction, may exceed ``threshold``; None: all.

    A binary KL is at most the chi-square divergence, KL(a||b) <= (a-b)^2 / (b(1-b)),
    and clamping both probabilities into [eps, 1 - eps] only lowers it (each
    point moves toward the other, and the KL is convex in each argument with
    its minimum where they meet). So a token with (p-q)^2 < threshold *
    min(p(1-p), q(1-q)) / 4 is below the threshold both ways, clamped or not,
    and a rule need compute the logarithms only for the others: most tokens of
    a real run. The factor 4 and the floor on p(1-p) absorb the rounding of p, q
    and of the KL, so a screened rule reaches exactly the verdicts of the full
    computation (tests/rules/test_token.py compares the two on adversarial inputs).
    """
    if not threshold >= KL_SCREEN_MIN:
        return None
    d2, v, tiny = t.chi2_screen
    return np.flatnonzero((d2 >= 0.25 * threshold * v) | tiny)


def binary_kl_logs(log_a_T: np.ndarray, log_b_T: np.ndarray, eps: float = 0.0) -> np.ndarray:
    """KL(Bern(a) || Bern(b)) from log-probabilities, stable near 0 and 1 (the KPop quantity).

    ``1 - a`` is ``-expm1(log a)``, exact where ``1 - exp(log a)`` would round
    to 0 for a near-certain token. With ``eps > 0`` both probabilities are
    clamped to ``[eps, 1 - eps]`` first (prime-rl and verl clamp at 1e-6); with
    ``eps = 0`` a zero weight gives a zero term (0 log 0 = 0) and a zero
    denominator under a nonzero weight gives +inf. Equal inputs give exactly 0.
    """
    return binary_kl_logs_both(log_a_T, log_b_T, eps)[0]


def binary_kl_logs_both(
    log_a_T: np.ndarray,
    log_b_T: np.ndarray,
    eps: float = 0.0,
    exps: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """(KL(Bern(a) || Bern(b)), KL(Bern(b) || Bern(a))) as :func:`binary_kl_logs` computes each, sharing
    the exponentials and logarithms both directions need (KPop takes the larger of the two).

    ``exps``: ``(exp(log a), exp(log b), -expm1(log a), -expm1(log b))`` where the caller holds them already
    (a batch's :class:`TokenTerms`): the same values, not computed twice, so the result is the same to the bit.
    """
    la0 = np.asarray(log_a_T, dtype=np.float64)
    lb0 = np.asarray(log_b_T, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        a1, b1 = (-np.expm1(la0), -np.expm1(lb0)) if exps is None else (exps[2], exps[3])
        if eps > 0:
            lo, hi = math.log(eps), math.log1p(-eps)
            # np.clip is min(max(x, lo), hi) for the finite values a pass holds, in a fraction of the time
            la, lb = np.clip(la0, lo, hi), np.clip(lb0, lo, hi)
            a1, b1 = np.clip(a1, eps, 1.0 - eps), np.clip(b1, eps, 1.0 - eps)
        else:
            la, lb = np.minimum(la0, 0.0), np.minimum(lb0, 0.0)
            a1, b1 = np.maximum(a1, 0.0), np.maximum(b1, 0.0)
        a = np.exp(la) if exps is None else _exp_where_moved(exps[0], la, la0)
        b = np.exp(lb) if exps is None else _exp_where_moved(exps[1], lb, lb0)
        dl = la - lb
        dl1 = np.log(a1) - np.log(b1)
        ab1, ab2 = a * dl, a1 * dl1
        ba1, ba2 = b * -dl, b1 * -dl1
        if eps <= 0:  # clamped probabilities are never 0; unclamped, a zero weight makes its term 0
            ab1, ab2 = np.where(a > 0, ab1, 0.0), np.where(a1 > 0, ab2, 0.0)
            ba1, ba2 = np.where(b > 0, ba1, 0.0), np.where(b1 > 0, ba2, 0.0)
    return np.maximum(ab1 + ab2, 0.0), np.maximum(ba1 + ba2, 0.0)


def _exp_where_moved(exp0: np.ndarray, x: np.ndarray, x0: np.ndarray) -> np.ndarray:
    """``exp(x)`` given ``exp0 = exp(x0)``: computed again only where a clamp moved ``x`` off ``x0``."""
    moved = np.flatnonzero(x != x0)
    if not moved.size:
        return exp0
    out = exp0.copy()
    out[moved] = np.exp(x[moved])
    return out


def k3_per_token(log_ratio: np.ndarray) -> np.ndarray:
    """k3 = (r - 1) - l of each log ratio l, as ``expm1(l) - l`` (no cancellation near 0), floored at 0.

    The one spelling of the formula outside :func:`token_terms`, which computes
    the same expression in place from the ``expm1(l)`` it already holds.
    """
    return np.maximum(np.expm1(log_ratio) - log_ratio, 0.0)


CLAMP_LOG_RATIO = 20.0
"""verl's SAFETY_BOUND: the log ratio is clamped to +-20 before its rollout_rs estimators."""


def clamped_k_terms(
    log_ratio_T: np.ndarray, bound: float = CLAMP_LOG_RATIO
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """k1 = -l, k2 = l^2/2, k3 = expm1(l) - l with l clamped to [-bound, bound] first, as verl's rollout_rs does."""
    lc = np.clip(np.asarray(log_ratio_T, dtype=np.float64), -bound, bound)
    return -lc, 0.5 * lc * lc, k3_per_token(lc)
