"""``doctor``'s findings for people: a table that reads whole at 80 columns, and the one line ``report`` prints of
them (its JSON is the document's own serialisation)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..doctor.document import DoctorDocument, ExplainedShare, Finding

_STYLE = {"detected": "bold red", "not_checked": "yellow", "clear": "green"}
_LABEL = {"detected": "FOUND", "not_checked": "not checked", "clear": "clear"}
_VERDICT = {
    "pipeline": "pipeline problem likely (exit 1)",
    "expected": "expected (exit 0)",
    "inconclusive": "inconclusive (exit 0)",
    "numerics": "numerics (exit 0)",
}


def _value(v: float | str | None) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    return "n/a" if v is None else str(v)


def _pct(x: float | None) -> str:
    if x is None:
        return "n/a"
    return f"{x:.0%}" if x >= 0.1 or x == 0 else f"{x:.1%}" if x >= 0.001 else "<0.1%"


def share_text(es: ExplainedShare) -> str:
    """``explains 94% of k3, 80% of the mean |gap|``."""
    parts = []
    if es.k3 is not None:
        parts.append(f"{_pct(es.k3)} of k3")
    if es.abs_logprob_diff is not None:
        parts.append(f"{_pct(es.abs_logprob_diff)} of the mean |gap|")
    of = "" if es.of == "the gap" else f" ({es.of})"
    return f"explains {', '.join(parts) or 'n/a'}{of}"


def finding_text(f: Finding, detail: bool) -> str:
    """A finding's cell: its sentence, and for a detected cause its share, estimate, evidence and what to change."""
    lines = [f.sentence]
    if f.status == "detected" and f.explained_share is not None:
        text = share_text(f.explained_share)
        if f.cause == "numerics":  # not a correction: what the causes above leave
            text = text.replace("explains ", "holds ", 1)
        lines.append(text + (" (minor)" if f.minor else ""))
    if f.turn is not None and f.status == "detected" and "turn" not in f.sentence:
        lines.append(f"starts in turn {f.turn}")
    if detail and f.status == "detected":
        if f.estimate:
            lines.append("estimate: " + "; ".join(f"{k}: {_value(v)}" for k, v in f.estimate.items()))
        for e in f.evidence:
            lines.append(f"- {e.statistic}: {_value(e.value)} (clean: {e.clean})")
        for r in f.rivals:
            lines.append(f"- rival {r.cause}: {r.sentence}")
        if f.after:
            lines.append(f"read after correcting: {', '.join(f.after)}")
        lines.append(f"confidence: {f.confidence}")
        if f.change:
            lines.append(f"change: {f.change}")
    if f.status == "detected" and f.needs:
        lines.append(f"would settle it: {'; '.join(f.needs)}")
    return "\n".join(lines)


def top_line(doc: DoctorDocument) -> str:
    """The one line ``report`` prints: the verdict's headline, and how the number compares with published ones."""
    line = f"doctor: {doc.headline}"
    checks = [f for f in doc.findings if f.cause != "numerics"]
    skipped = sum(f.status == "not_checked" for f in checks)
    if doc.verdict in ("numerics", "inconclusive") and skipped:
        # "no pipeline cause seen" is only as strong as the checks that ran: say how many could not
        line += f" ({skipped} of {len(checks)} checks not run)"
    placed = next((p for p in doc.placements if p.comparable), None)
    if doc.verdict in ("numerics", "inconclusive") and placed is not None:
        line += f"; {placed.sentence}"
    return line


def render(console, doc: DoctorDocument) -> None:
    path = doc.path
    from rich.markup import escape
    from rich.table import Table

    examined = f", {doc.tokens_examined:,} examined" if doc.sampled else ""
    console.print(escape(f"{path}: {doc.tokens:,} tokens, {doc.sequences:,} sequences{examined}"), highlight=False)
    console.print(f"[bold]verdict:[/bold] {escape(_VERDICT[doc.verdict])}", highlight=False)
    console.print(escape(doc.headline), highlight=False, overflow="fold")
    if doc.needs:
        console.print(escape(f"would settle it: {'; '.join(doc.needs)}"), highlight=False, overflow="fold")
    t = Table(title="Findings (the most of the gap explained first)", title_justify="left", show_lines=True)
    t.add_column("status", no_wrap=True)
    t.add_column("cause", no_wrap=True)
    t.add_column("finding", overflow="fold", ratio=1)
    for f in doc.findings:
        style = _STYLE[f.status] if f.cause != "numerics" or f.status != "detected" else "bold green"
        if f.status == "detected" and (f.minor or not f.pipeline) and f.cause != "numerics":
            style = "yellow"
        label = "minor" if f.status == "detected" and f.minor else _LABEL[f.status]
        t.add_row(f"[{style}]{label}[/{style}]", escape(f.cause), escape(finding_text(f, True)))
    console.print(t)
    if doc.placements:
        console.print("[bold]Is the number normal?[/bold]", highlight=False)
        for p in doc.placements:
            console.print(escape(f"- {p.sentence}"), highlight=False, overflow="fold")
