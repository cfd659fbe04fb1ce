"""``provenance``'s comparison for people: a table, changed fields first.

The table lists what is known on at least one side; the fields neither
side recorded are named under it in one line, and each run's contract and
fallbacks come after.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..execution.compare import shown

if TYPE_CHECKING:
    from ..execution.document import ProvenanceDocument, Row

_MARK = {"changed": "changed", "one side": "one side", "same": "", "not recorded": ""}


def cell(value) -> str:
    """A value whole (a table cell wraps at spaces, never inside a word); a digest as its first 12 hex digits."""
    return shown(value)


def name(row: Row, doc: ProvenanceDocument) -> str:
    if doc.compared == "runs":
        side = row.field.partition(".")[0]
        return f"{side} {row.label}"
    return row.label


def heads(doc: ProvenanceDocument) -> tuple[str, str]:
    return (doc.left, doc.right) if doc.compared == "sides" else ("baseline", "candidate")


def render(console, doc: ProvenanceDocument) -> None:
    """``provenance``'s table: the known fields, changed first; the fields neither side recorded; each run's
    contract and fallbacks."""
    from rich.markup import escape
    from rich.table import Table

    from .layout import print_table

    left, right = heads(doc)
    if doc.compared == "runs":
        console.print(escape(f"baseline {doc.left} vs candidate {doc.right}"), highlight=False)
    else:
        console.print(escape(f"{doc.runs[0].run}: the sampler's side against the trainer's"), highlight=False)
    shown_rows = [r for r in doc.rows if r.status != "not recorded"]
    t = Table(title=f"Provenance ({doc.changed} field(s) changed)", title_justify="left")
    for col in ("field", left, right, ""):
        t.add_column(col)
    for r in shown_rows:
        style = "bold" if r.status == "changed" else ""
        mark = f"[{style}]{_MARK[r.status]}[/{style}]" if style else _MARK[r.status]
        t.add_row(escape(name(r, doc)), escape(cell(r.left)), escape(cell(r.right)), mark)
    print_table(console, t)
    missing = [name(r, doc) for r in doc.rows if r.status == "not recorded"]
    if missing:
        console.print(escape("not recorded on either side: " + ", ".join(missing)), highlight=False)
    for s in doc.runs:
        _run_lines(console, s, doc.compared == "runs")


def _run_lines(console, s, named: bool) -> None:
    from rich.markup import escape

    where = f"{s.run}: " if named else ""
    if s.note:
        console.print(escape(f"{where}{s.note}"), highlight=False)
    mark = "[bold red]contract:[/bold red] " if s.contract is False else "contract: "
    console.print(mark + escape(f"{where}{s.contract_sentence}"), highlight=False)
    for f in s.fallbacks:
        console.print("[yellow]fallback:[/yellow] " + escape(f"{where}{f.side}: {f.detail}"), highlight=False)
