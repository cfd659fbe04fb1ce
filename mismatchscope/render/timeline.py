"""``timeline`` for people: one table of metrics per group, the flagged changes, the methods; and, for two
or more runs, the runs side by side. The pictures are :mod:`.plots.timeline`'s."""

from __future__ import annotations

from pathlib import Path

from ..timeline.compare import Comparison


def timeline_tables(console, result) -> None:
    """The whole terminal output of one run's timeline, section by section."""
    s = result.series
    console.print(
        f"{s.tokens:,} tokens | {len(set(s.step_K.tolist())):,} steps"
        + (f" | by {s.by}: {len(s.groups)} group(s)" if s.by else ""),
        highlight=False,
    )
    marks = _step_marks(result)
    for g, group in enumerate(s.groups):
        _series_table(console, s, g, group, marks)
    _flags_table(console, result)
    _skipped_notes(console, result)
    _methods_note(console, result)


def _series_table(console, s, g: int, group, marks: dict[tuple[str, int], str]) -> None:
    """One group's metrics per step, with the step's flags."""
    from rich.table import Table

    from .layout import print_table
    from .tables import num, pct

    title = "Mismatch per step" + (f", {s.by} = {group}" if s.by else "")
    t = Table(title=title, title_justify="left")
    for col in ["step", "tokens", *[m.label for m in s.metrics], "flags"]:
        t.add_column(col, justify="left" if col == "flags" else "right")
    for i in s.rows_of(g):
        cells = [str(int(s.step_K[i])), num(int(s.tokens_K[i]))]
        for m in s.metrics:
            v = float(s.values[m.name][i])
            cells.append(pct(v) if m.unit.startswith("fraction") else num(v))
        cells.append(marks.get((repr(group), int(s.step_K[i])), ""))
        t.add_row(*cells)
    print_table(console, t)


def _flags_table(console, result) -> None:
    """Every spike, shift and drift in one table, or the line saying there is none."""
    from rich.table import Table

    from .layout import print_table

    s = result.series
    if not result.flags:
        console.print("No spike, shift or drift flagged.")
        return
    shorts = {m.name: m.label for m in s.metrics}
    c = Table(title="Flagged changes", title_justify="left")
    for col in ("group", "metric", "kind", "step(s)", "value / level", "score"):
        c.add_column(col, justify="right" if col in ("step(s)", "score") else "left")
    for f in result.flags:
        c.add_row(str(f["group"]) if s.by else "all", shorts[f["metric"]], f["kind"], *_flag_cells(f))
    print_table(console, c)


def _flag_cells(f: dict) -> tuple[str, str, str]:
    """(where, what, score) of one flag."""
    from .tables import num

    if f["kind"] in ("spike", "dip"):
        return str(f["step"]), f"{num(f['value'])} (neighbours {num(f['baseline'])})", f"z {f['score']:.1f}"
    if f["kind"] == "shift":
        return str(f["step"]), f"{num(f['before'])} -> {num(f['after'])}", f"{f['size_sd']:+.1f} sd"
    return f"{f['from_step']}..{f['to_step']}", f"{num(f['before'])} -> {num(f['after'])}", f"{f['shifts']} shifts"


def _skipped_notes(console, result) -> None:
    s = result.series
    shorts = {m.name: m.label for m in s.metrics}
    for sk in result.skipped:
        which = "not tested" if sk["test"] == "all" else f"no {sk['test']} test"
        where = f" ({s.by} = {sk['group']})" if s.by else ""
        metrics = ", ".join(shorts[k] for k in sk["metrics"])
        console.print(f"[dim]{which}{where}: {metrics}: {sk['reason']}[/dim]", highlight=False)


def _methods_note(console, result) -> None:
    from ..timeline.changes import methods

    m = methods(result.config)
    console.print(
        f"[dim]Spikes (above the neighbours) and dips (below): {m['spike']['method']}, |M| > "
        f"{m['spike']['threshold']:g} ({m['spike']['reference']}), and {m['spike']['min_size_se']:g} standard errors of "
        f"the step's own value or more. Shifts: {m['shift']['method']}, penalty {m['shift']['penalty']}, "
        f"min segment {m['shift']['min_size']} steps. Drifts: {m['drift']['method']}. Means and p99 are tested "
        "on log scale, shares and rates on arcsin-sqrt scale.[/dim]",
        highlight=False,
    )


def _step_marks(result) -> dict[tuple[str, int], str]:
    """(group, step) -> "spike: tv mean, k3 mean; shift: ..." for the table's flags column."""
    shorts = {m.name: m.label for m in result.series.metrics}
    acc: dict[tuple[str, int], dict[str, list[str]]] = {}
    for f in result.flags:
        if f["kind"] == "drift":
            continue
        kind = f["kind"] if f["kind"] in ("spike", "dip") else ("shift up" if f["size_sd"] > 0 else "shift down")
        acc.setdefault((repr(f["group"]), f["step"]), {}).setdefault(kind, []).append(shorts[f["metric"]])
    return {k: "; ".join(f"{kind}: {', '.join(ms)}" for kind, ms in v.items()) for k, v in acc.items()}


# ------------------------------------------------------------ two or more runs


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
