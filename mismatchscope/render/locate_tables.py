"""``--locate`` in the terminal: one table per localisation, whole at 80 columns, and its verdict.

Rows are the capture points in forward order (layer, op); the numbers are
medians over the sampled tokens except ``s-t max``. The mark column flags the
first difference (``*``), the first parting above the noise floor (``!``)
and the largest growths (``^``).
"""

from __future__ import annotations

from typing import Any

LEGEND = (
    "s-t: sampler vs trainer; s-ref, t-ref: each side vs the reference; median over tokens of "
    "||a - b|| / ||ref|| (logprob: |a - b| nats); floor: the smaller of s-ref and t-ref; growth: s-t over the "
    "point it is computed from (new: from exactly 0). * first difference, ! first parting above the floor, "
    "^ largest growth"
)


def _mark(point: str, verdict: dict[str, Any]) -> str:
    return (
        ("*" if point == verdict["first_difference"] else "")
        + ("!" if point == verdict["first_parting"] else "")
        + ("^" if point in verdict["largest_growth"] else "")
    )


def growth_text(g) -> str:
    from .tables import num

    if g is None:
        return "-"
    return "new" if g == "inf" or g == float("inf") else num(g, 3)


def render_locate(console, entry: dict[str, Any], *, title: str | None = None) -> None:
    """One localisation: its table, its route flips, its verdict (a failed or skipped one: its reason)."""
    from .tables import num

    name = title or entry.get("configuration", "locate")
    if entry.get("status", "ok") != "ok":
        console.print(f"locate {name}: {entry['status']}: {entry.get('reason')}", highlight=False, markup=False)
        return
    console.print(
        f"Where the gap enters ({name}): sampler {entry['sampler']} vs trainer {entry['trainer']}, reference "
        f"{entry['reference']} | {entry['tokens']} tokens of {len(entry['sequences'])} sequences",
        highlight=False,
        markup=False,
    )
    v = entry["verdict"]
    console.print(_table(entry["points"], v))
    for p in entry["points"]:
        f = p.get("route_flips")
        if f:
            console.print(
                f"route flips, layer {p['layer']} (top-{f['k']} sets): sampler vs trainer {100 * f['sides']:.3g}%, "
                f"sampler vs ref {100 * f['sampler_vs_reference']:.3g}%, trainer vs ref "
                f"{100 * f['trainer_vs_reference']:.3g}%",
                highlight=False,
                markup=False,
            )
    for point, why in entry["missing"].items():
        console.print(f"not compared: {point}: {why}", highlight=False, markup=False)
    console.print(LEGEND, style="dim", highlight=False, markup=False)
    closure = entry.get("sampler_closure")
    closes = "" if closure is None else f"; its logprob point against the engine's own prompt logprobs: {num(closure)}"
    console.print(f"sampler side: {entry['sampler_note']}{closes}", style="dim", highlight=False, markup=False)
    console.print(f"verdict: {v['reading']}", highlight=False, markup=False)


def _table(points: list[dict[str, Any]], verdict: dict[str, Any]):
    from rich import box
    from rich.table import Table

    from .tables import num

    t = Table(box=box.SIMPLE_HEAD, pad_edge=False, padding=(0, 1), collapse_padding=True)
    for c in ("layer", "op", "s-t", "s-t max", "s-ref", "t-ref", "growth", ""):
        t.add_column(c, justify="left" if c in ("op", "") else "right", no_wrap=True)
    for p in points:
        t.add_row(
            "" if p["layer"] is None else str(p["layer"]),
            p["op"],
            *(num(x, 3) for x in (p["sides"]["median"], p["sides"]["max"])),
            *(num(p[k]["median"], 3) for k in ("sampler_vs_reference", "trainer_vs_reference")),
            growth_text(p["growth"]),
            _mark(p["point"], verdict),
        )
    return t


def render_all(console, entries: list[dict[str, Any]]) -> None:
    """The baseline's whole table; each variant's verdict (its table is in the JSON and the HTML page)."""
    for e in entries:
        if e["configuration"] == "baseline" or e.get("status") != "ok":
            render_locate(console, e)
        else:
            console.print(f"locate {e['configuration']}: {e['verdict']['reading']}", highlight=False, markup=False)
