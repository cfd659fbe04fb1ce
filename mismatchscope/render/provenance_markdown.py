"""``provenance --markdown``: the comparison as a Markdown section (a pull-request comment)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..formatting import md_cell
from .provenance_table import cell, heads, name

if TYPE_CHECKING:
    from ..execution.document import ProvenanceDocument


def render(doc: ProvenanceDocument) -> str:
    """The comparison as a Markdown section: the runs, the table of known fields, each run's contract."""
    left, right = heads(doc)
    if doc.compared == "runs":
        title = f"### mismatchscope provenance: `{doc.left}` vs `{doc.right}` ({doc.changed} changed)"
    else:
        title = f"### mismatchscope provenance: `{doc.runs[0].run}`, sampler vs trainer ({doc.changed} changed)"
    lines = [title, "", f"| field | {left} | {right} | |", "|---|---|---|---|"]
    for r in doc.rows:
        if r.status == "not recorded":
            continue
        cells = (name(r, doc), cell(r.left), cell(r.right), f"**{r.status}**" if r.status == "changed" else "")
        lines.append("| " + " | ".join(md_cell(c) for c in cells) + " |")
    missing = [name(r, doc) for r in doc.rows if r.status == "not recorded"]
    if missing:
        lines += ["", f"Not recorded on either side: {md_cell(', '.join(missing))}"]
    lines.append("")
    for s in doc.runs:
        where = f"`{s.run}`: " if doc.compared == "runs" else ""
        if s.note:
            lines.append(f"- {where}{md_cell(s.note)}")
        lines.append(f"- {where}contract: {'❌ ' if s.contract is False else ''}{md_cell(s.contract_sentence)}")
        lines += [f"- {where}fallback ({f.side}): {md_cell(f.detail)}" for f in s.fallbacks]
    return "\n".join(lines) + "\n"
