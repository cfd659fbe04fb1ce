"""``--locate --plots``: the error along the forward pass, on a log scale.

One line per pair, medians over the sampled tokens at every vector point in
forward order (the ``logprob`` point is in nats and left out): the sampler
against the reference, the trainer against the reference, and the two sides
against each other. Where the side-vs-side line leaves the lower of the two
reference lines, the sides part above the noise floor. Exact zeros are drawn
at the bottom edge (a log axis has no 0).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..diagnose.document import LocateNotRun, LocateOk
    from ..diagnose.locate.document import PointResult

LOCATE_NAME = "diagnose_locate"
LINES = {
    "sampler vs reference": {"color": "#0969da", "lw": 5.0, "alpha": 0.35, "zorder": 2, "solid_capstyle": "round"},
    "trainer vs reference": {"color": "#1a7f37", "lw": 1.6, "marker": "o", "ms": 3.5, "zorder": 3},
    "sampler vs trainer": {"color": "#cf222e", "lw": 1.2, "ls": "--", "marker": "x", "ms": 4, "zorder": 4},
}
"""How each line is drawn: the two sides against the reference often coincide (equal engines up to a point), so
the first is a wide translucent band under the second; the pair's own line is dashed on top of both."""


def locate_picture(entry: LocateOk, name: str = LOCATE_NAME):
    from ..outputs import require_matplotlib
    from .pictures import _picture

    require_matplotlib()
    first = entry.result.verdict.first_parting
    return _picture(
        name,
        f"Where the gap enters: {entry.configuration}",
        f"{entry.result.verdict.reading}. Red, dashed: the sides against each other; the blue band and the green "
        f"line: each side against the float64 reference"
        + (f"; they part above the noise floor at {first}." if first else "."),
        locate_figure(entry),
    )


def locate_figure(entry: LocateOk):
    """The figure, titled with the configuration and the two sides it compares."""
    from .figures import _fig

    points = [p for p in entry.result.points if p.op != "logprob"]
    series, floor = _series(points)
    fig = _fig(max(7.5, 0.12 * len(points)), 4.4)
    ax = fig.add_subplot()
    for label, vals in series.items():  # widest first, under the others: a line on top of another shows both
        ax.plot(range(len(points)), [max(v or 0.0, floor) for v in vals], label=label, **LINES[label])
    ticks = [i for i, p in enumerate(points) if p.op in ("embed", "input_norm", "final_norm", "logits")]
    ax.set_xticks(ticks, [_tick(points[i]) for i in ticks], rotation=90, fontsize=7)
    ax.set_yscale("log")
    ax.set_ylabel("median relative difference over tokens")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    title = f"Where the gap enters: {entry.configuration}"
    fig.suptitle(f"{title} ({entry.result.sampler} vs {entry.result.trainer})", fontsize=10, wrap=True)
    return fig


def _series(points: list[PointResult]) -> tuple[dict[str, list], float]:
    """The three lines' medians by point, and the floor a zero is drawn at (a log axis has no 0)."""
    series = {
        "sampler vs reference": [p.sampler_vs_reference.median for p in points],
        "trainer vs reference": [p.trainer_vs_reference.median for p in points],
        "sampler vs trainer": [p.sides.median for p in points],
    }
    positive = [v for vals in series.values() for v in vals if v and v > 0]
    return series, min(positive) / 10 if positive else 1e-18


def _tick(p: PointResult) -> str:
    return f"layer {p.layer}" if p.op == "input_norm" else p.op  # a layer's first point


def write_locate(entries: list[LocateOk | LocateNotRun], directory: Path, inputs=None) -> list[Path]:
    """One picture per configuration localised: ``diagnose_locate.png`` for the baseline, ``diagnose_locate_NAME``
    for a variant."""
    from ..diagnose.document import LocateOk
    from ..diagnose.variants import directory_name
    from .pictures import write_pngs

    pics = [
        locate_picture(
            e,
            LOCATE_NAME if e.configuration == "baseline" else f"{LOCATE_NAME}_{directory_name(e.configuration)}",
        )
        for e in entries
        if isinstance(e, LocateOk)
    ]
    return write_pngs(pics, Path(directory), inputs)


def html_section(entries: list[LocateOk | LocateNotRun]) -> str:
    """The locate part of diagnose's page: per configuration its verdict, its table and its picture."""
    from ..diagnose.document import LocateOk
    from .locate_table import growth_text
    from .page import _e, _figures, _num, _table

    out = "<h2>Where the gap enters (--locate)</h2>"
    for e in entries:
        out += f"<h3>{_e(e.configuration)}</h3>"
        if not isinstance(e, LocateOk):
            out += f"<p>{_e(e.status)}: {_e(e.reason or '')}</p>"
            continue
        rows = [
            [
                _e("" if p.layer is None else str(p.layer)),
                _e(p.op),
                _num(p.sides.median),
                _num(p.sides.max),
                _num(p.sampler_vs_reference.median),
                _num(p.trainer_vs_reference.median),
                _e(growth_text(p.growth)),
            ]
            for p in e.result.points
        ]
        out += (
            f"<p class='note'>{_e(e.result.verdict.reading)}</p>"
            + _table(
                ["layer", "op", "sampler vs trainer", "max", "sampler vs ref", "trainer vs ref", "growth"],
                rows,
                {2, 3, 4, 5, 6},
            )
            + _figures([locate_picture(e)])
        )
    return out
