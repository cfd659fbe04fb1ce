"""The consoles the output is drawn on: stdout's tables at the output's width, and the terminal's stderr.

Every text a console renders passes through :func:`~mismatchscope.terminal.shown`: a control character from a
file's metadata, a path or a column's values reaches the terminal as its escape text.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable

DEFAULT_WIDTH = 80


def output_width() -> int:
    """The width tables are laid out for: the real terminal's when stdout is one, else ``COLUMNS``, else 80.

    A pipe or a file has no width of its own; 80 is what a reader's pager or editor shows whole, and
    ``COLUMNS`` lets a wider log ask for more.
    """

    if sys.stdout.isatty():
        try:
            return os.get_terminal_size(sys.stdout.fileno()).columns or DEFAULT_WIDTH
        except (OSError, ValueError):  # a terminal that cannot say its size
            pass
    columns = os.environ.get("COLUMNS", "").strip()
    return int(columns) if columns.isdigit() and int(columns) > 0 else DEFAULT_WIDTH


def recording_console():
    """A console drawing stdout's tables into memory, and the function that returns what it drew.

    It draws as stdout would show it: at the output's width, in colour only when stdout is a terminal.
    """
    import io

    from rich.console import Console

    buffer = io.StringIO()
    terminal = True if sys.stdout.isatty() else None
    console = Console(file=buffer, soft_wrap=False, width=output_width(), force_terminal=terminal)
    text: Callable[[], str] = buffer.getvalue
    return _escaping(console), text


def _escaping(console):
    """``console`` with every text it renders passed through :func:`~mismatchscope.terminal.shown`; rich's own
    styling is not text and is left alone."""
    from rich.console import RenderHook

    class _Escape(RenderHook):
        def process_renderables(self, renderables):
            return [_Escaped(r) for r in renderables]

    console.push_render_hook(_Escape())
    return console


class _Escaped:
    """A renderable whose segments' text is escaped (:func:`~mismatchscope.terminal.shown`)."""

    def __init__(self, inner):
        self.inner = inner

    def __rich_console__(self, console, options):
        from rich.segment import Segment

        from ..terminal import shown

        for segment in console.render(self.inner, options):
            text = segment.text
            if segment.control or text == "\n" or text.isprintable():
                yield segment
            else:
                yield Segment(shown(text), segment.style, segment.control)

    def __rich_measure__(self, console, options):
        from rich.measure import Measurement

        return Measurement.get(console, options, self.inner)


def stderr_console():
    """The terminal's stderr, also while the engines' output is sent to their log (see ``mismatchscope.terminal``).

    On a terminal a long warning is wrapped between words at its width (the terminal's own wrap would cut
    words and paths); to a pipe or a file each message stays one line, whole for ``grep``.
    """
    from rich.console import Console

    from ..terminal import terminal

    return _escaping(Console(file=terminal, soft_wrap=not terminal.isatty()))  # type: ignore[arg-type]
