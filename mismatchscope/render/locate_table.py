"""``--locate`` in the terminal: one table per localisation, whole at 80 columns, and its verdict.

Rows are the capture points in forward order (layer, op); the numbers are
medians over the sampled tokens except ``s-t max``. The mark column flags the
first difference (``*``), the first parting above the noise floor (``!``)
and the largest growths (``^``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..diagnose.document import LocateNotRun, LocateOk
    from ..diagnose.locate.document import LocateResult, PointResult, Verdict

LEGEND = (
    "s-t: sampler vs trainer; s-ref, t-ref: each side vs the reference; median over tokens of "
    "||a - b|| / ||ref|| (logprob: |a - b| nats); floor: the smaller of s-ref and t-ref; growth: s-t over the "
    "point it is computed from (new: from exactly 0). * first difference, ! first parting above the floor, "
    "^ largest growth"
)


def _mark(point: str, verdict: Verdict) -> str:
    return (
        ("*" if point == verdict.first_difference else "")
        + ("!" if point == verdict.first_parting else "")
        + ("^" if point in verdict.largest_growth else "")
    )


def growth_text(g) -> str:
    from ..formatting import num

    if g is None:
        return "-"
    return "new" if g == "inf" or g == float("inf") else num(g, 3)


def render_locate(console, result: LocateResult, name: str) -> None:
    """One localisation: its table, its route flips, its verdict."""
    from ..formatting import num

    console.print(
        f"Where the gap enters ({name}): sampler {result.sampler} vs trainer {result.trainer}, reference "
        f"{result.reference} | {result.tokens} tokens of {len(result.sequences)} sequences",
        highlight=False,
        markup=False,
    )
    v = result.verdict
    console.print(_table(result.points, v))
    for p in result.points:
        f = p.route_flips
        if f:
            console.print(
                f"route flips, layer {p.layer} (top-{f.k} sets): sampler vs trainer {100 * f.sides:.3g}%, "
                f"sampler vs ref {100 * f.sampler_vs_reference:.3g}%, trainer vs ref "
                f"{100 * f.trainer_vs_reference:.3g}%",
                highlight=False,
                markup=False,
            )
    for point, why in result.missing.items():
        console.print(f"not compared: {point}: {why}", highlight=False, markup=False)
    console.print(LEGEND, style="dim", highlight=False, markup=False)
    closure = result.sampler_closure
    closes = "" if closure is None else f"; its logprob point against the engine's own prompt logprobs: {num(closure)}"
    console.print(f"sampler side: {result.sampler_note}{closes}", style="dim", highlight=False, markup=False)
    console.print(f"verdict: {v.reading}", highlight=False, markup=False)


def _table(points: list[PointResult], verdict: Verdict):
    from rich import box
    from rich.table import Table

    from ..formatting import num

    t = Table(box=box.SIMPLE_HEAD, pad_edge=False, padding=(0, 1), collapse_padding=True)
    for c in ("layer", "op", "s-t", "s-t max", "s-ref", "t-ref", "growth", ""):
        t.add_column(c, justify="left" if c in ("op", "") else "right", no_wrap=True)
    for p in points:
        t.add_row(
            "" if p.layer is None else str(p.layer),
            p.op,
            *(num(x, 3) for x in (p.sides.median, p.sides.max)),
            *(num(s.median, 3) for s in (p.sampler_vs_reference, p.trainer_vs_reference)),
            growth_text(p.growth),
            _mark(p.point, verdict),
        )
    return t


def render_all(console, entries: list[LocateOk | LocateNotRun]) -> None:
    """The baseline's whole table; each variant's verdict (its table is in the JSON and the HTML page); a
    localisation that did not run: why."""
    from ..diagnose.document import LocateOk

    for e in entries:
        if not isinstance(e, LocateOk):
            console.print(f"locate {e.configuration}: {e.status}: {e.reason}", highlight=False, markup=False)
        elif e.configuration == "baseline":
            render_locate(console, e.result, e.configuration)
        else:
            console.print(f"locate {e.configuration}: {e.result.verdict.reading}", highlight=False, markup=False)
