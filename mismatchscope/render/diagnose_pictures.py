"""The picture a team weighs: mismatch against throughput, one point per configuration.

Lower-right is better (less mismatch, more tokens/s); the Pareto front joins
the configurations no other beats on both axes; the baseline is ringed. Names
go in the legend (configurations of equal throughput sit on top of each
other), and the throughput axis starts at 0, so a 1% difference looks like 1%.
Reuses the report's figure and HTML helpers; matplotlib is imported only here.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from ..diagnose.cost import PARETO_NAME
from ..diagnose.document import VariantOk
from ..diagnose.effects import PRIMARY
from ..metrics import ABS_LOGPROB_DIFF_MEAN, K3_MEAN, TV_TOKEN_MEAN

if TYPE_CHECKING:
    from ..diagnose.document import DiagnoseDocument, Timing, VariantEntry


def _points(p: DiagnoseDocument) -> list[tuple[str, float, float]]:
    rows = [("baseline", getattr(p.baseline.metrics, PRIMARY), p.baseline.throughput.pipeline_tokens_per_s)]
    rows += [
        (v.name, getattr(v.metrics, PRIMARY), v.throughput.pipeline_tokens_per_s)
        for v in p.variants
        if isinstance(v, VariantOk)
    ]
    return [(n, m, t) for n, m, t in rows if m is not None and t is not None]


MARKERS = ("o", "s", "^", "D", "v", "P", "X", "<", ">", "h", "p", "8")


def _labels(p: DiagnoseDocument, pts) -> dict[str, str]:
    """Each configuration's legend entry: its name, whether it is on the Pareto front, and (certified ones) what
    zero mismatch costs against the fastest uncertified one."""
    price = {e.configuration: e.cost_x for e in p.zero_price}
    certified = {"baseline"} if p.baseline.certified else set()
    certified |= {v.name for v in p.variants if isinstance(v, VariantOk) and v.certified}
    out = {}
    for name, _, _ in pts:
        notes = ["Pareto front"] if name in p.pareto_front else []
        if name in certified:
            notes.append("certified" + (f", costs {price[name]:.2f}x" if price.get(name) else ""))
        out[name] = name + (f" ({'; '.join(notes)})" if notes else "")
    return out


def _intervals(p: DiagnoseDocument) -> dict[str, tuple[float, float]]:
    """Each timed variant's throughput interval: the baseline's throughput times its timed ratio's interval."""
    base = p.baseline.throughput.pipeline_tokens_per_s
    out = {}
    for v in p.variants:
        timing = v.throughput.timing if isinstance(v, VariantOk) else None
        if base and timing is not None:
            out[v.name] = (base * timing.low, base * timing.high)
    return out


def pareto_figure(p: DiagnoseDocument):
    """The figure: one marker and one legend entry per configuration (names in the legend, never beside
    clustered points, where they overlap), throughput from 0 (a 1% difference reads as 1%), each variant's
    timing interval as a bar."""
    from .figures import _fig

    pts = _points(p)
    labels, intervals = _labels(p, pts), _intervals(p)
    cmap = __import__("matplotlib").colormaps["tab10"]
    fig = _fig(9.5, 4.8)
    ax = fig.add_subplot()
    for i, (name, m, t) in enumerate(pts):
        y, colour = max(m, 1e-12), cmap(i % 10)
        if name in intervals:
            lo, hi = intervals[name]
            ax.plot([lo, hi], [y, y], color=colour, lw=1.2, alpha=0.7, zorder=2)
        ax.scatter(
            [t],
            [y],
            s=70 if name == "baseline" else 44,
            zorder=3,
            color=colour,
            marker=MARKERS[i % len(MARKERS)],
            edgecolors="black" if name == "baseline" else "none",
            linewidths=1.5,
            label=labels[name],
        )
    _front(ax, sorted([(t, m) for n, m, t in pts if n in p.pareto_front]))
    ax.set_yscale("log")
    top = max([t for _, _, t in pts] + [hi for _, hi in intervals.values()], default=1.0)
    ax.set_xlim(0, top * 1.1)
    ax.set_xlabel("pipeline throughput (tokens/s: tokens / (sampling + scoring time)), from 0")
    ax.set_ylabel("mean |log p - log q| (total gap)")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0, title="configuration")
    fig.suptitle("Mismatch against throughput", fontsize=11)
    return fig


def pareto_picture(p: DiagnoseDocument):
    from ..outputs import require_matplotlib
    from .pictures import _picture

    require_matplotlib()
    return _picture(
        PARETO_NAME,
        "Mismatch against throughput",
        "One point per configuration, named in the legend; the baseline has a black ring; the line joins the "
        "Pareto front (no other configuration has both less mismatch and more throughput). Throughput starts at 0; "
        "a bar is a variant's timed interval (the baseline's throughput times its timed ratio's interval).",
        pareto_figure(p),
    )


