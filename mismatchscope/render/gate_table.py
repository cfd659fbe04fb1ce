"""The gate's verdict for people: what was compared, the stack's changes, one row per check, the verdict."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..gate.document import GateDocument


def render(console, doc: GateDocument) -> None:
    """What was compared and what changed in its stack, one row per check, then why a check did not simply pass,
    and the verdict."""
    result = doc.source
    _compared(console, result)
    _stack(console, result)
    _checks(console, result)
    _verdict(console, result)


def _stack(console, result) -> None:
    """What changed in the stack (the runs' provenance): a table of the changes, or one line saying none did."""
    from rich.markup import escape
    from rich.table import Table

    from ..execution.compare import shown
    from .layout import print_table

    stack = result.stack
    if stack is None:
        return
    for note in stack.notes:
        console.print(escape(f"provenance: {note}"), highlight=False)
    if not stack.changes:
        console.print(escape(f"stack changes (provenance): {stack.line()}"), highlight=False)
        return
    t = Table(title="What changed in the stack (provenance)", title_justify="left")
    for col in ("side", "field", "baseline", "candidate"):
        t.add_column(col)
    for c in stack.changes:
        t.add_row(escape(c.side), escape(c.label), escape(shown(c.baseline)), escape(shown(c.candidate)))
    print_table(console, t, keep=2)


def _compared(console, result) -> None:
    from rich.markup import escape

    cand, base = result.candidate, result.baseline
    line = f"candidate {cand.path} ({cand.tokens:,} tokens, {cand.sequences:,} sequences)"
    if base:
        line += f" vs baseline {base.path} ({base.tokens:,} tokens, {base.sequences:,} sequences)"
    console.print(escape(line), highlight=False)
    comp = result.comparability
    if comp and comp.checked:
        changed = "; ".join(d.change() for d in comp.serving) or "nothing recorded"
        console.print(escape(f"serving stack change: {changed}"), highlight=False)
        allowed = [d.text() for d in comp.differences]
        if allowed:
            console.print(escape("allowed to differ: " + "; ".join(allowed)), highlight=False)


def _checks(console, result) -> None:
    from rich.markup import escape
    from rich.table import Table

    from ..formatting import fmt
    from .gate_text import limit_text, status_text
    from .layout import print_table

    cfg = result.config
    t = Table(
        title=f"Gate ({cfg.bootstrap} bootstrap resamples of sequences, seed {cfg.seed}; limits from {cfg.source})",
        title_justify="left",
    )
    for col in ("check", "result", "baseline", "candidate", "estimate", f"{cfg.confidence:.0%} interval", "limit"):
        t.add_column(col, justify="left" if col in ("check", "result", "limit") else "right")
    for ch in result.checks:
        style = "bold red" if ch.failed else ("yellow" if ch.inconclusive else "cyan" if ch.below_floor else "green")
        x = "x" if ch.kind == "regression" else ""
        t.add_row(
            escape(ch.name),
            f"[{style}]{status_text(ch)}[/{style}]",
            fmt(ch.baseline),
            fmt(ch.candidate),
            f"{x}{fmt(ch.estimate)}",
            escape(f"[{x}{fmt(ch.interval[0])}, {x}{fmt(ch.interval[1])}]") if ch.interval else "-",
            escape(limit_text(ch)),
        )
    print_table(console, t)


def _verdict(console, result) -> None:
    from rich.markup import escape

    from .gate_text import method_text

    methods = sorted({method_text(ch, result.config.confidence) for ch in result.checks})
    console.print(f"method: {'; '.join(methods)}", highlight=False)
    for ch in result.checks:
        if ch.failed or ch.inconclusive or ch.below_floor:
            console.print(escape(f"{ch.name}: {ch.explanation}"), highlight=False)
    n, failed = len(result.checks), sum(c.failed for c in result.checks)
    if failed:
        console.print(f"[bold red]FAIL[/bold red]: {failed} of {n} checks failed")
    else:
        console.print(f"[bold green]PASS[/bold green]: all {n} checks hold")
