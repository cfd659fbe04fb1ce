"""A command's ``--help`` that reads whole at any width: no option name, metavar or word is ever cut.

typer lays options out in one table of five columns (name, short name, the
negative flag, metavar, help); at 80 columns the names are squeezed until
they end in an ellipsis (``--trainer-checkp...``), and a help text's long
word with them. Here each option's names and metavar are printed whole, its
help beside them where they leave room for it, else on the lines below,
wrapped between words. Option help is plain text, as written (a bracket in
it is shown, never read as markup); the command's own text keeps the markup
typer reads in it (the rule list's escapes).
"""

from __future__ import annotations

import inspect
import os

from typer.core import TyperArgument, TyperCommand

NAME_SHARE = 0.4
"""the names' column takes at most this share of the width; longer names go on a line of their own."""
MIN_NAMES = 16
HELP_INDENT = 6


class HelpCommand(TyperCommand):
    """A command whose ``--help`` is laid out by :func:`print_help`."""

    def format_help(self, ctx, formatter) -> None:
        print_help(self, ctx)


def print_help(command, ctx) -> None:
    from rich.console import Console, Group
    from rich.padding import Padding
    from rich.panel import Panel
    from rich.text import Text

    width = os.environ.get("TERMINAL_WIDTH", "")
    console = Console(width=int(width) if width.isdigit() and int(width) > 0 else None, highlight=False)
    console.print(Padding(Text(command.get_usage(ctx)), 1))
    text = _description(command.help or "")
    if text is not None:
        console.print(Padding(text, (0, 1, 1, 1)))
    params = [p for p in command.get_params(ctx) if not getattr(p, "hidden", False)]
    for title, group in (
        ("Arguments", [p for p in params if isinstance(p, TyperArgument)]),
        ("Options", [p for p in params if not isinstance(p, TyperArgument)]),
    ):
        records = [_record(p, ctx) for p in group]
        if records:
            inner = console.width - 4  # the panel's borders and padding
            rows = _rows(records, inner)
            console.print(Panel(Group(*rows), title=title, title_align="left", border_style="dim", padding=(0, 1)))


def _record(param, ctx) -> tuple[str, str]:
    record = param.get_help_record(ctx)
    names, help_text = record if record is not None else (param.name or "", "")
    if isinstance(param, TyperArgument):
        names = param.make_metavar(ctx) if hasattr(param, "make_metavar") else names
        if param.required:
            help_text = f"{help_text}  [required]".strip()
    return names, " ".join((help_text or "").split())


def _rows(records: list[tuple[str, str]], width: int) -> list:
    """One renderable per option: names and help side by side when the names fit their column, else stacked."""
    from rich.cells import cell_len
    from rich.padding import Padding
    from rich.table import Table
    from rich.text import Text

    cap = max(MIN_NAMES, int(width * NAME_SHARE))
    fitting = [cell_len(n) for n, _ in records if cell_len(n) <= cap]
    column = max(fitting, default=0)
    out = []
    for names, help_text in records:
        if cell_len(names) <= column:
            row = Table.grid(padding=(0, 2))
            row.add_column(width=column, no_wrap=True)
            row.add_column(ratio=1)
            row.add_row(Text(names, style="bold cyan"), Text(help_text, overflow="fold"))
            out.append(row)
        else:
            out.append(Text(names, style="bold cyan", overflow="fold"))
            if help_text:
                out.append(Padding(Text(help_text, overflow="fold"), (0, 0, 0, HELP_INDENT)))
    return out


def _description(help_text: str):
    """The command's text: paragraphs re-flowed (one kept as written when it starts with ``\\b``), its markup
    read as typer reads it."""
    from rich.text import Text

    text = inspect.cleandoc(help_text).partition("\f")[0].strip()
    if not text:
        return None
    paragraphs = []
    for para in text.split("\n\n"):
        if para.startswith("\b"):
            paragraphs.append(para[1:].strip("\n"))
        else:
            paragraphs.append(" ".join(para.split()))
    return Text.from_markup("\n\n".join(paragraphs))