def _front(ax, front: list[tuple[float, float]]) -> None:
    """The Pareto front as one line through its (throughput, mismatch) points, where it has two or more."""
    if len(front) > 1:
        ax.plot(
            [t for t, _ in front],
            [max(m, 1e-12) for _, m in front],
            color="#cf222e",
            lw=1,
            zorder=2,
            label="Pareto front",
        )


def write_pareto(p: DiagnoseDocument, directory: Path, inputs=None) -> Path:
    """``inputs`` (``outputs.Inputs``): files the picture may not replace."""
    from .pictures import write_pngs

    return write_pngs([pareto_picture(p)], Path(directory), inputs)[0]


def write_pictures(
    p: DiagnoseDocument, plots: Path | None, html: Path | None, out: Path, given: tuple = ()
) -> DiagnoseDocument:
    """``--plots`` and ``--html``: the Pareto picture and (``--locate``) the localisations' into ``plots`` (or
    ``out``), the page at ``html``; the document with each path written (``plots``, ``html``).
    ``given``: the command's input paths, whose files no picture may replace."""
    from ..outputs import input_files

    if plots is None and html is None:
        return p
    inputs = input_files(*given)
    png = write_pareto(p, plots or out, inputs)
    written = {"pareto": str(png)}
    if p.locate:
        from .locate_pictures import write_locate

        for path in write_locate(p.locate, plots or out, inputs):
            written[path.stem.removeprefix("diagnose_")] = str(path)
    p = replace(p, plots=written)
    if html is not None:
        write_html(p, html, png)
        p = replace(p, html=str(html))
    return p


def write_html(p: DiagnoseDocument, path: Path, png: Path | None = None) -> Path:
    """A self-contained page: the reading, the decomposition, the variants, determinism, the picture."""
    from .diagnose_table import _checks
    from .page import _e, _figures, _page, _table
    from .pictures import write_html as write

    body = (
        f"<p class='note'>{_e(p.reading)}</p><h2>Decomposition</h2><p>{_e(p.reference.note)}</p>"
        + _table(["gap", "|log p - log q| mean", "tv_token mean", "k3 mean"], _gap_rows(p), {1, 2, 3})
        + "<h2>Variants</h2>"
        + _table(
            ["variant", "side", "change", "interval", "significant", "throughput x", "timing rounds: 95% interval"],
            _variant_rows(p.variants),
            {2, 5, 6},
        )
        + "<h2>Determinism</h2>"
        + _table(
            ["check", "tokens identical", "logprobs bit-identical", "largest |diff|"],
            _determinism_rows(_checks(p.determinism)),
            {1, 2, 3},
        )
        + _figures([pareto_picture(p)])
    )
    if p.locate:
        from .locate_pictures import html_section

        body += html_section(p.locate)
    write(Path(path), _page("mismatchscope diagnose", str(p.checkpoint), body))
    return Path(path)


def _gap_rows(p: DiagnoseDocument) -> list[list[str]]:
    from ..diagnose.document import Gap, SelfConsistency
    from .page import _e, _num

    rows = []
    for k in ("total", "sampler_vs_reference", "trainer_vs_reference", "sampler_decode_vs_prefill"):
        g = getattr(p.decomposition, k)
        gap = g.gap if isinstance(g, SelfConsistency) else g
        cells = (
            [_num(getattr(gap.metrics, m.name)) for m in (ABS_LOGPROB_DIFF_MEAN, TV_TOKEN_MEAN, K3_MEAN)]
            if isinstance(gap, Gap)
            else ["skipped"] * 3
        )
        rows.append([_e(k), *cells])
    return rows


def _variant_rows(variants: list[VariantEntry]) -> list[list[str]]:
    from .page import _e, _num

    rows = []
    for v in variants:
        if not isinstance(v, VariantOk):
            rows.append([_e(v.name), _e(v.side), _e(v.status), _e(v.reason), "", "", ""])
            continue
        d = v.delta[PRIMARY]
        rows.append(
            [
                _e(v.name),
                _e(v.side),
                _num(d.estimate),
                f"[{_num(d.ci_low)}, {_num(d.ci_high)}]",
                "yes" if d.significant else "no",
                _num(v.throughput.relative_to_baseline),
                _rounds_cell(v.throughput.timing),
            ]
        )
    return rows


def _determinism_rows(checks) -> list[list[str]]:
    from .page import _e, _num

    return [
        [_e(k), _num(d.share_tokens_identical), _num(d.share_logprobs_bit_identical), _num(d.max_abs_diff)]
        for k, d in checks
    ]


def _rounds_cell(timing: Timing | None) -> str:
    """The interleaved timing rounds behind a throughput ratio: how many, and the median's interval."""
    from .page import _num

    if not timing:
        return "-"
    mark = "" if timing.rankable else " (too wide to rank)"
    return f"{timing.rounds}: {_num(timing.low)} to {_num(timing.high)}{mark}"
