"""The timeline for people: one table of metrics per group, the flagged changes, the methods."""

from __future__ import annotations


def timeline_tables(console, result) -> None:
    from rich.table import Table

    from ..timeline.changes import methods
    from .layout import print_table
    from .tables import num, pct

    s = result.series
    console.print(
        f"{s.tokens:,} tokens | {len(set(s.step_K.tolist())):,} steps"
        + (f" | by {s.by}: {len(s.groups)} group(s)" if s.by else ""),
        highlight=False,
    )
    marks = _step_marks(result)
    for g, group in enumerate(s.groups):
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

    shorts = {m.name: m.label for m in s.metrics}
    if result.flags:
        c = Table(title="Flagged changes", title_justify="left")
        for col in ("group", "metric", "kind", "step(s)", "value / level", "score"):
            c.add_column(col, justify="right" if col in ("step(s)", "score") else "left")
        for f in result.flags:
            if f["kind"] == "spike":
                where, what, score = (
                    str(f["step"]),
                    f"{num(f['value'])} (neighbours {num(f['baseline'])})",
                    f"z {f['score']:.1f}",
                )
            elif f["kind"] == "shift":
                where, what, score = (
                    str(f["step"]),
                    f"{num(f['before'])} -> {num(f['after'])}",
                    f"{f['size_sd']:+.1f} sd",
                )
            else:
                where, what, score = (
                    f"{f['from_step']}..{f['to_step']}",
                    f"{num(f['before'])} -> {num(f['after'])}",
                    f"{f['shifts']} shifts",
                )
            c.add_row(str(f["group"]) if s.by else "all", shorts[f["metric"]], f["kind"], where, what, score)
        print_table(console, c)
    else:
        console.print("No spike, shift or drift flagged.")
    for sk in result.skipped:
        which = "not tested" if sk["test"] == "all" else f"no {sk['test']} test"
        where = f" ({s.by} = {sk['group']})" if s.by else ""
        metrics = ", ".join(shorts[k] for k in sk["metrics"])
        console.print(f"[dim]{which}{where}: {metrics}: {sk['reason']}[/dim]", highlight=False)
    m = methods(result.config)
    console.print(
        f"[dim]Spikes: {m['spike']['method']}, |M| > {m['spike']['threshold']:g} "
        f"({m['spike']['reference']}). Shifts: {m['shift']['method']}, penalty {m['shift']['penalty']}, "
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
        kind = f["kind"] if f["kind"] == "spike" else ("shift up" if f["size_sd"] > 0 else "shift down")
        acc.setdefault((repr(f["group"]), f["step"]), {}).setdefault(kind, []).append(shorts[f["metric"]])
    return {k: "; ".join(f"{kind}: {', '.join(ms)}" for kind, ms in v.items()) for k, v in acc.items()}
