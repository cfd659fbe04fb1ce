"""The timeline as a line chart: one panel per metric, one line per group (and, for two or more runs, their
reward and mismatch against steps or wall-clock time).

Flagged steps are marked on the lines: spikes circled, shifts as dashed
vertical lines between the last step of the old level and the first of the
new one, drifts shaded. matplotlib is imported here only (the ``plot``
extra), and through its object API, so nothing global is touched.
"""

from __future__ import annotations

import math
import textwrap
from pathlib import Path

import numpy as np

from ..errors import UsageError
from ..timeline.changes import methods
from ..timeline.compare import TimelineComparison
from ..timeline.json_document import Drift, Flag, Shift, Spike

FILENAME = "timeline.png"
_MAX_LEGEND_GROUPS = 12


def plot_timeline(result, out_dir: str | Path, inputs=None) -> Path:
    """Write ``out_dir/timeline.png`` for a ``TimelineResult``; returns its path.

    ``inputs`` (``outputs.Inputs``): the command's inputs, which the picture may not replace.
    """
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        raise UsageError("--plots needs matplotlib", hint="pip install 'mismatchscope[plot]'") from None

    s = result.series
    ncols = 2 if len(s.metrics) > 3 else 1
    nrows = math.ceil(len(s.metrics) / ncols)
    fig = Figure(figsize=(6.4 * ncols, 2.5 * nrows + 1.4), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(nrows, ncols, squeeze=False, sharex=True)
    colours = [f"C{i % 10}" for i in range(len(s.groups))]
    _panels(axes, result, colours, ncols)
    _legend(fig, s, colours)
    fig.supxlabel(textwrap.fill(_method_note(result.config), 75 * ncols + 20), fontsize=7.5, color="0.35")

    import io

    from ..outputs import write_bytes

    png = io.BytesIO()
    fig.savefig(png, format="png", dpi=120, bbox_inches="tight", pad_inches=0.15)
    return write_bytes(Path(out_dir) / FILENAME, png.getvalue(), "--plots", inputs=inputs)


def _panels(axes, result, colours: list[str], ncols: int) -> None:
    """One panel per metric, one line per group, its flags marked; the spare panels hidden."""
    from matplotlib.ticker import FuncFormatter

    s = result.series
    metrics = s.metrics
    fmt = FuncFormatter(lambda v, _: f"{v:.3g}")
    by_metric: dict[str, list[Flag]] = {}
    for f in result.flags:
        by_metric.setdefault(f.metric, []).append(f)
    for k, m in enumerate(metrics):
        ax = axes[k // ncols][k % ncols]
        for g, group in enumerate(s.groups):
            idx = s.rows_of(g)
            steps, vals = s.step_K[idx], s.values[m.name][idx]
            ax.plot(steps, vals, color=colours[g], lw=1.3, marker="." if steps.size <= 120 else None, ms=4)
            _mark(ax, [f for f in by_metric.get(m.name, []) if f.group == group], steps, vals, colours[g])
        if ax.get_ylim()[0] < 0 <= np.nanmin(s.values[m.name]):
            ax.set_ylim(bottom=0)  # every metric here is >= 0; an all-zero line sits on the axis
        ax.set_title(m.heading, fontsize=9.5, loc="left")
        ax.set_ylabel(m.unit, fontsize=8.5)
        ax.yaxis.set_major_formatter(fmt)
        ax.tick_params(labelsize=8)
        ax.grid(alpha=0.25)
    for k in range(len(metrics), len(axes) * ncols):
        axes[k // ncols][k % ncols].set_visible(False)
    for c in range(ncols):
        last = max(k for k in range(len(metrics)) if k % ncols == c)
        axes[last // ncols][c].set_xlabel("training step", fontsize=8.5)
        axes[last // ncols][c].xaxis.set_tick_params(labelbottom=True)


def _legend(fig, s, colours: list[str]) -> None:
    """The groups (with --by) and the three marks, above the panels, under the picture's title."""
    from matplotlib.lines import Line2D

    handles = (
        [
            Line2D([], [], color=colours[g], lw=1.5, label=_label(s.by, grp))
            for g, grp in enumerate(s.groups[:_MAX_LEGEND_GROUPS])
        ]
        if s.by
        else []
    )
    handles += [
        Line2D([], [], ls="none", marker="o", mfc="none", mec="red", ms=9, mew=1.5, label="spike"),
        Line2D([], [], ls="none", marker="o", mfc="none", mec="tab:blue", ms=9, mew=1.5, label="dip"),
        Line2D([], [], color="0.3", ls="--", lw=1, label="shift (change of level)"),
        Line2D([], [], color="0.3", lw=6, alpha=0.12, label="drift (consecutive shifts one way)"),
    ]
    title = "Sampler-trainer mismatch per training step" + (f", by {s.by}" if s.by else "")
    fig.legend(
        handles=handles,
        loc="outside upper center",
        ncol=min(len(handles), 6),
        fontsize=8,
        frameon=False,
        title=title,
        title_fontproperties={"size": 11, "weight": "bold"},
    )


def _mark(ax, flags: list[Flag], steps: np.ndarray, vals: np.ndarray, colour: str) -> None:
    pos = {int(st): i for i, st in enumerate(steps)}
    for f in flags:
        if isinstance(f, Spike):  # a spike or a dip
            i = pos[f.step]
            edge = "red" if f.kind == "spike" else "tab:blue"
            ax.plot([steps[i]], [vals[i]], ls="none", marker="o", mfc="none", mec=edge, ms=9, mew=1.5, zorder=3)
        elif isinstance(f, Shift):
            i = pos[f.step]
            x = (steps[i - 1] + steps[i]) / 2 if i > 0 else steps[i]
            ax.axvline(x, color=colour, ls="--", lw=1, alpha=0.8)
        elif isinstance(f, Drift):
            a, b = pos[f.from_step], pos[f.to_step]
            ax.axvspan(
                (steps[a - 1] + steps[a]) / 2 if a > 0 else steps[a],
                (steps[b - 1] + steps[b]) / 2,
                color=colour,
                alpha=0.08,
                lw=0,
            )


def _label(by: str | None, group) -> str:
    return f"{by}={'(null)' if group is None else group}"


def _method_note(config) -> str:
    m = methods(config)
    sp, sh = m.spike, m.shift
    return (
        f"Spikes and dips: Iglewicz-Hoaglin modified z-score > {sp.threshold:g} against both the {sp.neighbours} "
        f"steps before and the {sp.neighbours} after, and {sp.min_size_se:g} standard errors of the step's own "
        f"value. Shifts: {sh.method}, penalty {sh.penalty}. "
        "Tested on log scale (means, p99) or arcsin-sqrt scale (shares, rates)."
    )


# ------------------------------------------------------------ two or more runs: ``timeline RUN_A RUN_B --plots``

COMPARE_FILENAME = "timeline_compare"
"""the picture's file stem in the ``--plots`` folder."""


def compare_picture(c: TimelineComparison):
    """Reward and mismatch against the x axis, one line per run."""
    from ..outputs import require_matplotlib

    require_matplotlib()
    from .figures import _fig
    from .pictures import _picture
    from .timeline_comparison_table import time_unit

    unit, factor = time_unit(c)
    fig = _fig(8.0, 5.2)
    axes = fig.subplots(2, 1, sharex=True)
    for line in c.runs:
        # against the wall clock, a step whose stamp could not be read has no place (left out, and said)
        shown = [p for p in line.steps if c.x != "wall" or p.hours is not None]
        xs = [(p.hours or 0.0) * factor if c.x == "wall" else p.step for p in shown]
        label = Path(line.run).name + (
            "" if line.seconds_per_step is None else f" ({line.seconds_per_step:.2g} s/step)"
        )
        axes[0].plot(xs, [p.reward_mean for p in shown], marker="o", ms=3, label=label)
        axes[1].plot(xs, [p.abs_logprob_diff_mean for p in shown], marker="o", ms=3, label=label)
    axes[0].set_ylabel("mean reward")
    axes[1].set_ylabel("mean |log p - log q|")
    axes[1].set_xlabel(f"{unit} since the run started" if c.x == "wall" else "training step")
    axes[0].legend(fontsize=8)
    return _picture(
        COMPARE_FILENAME,
        f"Reward and mismatch against {'wall-clock time' if c.x == 'wall' else 'steps'}",
        c.statement,
        fig,
    )


def write_compare(c: TimelineComparison, directory: str, inputs=None) -> Path:
    from .pictures import write_pngs

    return write_pngs([compare_picture(c)], Path(directory), inputs)[0]
