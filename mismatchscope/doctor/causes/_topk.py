"""Fits within positions, from the top-k sums and lists (``sample.py``), shared by the value causes.

With ``x`` the trainer's and ``y`` the sampler's logprobs of the same listed
ids at one position, every transform of one side's values these causes name
is ``y = b x + a`` at that position:

* a temperature T on the sampler's side: ``b = 1/T`` and ``a = -log Z_b``,
  ``Z_b`` the sum of ``p^b`` over the whole vocabulary (so ``a`` is pinned by
  normalisation: between ``-log(S + t^b)`` and ``-log S`` for ``b >= 1``, below
  ``-log(S + t^b)`` for ``b < 1``, with ``S`` the sum of ``p^b`` over the
  listed ids and ``t`` the trainer's unlisted mass);
* a log base: ``b`` the base's factor and ``a = 0`` at every position;
* a kept set renormalised (top-p/top-k): ``b = 1`` and ``a = -log m > 0``.

So the slope separates the first two from the third, and the intercept the
first from the second, whatever the noise: a log2 sampler and a sampler at
T = ln 2 have the same slope and differ in ``a``.
"""

from __future__ import annotations

import numpy as np

from ..sample import Sample


def topk_rows(s: Sample, least: int = 2) -> np.ndarray | None:
    """Rows with at least ``least`` ids listed finite on both sides; None when the file has no top-k."""
    if not s.has("k_n"):
        return None
    return np.flatnonzero(s.columns["k_n"] >= least)


def centred(s: Sample, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per row of ``rows``: the listed values' sums of squares and products, each side centred within its
    position (sxx, sxy, syy)."""
    c = {k: _at(s.columns[k], rows) for k in ("k_n", "k_sx", "k_sy", "k_sxx", "k_sxy", "k_syy")}
    return (
        c["k_sxx"] - c["k_sx"] ** 2 / c["k_n"],
        c["k_sxy"] - c["k_sx"] * c["k_sy"] / c["k_n"],
        c["k_syy"] - c["k_sy"] ** 2 / c["k_n"],
    )


def within(s: Sample) -> tuple[np.ndarray, tuple[np.ndarray, np.ndarray, np.ndarray]] | None:
    """:func:`topk_rows` and their :func:`centred` sums, made once per sample (the temperature's detector and
    its screen read them); None without top-k."""

    def make() -> tuple[np.ndarray, tuple[np.ndarray, np.ndarray, np.ndarray]] | None:
        rows = topk_rows(s)
        return None if rows is None else (rows, centred(s, rows))

    return s.once("topk.within", make)


def _at(v: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """``v[rows]`` for sorted distinct ``rows``; ``v`` itself when they are every row (no copy to make)."""
    return v if rows.size == v.size else v[rows]


def within_slope(
    s: Sample, rows: np.ndarray, terms: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
) -> tuple[float, float]:
    """The pooled slope of the sampler's on the trainer's listed logprobs, each centred within its position,
    and its R^2 (NaN when the positions hold no spread); ``terms``: the rows' :func:`centred` sums if made."""
    txx, txy, tyy = centred(s, rows) if terms is None else terms
    sxx, sxy, syy = float(np.sum(txx)), float(np.sum(txy)), float(np.sum(tyy))
    if not (sxx > 0 and syy > 0):
        return float("nan"), float("nan")
    return sxy / sxx, sxy * sxy / (sxx * syy)


def means(s: Sample, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each row's mean listed trainer (x) and sampler (y) logprob."""
    n = s.columns["k_n"][rows]
    return s.columns["k_sx"][rows] / n, s.columns["k_sy"][rows] / n


def intercepts(s: Sample, rows: np.ndarray, b: float) -> np.ndarray:
    """a = mean(y) - b mean(x) of each row: what the positions' offsets are once the slope is taken out."""
    x, y = means(s, rows)
    return y - b * x


def list_rows(s: Sample, least: int = 2) -> np.ndarray:
    """Sample rows whose lists were kept, with at least ``least`` ids finite on both sides."""
    if s.lists is None or not s.has("list_row"):
        return np.zeros(0, np.int64)
    return np.flatnonzero((s.columns["list_row"] >= 0) & (s.columns["k_n"] >= least))


def temperature_interval(s: Sample, rows: np.ndarray, b: float) -> tuple[np.ndarray, np.ndarray]:
    """Per row (of ``rows``, which kept their lists): the interval a temperature with slope ``b`` allows the
    intercept ``a`` (see the module's docstring); -inf where it has no lower end."""
    x, _y, owner = s.row_lists(rows)
    ok = np.isfinite(x)
    idx = np.searchsorted(rows, owner[ok])
    # per row: the log of the sum of p^b over the listed ids, and the trainer's unlisted mass
    bx = b * x[ok]
    top = np.full(rows.size, -np.inf)
    np.maximum.at(top, idx, bx)
    top = np.where(np.isfinite(top), top, 0.0)
    s_b = np.bincount(idx, weights=np.exp(bx - top[idx]), minlength=rows.size)
    log_s = np.log(np.maximum(s_b, 1e-300)) + top
    listed = np.bincount(idx, weights=np.exp(x[ok]), minlength=rows.size)
    tail = np.clip(1.0 - listed, 0.0, 1.0)
    with np.errstate(divide="ignore"):
        log_edge = np.logaddexp(log_s, b * np.log(tail))  # log(S + t^b)
    if b >= 1:
        return -log_edge, -log_s
    return np.full(rows.size, -np.inf), -log_edge


def distance(a: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """How far each value lies outside its interval (0 inside)."""
    return np.maximum(lo - a, 0.0) + np.maximum(a - hi, 0.0)


def rms(v: np.ndarray) -> float:
    return float(np.sqrt(np.mean(v * v))) if v.size else float("nan")
