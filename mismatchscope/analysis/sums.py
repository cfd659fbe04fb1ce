"""Metrics derived from sums: the one place a token mean, chi2 or ESS is computed.

Every token-level metric the tool prints is a ratio of sums over a set of
tokens: the whole file (``report``), a sampler-probability, position or
entropy bucket (the breakdowns), a (step, group) key (``timeline`` and the
live Monitor). :func:`token_sums` gathers the sums per key in one pass of
``np.bincount``; :func:`token_means` turns sums into metrics, elementwise, so
the same arithmetic serves a scalar, a row of buckets or a row of steps.

With l = log p - log q and r = exp(l) per token (docs/metrics.md): k1 = -l, k2 = l^2/2, k3 = (r-1) - l, reverse KL (k3 form) =
r l - (r-1), chi2 = mean r^2 - 1, ESS / n = (sum r)^2 / (n sum r^2).
"""

from __future__ import annotations

import numpy as np

from ..divergence import TokenTerms
from ..metrics import (
    ABS_LOGPROB_DIFF_MEAN,
    CHI2_TOKEN,
    ESS,
    K1_MEAN,
    K2_MEAN,
    K3_MEAN,
    KL_REVERSE_K3_MEAN,
    TV_TOKEN_MEAN,
)

LOG_R2_OVERFLOW = float(np.log(np.finfo(np.float64).max)) / 2
"""log p - log q above this (about 354.9) makes r^2 overflow float64: chi2 reads inf and ESS cannot be formed."""

TOKEN_SUMS = ("n", "tv", "abs_l", "k1", "k2", "k3", "krev", "r", "r2")
"""the rows of :func:`token_sums`, in this order."""


def token_weights(t: TokenTerms) -> tuple:
    """The per-token values :func:`token_sums` adds up, in ``TOKEN_SUMS`` order (None: a count)."""
    return (None, t.tv_T, np.abs(t.log_ratio_T), t.k1_T, t.k2_T, t.k3_T, t.kl_reverse_k3_T, t.ratio_T, t.ratio_sq_T)


def token_sums(idx: np.ndarray, nb: int, t: TokenTerms | tuple) -> np.ndarray:
    """``[len(TOKEN_SUMS), nb]``: each sum over the tokens of each key ``idx`` (0 <= idx < nb).

    ``t``: the batch's terms, or their :func:`token_weights` when one batch is summed by several keys.
    """
    weights = token_weights(t) if isinstance(t, TokenTerms) else t
    # bincount's own index type, cast once rather than once a sum (safe casts only: a float key is refused)
    idx = np.asarray(idx).astype(np.intp, casting="safe", copy=False)
    return np.stack([np.bincount(idx, weights=w, minlength=nb)[:nb].astype(np.float64) for w in weights])


def token_means(
    n, *, tv=None, abs_l=None, k1=None, k2=None, k3=None, krev=None, r=None, r2=None
) -> dict[str, float | np.ndarray]:
    """The report's token metrics from whichever sums are given (scalars or aligned arrays).

    Keys are the catalog's names (``metrics.CATALOG``): the means of tv, |l|,
    k1, k2, k3 and reverse k3, ``chi2_token`` (needs r2) and ``ess`` (needs r
    and r2; ESS / n).
    """
    out = {}
    for m, s in (
        (TV_TOKEN_MEAN, tv),
        (ABS_LOGPROB_DIFF_MEAN, abs_l),
        (K1_MEAN, k1),
        (K2_MEAN, k2),
        (K3_MEAN, k3),
        (KL_REVERSE_K3_MEAN, krev),
    ):
        if s is not None:
            out[m.name] = s / n
    if r2 is not None:
        out[CHI2_TOKEN.name] = r2 / n - 1.0
        if r is not None:
            out[ESS.name] = ess(n, r, r2)
    return out


def ess(n, r, r2):
    """ESS / n = (sum r)^2 / (n sum r^2); NaN where sum r^2 overflowed (finite / inf is not an ESS of 0)."""
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        value = (r * r) / (n * r2)
    return np.where(np.isposinf(r2), np.nan, value)[()]


def summarise_sums(s: np.ndarray) -> dict[str, float | int | None]:
    """Means from one column of :func:`token_sums` (one key); an empty key has only its count."""
    n = s[0]
    if n == 0:
        return {"tokens": 0}
    with np.errstate(divide="ignore", invalid="ignore"):
        m = token_means(n, **{k: s[i] for i, k in enumerate(TOKEN_SUMS) if k != "n"})
    out: dict[str, float | int | None] = {"tokens": int(n)}
    for name, value in m.items():  # scalars here: one key's sums
        out[name] = float(value)
    if not np.isfinite(m[ESS.name]):  # 0 / 0, or sum r^2 overflowed
        out[ESS.name] = None
    return out
