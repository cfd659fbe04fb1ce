"""Where output goes: data on stdout (a rich table or JSON), everything else
(progress, warnings, hints) on stderr, so ``--format json | jq`` always works."""

from __future__ import annotations

import enum
import json
import sys

from ..outputs import jsonable


class OutputFormat(str, enum.Enum):
    table = "table"
    json = "json"


DEFAULT_WIDTH = 80


def output_width() -> int:
    """The width tables are laid out for: the real terminal's when stdout is one, else ``COLUMNS``, else 80.

    A pipe or a file has no width of its own; 80 is what a reader's pager or editor shows whole, and
    ``COLUMNS`` lets a wider log ask for more.
    """
    import os

    if sys.stdout.isatty():
        try:
            return os.get_terminal_size(sys.stdout.fileno()).columns or DEFAULT_WIDTH
        except (OSError, ValueError):  # a terminal that cannot say its size
            pass
    columns = os.environ.get("COLUMNS", "").strip()
    return int(columns) if columns.isdigit() and int(columns) > 0 else DEFAULT_WIDTH


def stdout_console():
    from rich.console import Console

    return Console(soft_wrap=False, width=output_width())


def stderr_console():
    """The terminal's stderr, also while the engines' output is sent to their log (see ``mismatchscope.terminal``).

    On a terminal a long warning is wrapped between words at its width (the terminal's own wrap would cut
    words and paths); to a pipe or a file each message stays one line, whole for ``grep``.
    """
    from rich.console import Console

    from ..terminal import terminal

    return Console(file=terminal, soft_wrap=not terminal.isatty())  # type: ignore[arg-type]


def warn(message: str) -> None:
    from rich.markup import escape

    from ..redact import redact

    stderr_console().print(f"[yellow]warning:[/yellow] {escape(redact(message))}", highlight=False)


def info(message: str) -> None:
    from rich.markup import escape

    from ..redact import redact

    stderr_console().print(escape(redact(message)), highlight=False)


_jsonable = jsonable  # the one JSON rule for NaN, infinities and numpy scalars (mismatchscope.outputs)


def emit_json(payload: dict) -> None:
    """Strict JSON on stdout: NaN becomes null, infinities become "inf"/"-inf"."""
    sys.stdout.write(json.dumps(_jsonable(payload), indent=2, allow_nan=False) + "\n")
    sys.stdout.flush()
