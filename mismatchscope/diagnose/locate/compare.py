"""Per-point differences, growth and the verdict, from three captures of the same token positions.

For a vector point the difference of two sides at one token is
``||a - b|| / ||r||`` with ``r`` the reference's vector there (relative to the
true value, so a point's size does not hide or inflate it); for ``logprob``
it is ``|a - b|``, in nats. Each point reports the median and the largest over
the sampled tokens for sampler vs trainer and for each side vs the reference.

The **noise floor** of a point is the reference's agreement with the closer
side, ``min(median d(sampler, ref), median d(trainer, ref))``: two float32
stacks that both round differ from float64 by about that much, so a gap
between them below it is rounding both share. The sides **part** at the first
point whose median sampler-vs-trainer difference exceeds its floor; the
**first difference** is the first point where any sampled value differs in a
single bit (the same code on slightly different weights is byte-equal up to
there). **Growth** is the median difference over that of the point it is
computed from (:func:`.points.source`): where the error jumps, not where it
accumulates. (``logprob`` has none: nats against a relative difference.)
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from .document import LocateResult, PointResult, RouteFlips, Spread, Verdict
from .points import SideCapture, source, split

LARGEST = 3
"""how many points the verdict names as the largest growth."""


def token_differences(a: np.ndarray, b: np.ndarray, ref: np.ndarray, point: str) -> np.ndarray:
    """Per-token difference of two sides' rows at one point (see the module's docstring)."""
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    if point == "logprob":
        return np.abs(a64 - b64)[:, 0]
    scale = np.linalg.norm(ref.astype(np.float64), axis=1)
    scale = np.where(scale > 0, scale, 1.0)
    return np.linalg.norm(a64 - b64, axis=1) / scale


def _spread(d: np.ndarray) -> Spread:
    return Spread(median=float(np.median(d)), max=float(np.max(d)))


def _flips(a: np.ndarray, b: np.ndarray, k: int) -> float:
    """Share of tokens whose top-k expert set differs between two sides' router logits."""
    ta = np.sort(np.argsort(-a, axis=1, kind="stable")[:, :k], axis=1)
    tb = np.sort(np.argsort(-b, axis=1, kind="stable")[:, :k], axis=1)
    return float(np.mean(np.any(ta != tb, axis=1)))


def _growth(value: float, before: float | None) -> float | None:
    if before is None:
        return None
    if before == 0:
        return math.inf if value > 0 else None
    return value / before


def compare(
    sampler: SideCapture,
    trainer: SideCapture,
    reference: SideCapture,
    names: list[str],
    n_sequences: int,
    top_k: int | None = None,
) -> tuple[list[PointResult], dict[str, str]]:
    """One :class:`PointResult` per point all three captured, in forward order; and the points left out -> why."""
    points: list[PointResult] = []
    medians: dict[str, float] = {}
    missing: dict[str, str] = {}
    sides = (sampler, trainer, reference)
    for name in names:
        rows = [c.rows(name, n_sequences) for c in sides]
        s, t, r = rows
        if s is None or t is None or r is None:
            missing[name] = next(
                c.missing.get(name) or f"not captured on the {c.label} side"
                for c, x in zip(sides, rows, strict=True)
                if x is None
            )
            continue
        point = _point(name, s, t, r, top_k)
        medians[name] = point.sides.median
        src = source(name, names)
        before = medians.get(src) if src else None
        growth = None if point.op == "logprob" else _growth(point.sides.median, before)
        points.append(replace(point, growth=growth))
    return points, missing


def _point(name: str, s: np.ndarray, t: np.ndarray, r: np.ndarray, top_k: int | None) -> PointResult:
    """One point's differences (growth filled in by the caller, which knows the point before)."""
    st, sr, tr = (token_differences(x, y, r, name) for x, y in ((s, t), (s, r), (t, r)))
    layer, op = split(name)
    flips = None
    if op == "router" and top_k:
        flips = RouteFlips(
            k=top_k,
            sides=_flips(s, t, top_k),
            sampler_vs_reference=_flips(s, r, top_k),
            trainer_vs_reference=_flips(t, r, top_k),
        )
    return PointResult(
        point=name,
        layer=layer,
        op=op,
        width=int(s.shape[1]),
        sides=_spread(st),
        sampler_vs_reference=_spread(sr),
        trainer_vs_reference=_spread(tr),
        noise_floor=min(float(np.median(sr)), float(np.median(tr))),
        bit_equal=bool(np.array_equal(s, t)),
        growth=None,
        route_flips=flips,
    )


def verdict(points: list[PointResult]) -> Verdict:
    """The first difference, the first parting above the noise floor, and the largest finite growths."""
    first_diff = next((p.point for p in points if not p.bit_equal), None)
    parting = next((p.point for p in points if p.sides.median > p.noise_floor), None)
    finite = [p for p in points if p.growth is not None and math.isfinite(p.growth) and p.growth > 1]
    largest = [p.point for p in sorted(finite, key=lambda p: -(p.growth or 0))[:LARGEST]]
    return Verdict(
        first_difference=first_diff,
        first_parting=parting,
        largest_growth=largest,
        reading=_reading(points, first_diff, parting, largest),
    )


def _reading(points: list[PointResult], first_diff, parting, largest) -> str:
    if first_diff is None:
        return "the two sides are bit-identical at every captured point"
    by = {p.point: p for p in points}
    text = f"the sides first differ at {first_diff}"
    if parting is None:
        text += ", and stay within the reference's own agreement with either side (the noise floor) throughout"
    elif parting == first_diff:
        text += (
            f" and part there above the noise floor ({by[parting].sides.median:.3g} vs {by[parting].noise_floor:.3g})"
        )
    else:
        text += (
            f"; they part above the noise floor at {parting} ({by[parting].sides.median:.3g} vs "
            f"{by[parting].noise_floor:.3g})"
        )
    if largest:
        text += "; largest growth at " + ", ".join(f"{n} ({by[n].growth:.3g}x)" for n in largest)
    return text


def locate_result(sampler, trainer, reference, names, sequences, tokens, top_k, meta: dict) -> LocateResult:
    """The whole typed result of one localisation."""
    points, missing = compare(sampler, trainer, reference, names, len(sequences), top_k)
    return LocateResult(
        points=points,
        missing=missing,
        verdict=verdict(points),
        sequences=[s.label for s in sequences],
        tokens=tokens,
        capture_bytes=sampler.nbytes + trainer.nbytes + reference.nbytes,
        **meta,
    )
