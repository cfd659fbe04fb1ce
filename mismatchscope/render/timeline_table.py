"""``timeline`` for people: one table of metrics per group, the flagged changes, the methods (two or more runs:
:mod:`.timeline_comparison_table`; the pictures: :mod:`.timeline_pictures`)."""

from __future__ import annotations

from ..timeline.json_document import Drift, Flag, Methods, Shift, Spike, TimelineDocument


def render(console, doc: TimelineDocument) -> None:
    """The whole terminal output of one run's timeline, section by section."""
    console.print(
        f"{doc.tokens:,} tokens | {doc.steps:,} steps"
        + (f" | by {doc.by}: {len(doc.groups)} group(s)" if doc.by else ""),
        highlight=False,
    )
    marks = _step_marks(doc)
    for group in doc.groups:
        _series_table(console, doc, group, marks)
    _flags_table(console, doc)
    _skipped_notes(console, doc)
    _methods_note(console, doc.changes.methods)


def _series_table(console, doc: TimelineDocument, group, marks: dict[tuple[str, int], str]) -> None:
    """One group's metrics per step, with the step's flags."""
    from rich.table import Table

    from ..formatting import num, pct
    from .layout import print_table

    title = "Mismatch per step" + (f", {doc.by} = {group}" if doc.by else "")
    t = Table(title=title, title_justify="left")
    for col in ["step", "tokens", *[m.short for m in doc.metrics], "flags"]:
        t.add_column(col, justify="left" if col == "flags" else "right")
    for row in doc.rows:
        if repr(row.group) != repr(group):
            continue
        cells = [str(row.step), num(row.tokens)]
        for m in doc.metrics:
            v = row.values[m.key]
            cells.append(pct(v) if m.unit.startswith("fraction") else num(v))
        cells.append(marks.get((repr(group), row.step), ""))
        t.add_row(*cells)
    print_table(console, t)


def _flags_table(console, doc: TimelineDocument) -> None:
    """Every spike, shift and drift in one table, or the line saying there is none."""
    from rich.table import Table

    from .layout import print_table

    if not doc.changes.flags:
        console.print("No spike, shift or drift flagged.")
        return
    shorts = {m.key: m.short for m in doc.metrics}
    c = Table(title="Flagged changes", title_justify="left")
    for col in ("group", "metric", "kind", "step(s)", "value / level", "score"):
        c.add_column(col, justify="right" if col in ("step(s)", "score") else "left")
    for f in doc.changes.flags:
        c.add_row(str(f.group) if doc.by else "all", shorts[f.metric], f.kind, *_flag_cells(f))
    print_table(console, c)


def _flag_cells(f: Flag) -> tuple[str, str, str]:
    """(where, what, score) of one flag."""
    from ..formatting import num

    if isinstance(f, Spike):
        return str(f.step), f"{num(f.value)} (neighbours {num(f.baseline)})", f"z {f.score:.1f}"
    if isinstance(f, Shift):
        return str(f.step), f"{num(f.before)} -> {num(f.after)}", f"{f.size_sd:+.1f} sd"
    return f"{f.from_step}..{f.to_step}", f"{num(f.before)} -> {num(f.after)}", f"{f.shifts} shifts"


def _skipped_notes(console, doc: TimelineDocument) -> None:
    shorts = {m.key: m.short for m in doc.metrics}
    for sk in doc.changes.skipped:
        which = "not tested" if sk.test == "all" else f"no {sk.test} test"
        where = f" ({doc.by} = {sk.group})" if doc.by else ""
        metrics = ", ".join(shorts[k] for k in sk.metrics)
        console.print(f"[dim]{which}{where}: {metrics}: {sk.reason}[/dim]", highlight=False)


def _methods_note(console, m: Methods) -> None:
    console.print(
        f"[dim]Spikes (above the neighbours) and dips (below): {m.spike.method}, |M| > "
        f"{m.spike.threshold:g} ({m.spike.reference}), and {m.spike.min_size_se:g} standard errors of "
        f"the step's own value or more. Shifts: {m.shift.method}, penalty {m.shift.penalty}, "
        f"min segment {m.shift.min_size} steps. Drifts: {m.drift.method}. Means and p99 are tested "
        "on log scale, shares and rates on arcsin-sqrt scale.[/dim]",
        highlight=False,
    )


def _step_marks(doc: TimelineDocument) -> dict[tuple[str, int], str]:
    """(group, step) -> "spike: tv mean, k3 mean; shift: ..." for the table's flags column."""
    shorts = {m.key: m.short for m in doc.metrics}
    acc: dict[tuple[str, int], dict[str, list[str]]] = {}
    for f in doc.changes.flags:
        if isinstance(f, Drift):
            continue
        kind = f.kind if isinstance(f, Spike) else ("shift up" if f.size_sd > 0 else "shift down")
        acc.setdefault((repr(f.group), f.step), {}).setdefault(kind, []).append(shorts[f.metric])
    return {k: "; ".join(f"{kind}: {', '.join(ms)}" for kind, ms in v.items()) for k, v in acc.items()}
