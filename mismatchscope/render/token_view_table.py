"""``view``'s terminal output: the sequences its page shows, and what the rules did to their tokens."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.markup import escape
from rich.table import Table

from ..formatting import fmt
from .layout import print_table

if TYPE_CHECKING:
    from ..view.document import TokenView


def render(console, view: TokenView) -> None:
    """One row per shown sequence: its rank, id, prompt, tokens shown of its tokens, the value it was ranked by,
    the tokens the token rules mark and the sequence rules that act on it; the page's path under the table."""
    names = {r.key: r.name for r in view.rules}
    table = Table(title=f"Token view: {len(view.sequences)} sequences, ranked by {escape(view.ranking)}")
    for name in ("rank", "sequence", "prompt", "tokens shown", "ranked by", "marked tokens", "sequence rules"):
        table.add_column(name, justify="right" if name not in ("sequence rules",) else "left")
    for s in view.sequences:
        marked = len({i for at in s.acted.values() for i in at})
        seq_rules = [names[k] for k, d in s.sequence_rules.items() if d.action != "keep"]
        table.add_row(
            str(s.rank),
            str(s.sequence_id),
            "-" if s.prompt_id is None else str(s.prompt_id),
            f"{len(s.position):,} of {s.tokens:,}",
            "-" if s.value is None else fmt(s.value),
            f"{marked:,}",
            escape(", ".join(seq_rules)) or "-",
        )
    print_table(console, table)
    console.print(escape(f"{view.text.note}; page: {view.page}"), highlight=False, overflow="fold")
