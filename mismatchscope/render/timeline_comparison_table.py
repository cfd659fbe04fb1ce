"""``timeline`` of two or more runs for people: one row per run and step, each run's cost per step, the verdict."""

from __future__ import annotations

from pathlib import Path

from ..timeline.compare import TimelineComparison


def time_unit(c: TimelineComparison) -> tuple[str, float]:
    """The unit the time since each start reads naturally in, from the longest span shown, and hours' factor
    to it: a run of seconds in seconds (not 3.65e-05 hours), of minutes in minutes. The JSON keeps hours."""
    span = max((p.hours for line in c.runs for p in line.steps if p.hours is not None), default=0.0)
    if span * 3600 < 120:
        return "seconds", 3600.0
    if span * 60 < 120:
        return "minutes", 60.0
    return "hours", 1.0


def render(console, c: TimelineComparison) -> None:
    """One row per run and step: where it stands (step, time since its start), its reward and its mismatch."""
    from rich.table import Table

    from ..formatting import fmt

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
                fmt(None if p.hours is None else p.hours * factor, 3),
                fmt(p.reward_mean, 3),
                fmt(p.abs_logprob_diff_mean, 3),
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
