"""``timeline RUN_A RUN_B``: the runs side by side in one table (and, with ``--plots``, one picture)."""

from __future__ import annotations

from pathlib import Path

from ..timeline.compare import Comparison

FILENAME = "timeline_compare"
"""the picture's file stem in the ``--plots`` folder."""


def _num(v: float | None, fmt: str = ".3g") -> str:
    return "-" if v is None else format(v, fmt)


def time_unit(c: Comparison) -> tuple[str, float]:
    """The unit the time since each start reads naturally in, from the longest span shown, and hours' factor
    to it: a run of seconds in seconds (not 3.65e-05 hours), of minutes in minutes. The JSON keeps hours."""
    span = max((p.hours for line in c.runs for p in line.steps if p.hours is not None), default=0.0)
    if span * 3600 < 120:
        return "seconds", 3600.0
    if span * 60 < 120:
        return "minutes", 60.0
    return "hours", 1.0


def compare_table(console, c: Comparison) -> None:
    """One row per run and step: where it stands (step, time since its start), its reward and its mismatch."""
    from rich.table import Table

    unit, factor = time_unit(c)
    t = Table(title=f"Runs side by side (x: {c.x})", title_justify="left")
    for col in ("run", "step", unit, "reward", "|lp-lq| mean", "unequal"):
        t.add_column(col, justify="left" if col == "run" else "right", overflow="fold")
    for i, line in enumerate(c.runs):
        name = f"{i + 1}: {Path(line.run).name}"
        for p in line.steps:
            t.add_row(
                name,
                str(p.step),
                _num(None if p.hours is None else p.hours * factor),
                _num(p.reward_mean),
                _num(p.abs_logprob_diff_mean),
                f"{100 * p.unequal_share:.1f}%",
            )
            name = ""
    console.print(t)
    for i, line in enumerate(c.runs):
        per = (
            "-"
            if line.seconds_per_step is None
            else f"{line.seconds_per_step:.3g} s/step, median ({line.seconds_source})"
        )
        console.print(f"{i + 1}: {line.run}: {per}", highlight=False)
    console.print(c.statement, highlight=False)


def compare_picture(c: Comparison):
    """Reward and mismatch against the x axis, one line per run."""
    from ..outputs import require_matplotlib

    require_matplotlib()
    from .plots import _picture
    from .plots.figures import _fig

    unit, factor = time_unit(c)
    fig = _fig(8.0, 5.2)
    axes = fig.subplots(2, 1, sharex=True)
    for line in c.runs:
        xs = [(p.hours or 0.0) * factor if c.x == "wall" else p.step for p in line.steps]
        label = Path(line.run).name + (
            "" if line.seconds_per_step is None else f" ({line.seconds_per_step:.2g} s/step)"
        )
        axes[0].plot(xs, [p.reward_mean for p in line.steps], marker="o", ms=3, label=label)
        axes[1].plot(xs, [p.abs_logprob_diff_mean for p in line.steps], marker="o", ms=3, label=label)
    axes[0].set_ylabel("mean reward")
    axes[1].set_ylabel("mean |log p - log q|")
    axes[1].set_xlabel(f"{unit} since the run started" if c.x == "wall" else "training step")
    axes[0].legend(fontsize=8)
    return _picture(
        FILENAME, f"Reward and mismatch against {'wall-clock time' if c.x == 'wall' else 'steps'}", c.statement, fig
    )


def write_compare(c: Comparison, directory: str, inputs=None) -> Path:
    from .plots import write_pngs

    return write_pngs([compare_picture(c)], Path(directory), inputs)[0]
