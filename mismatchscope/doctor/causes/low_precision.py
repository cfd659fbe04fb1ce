"""``low_precision``: one side's logprobs rounded to a bfloat16 or float16 grid before they were written.

Read from the mantissa bits the values use: float32 values use 23, float64
52, a bfloat16 grid 7 and a float16 grid 10. Rounding cannot be undone row
by row, so the share of the gap it explains comes from its model: rounding
to a grid of spacing u adds u^2/12 to the mean square gap, which (k3 ~ l^2/2
for small l) is that share of the k3 mean.
"""

from __future__ import annotations

import numpy as np

from ..document import Evidence, ExplainedShare, Finding
from ..findings import MIN_TOKENS, clear, detected, model_share, too_few
from ..registry import Cause, Context

GRID_SHARE = 0.99
"""this share of a side's nonzero values on the grid (clean float32 values: 2^-13 on fp16's)."""
GRIDS = ((7, "bfloat16"), (10, "float16"))


def bits(v: np.ndarray) -> np.ndarray:
    """Mantissa bits each float64 value uses (52 minus its trailing zero bits; 0 for powers of two).

    The lowest set bit of the mantissa is a power of two, 2^e: as a float64 its exponent field is e + 1023, and
    the value uses 52 - e bits. Read from the bits, with no logarithm, in two arrays made in place.
    """
    m = v.view(np.uint64) & np.uint64((1 << 52) - 1)
    low = ~m
    low += np.uint64(1)
    low &= m  # the lowest set bit: 0 where the mantissa is 0
    power = m.view(np.float64)
    np.copyto(power, low, casting="unsafe")  # exactly: a power of two (0.0, field 0, for a mantissa of 0)
    used = power.view(np.int64)
    used >>= 52
    np.subtract(1075, used, out=used)
    used[used == 1075] = 0
    return used


def bit_counts(v: np.ndarray) -> np.ndarray:
    """How many of the float64 values ``v`` use each number of mantissa bits, 0 to 52 (:func:`bits`)."""
    return np.bincount(bits(v), minlength=53)


def _grid(v: np.ndarray) -> tuple[str | None, int]:
    """The grid the values ``v`` sit on, and the mantissa bits their :data:`GRID_SHARE` quantile uses.

    The quantile is ``np.quantile(bits(v), GRID_SHARE, method="higher")``, the value at index
    ceil((n - 1) q) of the sorted bits, read from the count of each of the 53 bit counts: no sort to make.
    """
    at = int(np.ceil((v.size - 1) * GRID_SHARE))
    used = int(np.searchsorted(np.cumsum(bit_counts(v)), at, side="right"))
    return next((name for b, name in GRIDS if used <= b), None), used


def detect(ctx: Context) -> Finding:
    s = ctx.sample
    ev, found = [], []
    for side, name in (("sampler", "sampler_logprob"), ("trainer", "trainer_logprob")):
        v = np.ascontiguousarray(s.columns[name], dtype=np.float64)
        v = v[v != 0]
        if v.size < MIN_TOKENS:
            return too_few("low_precision", int(v.size), what=f"nonzero {side} logprobs")
        grid, used = _grid(v)
        ev.append(Evidence(f"mantissa bits the {side}'s logprobs use (99th percentile)", used, "23 (float32), 52"))
        if grid:
            found.append((side, grid, used))
    if not found:
        return clear("low_precision", "neither side's logprobs sit on a bfloat16 or float16 grid", ev)
    side, grid, used = found[0]
    both = " (both sides)" if len(found) > 1 else ""
    return detected(
        "low_precision",
        f"the {side}'s logprobs are rounded to a {grid} grid ({used} mantissa bits){both}",
        ev,
        {"side": side, "mantissa_bits": used, "grid": grid, "sides": float(len(found))},
        "high",
        f"return the {side}'s logprobs in float32: computed in float32, then cast, they lose the digits "
        "the mismatch is measured in",
    )


def share(ctx: Context, f: Finding) -> ExplainedShare | None:
    """u^2/12 per rounded value over the mean square gap (each rounded side adds its own)."""
    s = ctx.sample
    l2 = float(np.mean(s.gap() ** 2))
    if not l2 > 0:
        return None
    added = 0.0
    for name in ("sampler_logprob", "trainer_logprob"):
        v = s.columns[name]
        grid, used = _grid(v[v != 0]) if (v != 0).sum() >= MIN_TOKENS else (None, 52)
        if grid is None:
            continue
        exponent = np.floor(np.log2(np.maximum(np.abs(v), 1e-300)))
        u = np.where(v != 0, 2.0 ** (exponent - used), 0.0)
        added += float(np.mean(u * u / 12))
    frac = min(1.0, added / l2)
    return model_share(
        frac,
        1 - np.sqrt(max(0.0, 1 - frac)),
        "the gap",
        "rounding to the grid adds u^2/12 to the mean square gap (u the grid's spacing at each value)",
    )


CAUSE = Cause(
    "low_precision",
    detect,
    share=share,
    correction="a model of the rounding's share (not undone)",
    reread=False,  # read on the values as written: another cause's correction moves them off the grid
)
