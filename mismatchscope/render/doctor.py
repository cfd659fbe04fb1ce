"""``doctor``'s findings for people (a table that reads whole at 80 columns) and for machines (JSON)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..doctor.document import DoctorDocument, Finding

_STYLE = {"detected": "bold red", "not_checked": "yellow", "clear": "green"}
_LABEL = {"detected": "FOUND", "not_checked": "not checked", "clear": "clear"}


def doctor_payload(doc: DoctorDocument) -> dict:
    from ..documents import document

    return document(doc)


def _value(v: float | str | None) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    return "n/a" if v is None else str(v)


def finding_text(f: Finding, detail: bool) -> str:
    """A finding's cell: its sentence, and for a detected cause its estimate, evidence and what to change."""
    lines = [f.sentence]
    if f.turn is not None and f.status == "detected" and "turn" not in f.sentence:
        lines.append(f"starts in turn {f.turn}")
    if detail and f.status == "detected":
        if f.estimate:
            lines.append("estimate: " + "; ".join(f"{k}: {_value(v)}" for k, v in f.estimate.items()))
        for e in f.evidence:
            lines.append(f"- {e.statistic}: {_value(e.value)} (clean: {e.clean})")
        lines.append(f"confidence: {f.confidence}")
        if f.change:
            lines.append(f"change: {f.change}")
    return "\n".join(lines)


def top_line(doc: DoctorDocument) -> str:
    """The one line ``report`` prints: the top finding."""
    from ..metrics import K3_MEAN

    line = f"doctor: {doc.top.cause}: {doc.top.sentence}"
    if doc.top.cause == "numerics":  # is the number normal? the k3 mean among comparable published figures
        # "no pipeline cause seen" is only as strong as the checks that ran: say how many could not
        checks = [f for f in doc.findings if f.cause != "numerics"]
        skipped = sum(f.status == "not_checked" for f in checks)
        line += f" ({skipped} of {len(checks)} checks not run)" if skipped else ""
        line += "".join(f"; {p.sentence}" for p in doc.placements if p.metric == K3_MEAN.name)
    return line


def doctor_tables(console, doc: DoctorDocument, path: str) -> None:
    from rich.markup import escape
    from rich.table import Table

    examined = f", {doc.tokens_examined:,} examined" if doc.sampled else ""
    console.print(escape(f"{path}: {doc.tokens:,} tokens, {doc.sequences:,} sequences{examined}"), highlight=False)
    verdict = "pipeline problem likely (exit 1)" if doc.verdict == "pipeline" else "numerics (exit 0)"
    console.print(f"[bold]verdict:[/bold] {escape(verdict)}", highlight=False)
    t = Table(title="Findings (most likely first)", title_justify="left", show_lines=True, expand=False)
    t.add_column("status", no_wrap=True)
    t.add_column("cause", no_wrap=True)
    t.add_column("finding", overflow="fold", ratio=1)
    for f in doc.findings:
        style = _STYLE[f.status] if f.cause != "numerics" or f.status != "detected" else "bold green"
        t.add_row(f"[{style}]{_LABEL[f.status]}[/{style}]", escape(f.cause), escape(finding_text(f, True)))
    console.print(t)
    if doc.placements:
        console.print("[bold]Is the number normal?[/bold]", highlight=False)
        for p in doc.placements:
            console.print(escape(f"- {p.sentence}"), highlight=False, overflow="fold")
