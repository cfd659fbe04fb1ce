"""Tables that read whole at any width: no number, name or path ever cut.

rich fits a table that is too wide by shrinking its columns, and a cell
narrower than one of its words loses the rest of the word to an ellipsis:
``8.442e-…``, ``dppo-tv`` and ``dppo-kl`` both ``dpp…``. Here every column is
given at least the width of its longest word (a run of characters without a
space: a number, a name, a path), so a cell may wrap at its spaces but never
inside a word. Where even those widths do not fit the console, the columns
move into further tables that repeat the first (the row's name), rather than
cutting anything. The title is printed above the table at the console's
width, so a narrow table does not squeeze it into a column of words.
"""

from __future__ import annotations

from rich.table import Table
from rich.text import Text

MIN_PROSE = 16
"""a column of prose (spaces in its cells) is not narrowed below this when there is room"""


def print_table(console, table: Table, keep: int = 1, together: tuple[tuple[str, ...], ...] = ()) -> None:
    """Print ``table`` within ``console.width``, splitting its columns into parts if it must.

    ``keep``: how many leading columns (the row's name) every part repeats.
    ``together``: groups of adjacent columns (by header) that read as one and are never split across parts
    (``p>q`` and ``p<q``: the two signs of one split).
    """
    width = console.width
    words, cells, lines = _measure(table)
    if table.title:
        console.print(table.title, style="table.title", highlight=False)
    parts = _parts(table, words, lines, width, keep, _units(table, keep, together))
    for n, part in enumerate(parts):
        if n:
            console.print("[dim](continued)[/dim]", highlight=False)
        budget = width - _overhead(table, len(part))
        widths = _widths([words[i] for i in part], [cells[i] for i in part], [lines[i] for i in part], budget)
        console.print(_subtable(table, part, widths))


def _plain(cell) -> str:
    if isinstance(cell, Text):
        return cell.plain
    if isinstance(cell, str):
        return Text.from_markup(cell).plain
    return str(cell)


def _measure(table: Table) -> tuple[list[int], list[int], list[int]]:
    """Per column: its longest word, its longest cell line, and its longest line with the header."""
    from rich.cells import cell_len

    words, cells, lines = [], [], []
    for col in table.columns:
        head = _plain(col.header) if table.show_header else ""
        texts = [_plain(c) for c in col._cells]
        words.append(max((cell_len(w) for t in [head, *texts] for w in t.split()), default=1))
        cells.append(max((cell_len(line) for t in texts for line in t.splitlines()), default=1))
        lines.append(max([cells[-1], *(cell_len(line) for line in head.splitlines())]))
    return words, cells, lines


def _overhead(table: Table, n: int) -> int:
    """Characters a table of ``n`` columns spends on borders and padding."""
    left, right = table.padding[3], table.padding[1]
    pad = (left + right) * n
    if not table.pad_edge:
        pad -= left + right
    if table.box is None:
        return pad
    return pad + (n + 1 if table.show_edge else max(n - 1, 0))


def _units(table: Table, keep: int, together: tuple[tuple[str, ...], ...]) -> list[list[int]]:
    """The columns after the repeated ones, in runs that go into a part whole: each a column of its own, but
    for the groups ``together`` names by header."""
    heads = [_plain(c.header) for c in table.columns]
    units: list[list[int]] = []
    i = min(keep, len(heads))
    while i < len(heads):
        group = next((g for g in together if tuple(heads[i : i + len(g)]) == tuple(g)), None)
        step = len(group) if group else 1
        units.append(list(range(i, i + step)))
        i += step
    return units


def _parts(
    table: Table, words: list[int], lines: list[int], width: int, keep: int, units: list[list[int]]
) -> list[list[int]]:
    """Column indices of each part: all in one when their longest words fit, else greedily, keys repeated and
    each unit (:func:`_units`) kept whole."""
    n = len(table.columns)
    keep = min(keep, n)
    if sum(words) + _overhead(table, n) <= width:
        return [list(range(n))]
    key = list(range(keep))
    parts, current = [], list(key)
    for unit in units:
        need = sum(max(words[i], min(lines[i], MIN_PROSE)) for i in unit)
        fits = sum(words[j] for j in current) + need + _overhead(table, len(current) + len(unit)) <= width
        if len(current) > keep and not fits:
            parts.append(current)
            current = [*key]
        current += unit
    parts.append(current)
    return parts


def _widths(words: list[int], cells: list[int], lines: list[int], budget: int) -> list[int]:
    """Each column's width: its whole longest line if all fit; else its longest word, and the room left goes
    first to keeping cells on one line (the columns that need the fewest characters first), then headers."""
    if sum(lines) <= budget:
        return list(lines)
    widths = list(words)
    room = budget - sum(widths)
    for target in (cells, lines):
        for i in sorted(range(len(widths)), key=lambda j: target[j] - widths[j]):
            extra = min(max(target[i] - widths[i], 0), max(room, 0))
            widths[i] += extra
            room -= extra
    return widths


def _subtable(table: Table, part: list[int], widths: list[int]) -> Table:
    """A copy of ``table`` with the columns ``part`` at fixed ``widths`` (no title: printed above)."""
    t = Table(
        show_header=table.show_header,
        box=table.box,
        show_edge=table.show_edge,
        pad_edge=table.pad_edge,
        padding=table.padding,
        header_style=table.header_style,
        show_lines=table.show_lines,
    )
    for i, w in zip(part, widths, strict=True):
        col = table.columns[i]
        t.add_column(col.header, justify=col.justify, style=col.style, width=max(w, 1), overflow="fold")
    for r, row in enumerate(table.rows):
        t.add_row(*(table.columns[i]._cells[r] for i in part), style=row.style, end_section=row.end_section)
    return t
