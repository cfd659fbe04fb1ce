"""``compare-masks --readings`` for people: one rule under each reading, and where each differs from the first."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..analysis.side_by_side import ReadingRow, Readings


def render(console, p: Readings) -> None:
    from rich.table import Table

    from ..analysis.side_by_side import CATEGORIES
    from .layout import print_table
    from .run_header import parameters

    console.print(f"{p.tokens:,} tokens | {p.sequences:,} sequences", highlight=False)
    verb = "rejected" if p.action == "reject" else "reweighted"
    t = Table(
        title=f"{p.rule} under each reading ({p.level} level); differences against {p.first}",
        title_justify="left",
    )
    for col in (
        "reading",
        "advantage",
        f"tokens {verb}",
        "rate",
        f"only {p.first}",
        "only this",
        *CATEGORIES,
    ):
        t.add_column(col, justify="left" if col in ("reading", "advantage") else "right")
    for r in p.readings:
        t.add_row(*_reading_cells(r))
    print_table(console, t)
    parameters(console, {r.reading: r.params for r in p.readings})
    console.print(
        "Categories: each differing token in the first that holds. A = 0: its advantage is exactly 0; "
        "p or q = 1: a logprob of exactly 0 on either side; at threshold: its quantity equals a threshold "
        "of either reading; other: the rest (thresholds, k3's orientation). Sequence rules part whole "
        "sequences (A = 0 or other).",
        highlight=False,
    )


def _reading_cells(r: ReadingRow) -> list[str]:
    """One reading under one hypothesis: its counts, and how it parts from the first reading."""
    from ..analysis.side_by_side import CATEGORIES
    from ..formatting import num, pct

    d = r.differs_from_first
    cells = [num(d[c]) for c in CATEGORIES] if d else ["-"] * len(CATEGORIES)
    hyp = "file" if r.hypothesis == "data" else r.hypothesis
    return [
        r.reading,
        hyp,
        num(r.tokens_acted),
        pct(r.token_rate),
        num(r.first_only if d is not None else None),  # as the JSON holds them: only beside the differences
        num(r.this_only if d is not None else None),
        *cells,
    ]
