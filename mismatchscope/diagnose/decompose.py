"""Per-token error decomposition against the reference.

With the reference logprob ``lr`` of the same token, the sampler's error is
``e_s = lq - lr``, the trainer's ``e_t = lp - lr``, and the gap every metric
is built on is ``l = lp - lq = e_t - e_s``. So

    mean(l^2) = mean(e_s^2) + mean(e_t^2) - 2 mean(e_s e_t)

and each side's share of the error budget is ``mean(e_x^2) / (mean(e_s^2) +
mean(e_t^2))``. The correlation ``mean(e_s e_t) / sqrt(mean(e_s^2)
mean(e_t^2))`` (uncentred: the errors' scale about zero is what adds up)
says whether the two errors add in quadrature (0) or cancel (near 1: the
same kernels on both sides).
"""

from __future__ import annotations

import math

import numpy as np

from .document import Shares


def decompose(sampler_lp: np.ndarray, trainer_lp: np.ndarray, reference_lp: np.ndarray) -> Shares:
    """The decomposition of one configuration's tokens (aligned 1-D arrays)."""
    lq, lp, lr = (np.asarray(x, dtype=np.float64) for x in (sampler_lp, trainer_lp, reference_lp))
    if not lq.shape == lp.shape == lr.shape:
        raise ValueError(f"misaligned arrays: {lq.shape}, {lp.shape}, {lr.shape}")
    keep = np.isfinite(lq) & np.isfinite(lp) & np.isfinite(lr)
    e_s, e_t = lq[keep] - lr[keep], lp[keep] - lr[keep]
    n = int(keep.sum())
    if n == 0:
        return Shares(0, None, None, None, None, None, None, None)
    ms, mt, cross = float(np.mean(e_s * e_s)), float(np.mean(e_t * e_t)), float(np.mean(e_s * e_t))
    budget = ms + mt
    denom = math.sqrt(ms * mt)
    return Shares(
        tokens=n,
        sampler_mse=ms,
        trainer_mse=mt,
        cross=cross,
        total_mse=float(np.mean((e_t - e_s) ** 2)),
        sampler_share=ms / budget if budget > 0 else None,
        trainer_share=mt / budget if budget > 0 else None,
        correlation=cross / denom if denom > 0 else None,
    )
