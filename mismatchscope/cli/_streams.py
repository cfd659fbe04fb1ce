"""Where output goes: data on stdout (a rich table or JSON), everything else
(progress, warnings, hints) on stderr, so ``--format json | jq`` always works."""

from __future__ import annotations

import enum
import json
import os
import sys

from ..outputs import jsonable


class OutputFormat(str, enum.Enum):
    table = "table"
    json = "json"


class ReaderMayLeave:
    """stdout, whose reader may stop reading (``| head``): from then on the output is discarded.

    A pipe closed by its reader is the reader's choice, not the command's
    failure. Whether a command meets it depended on how much it had written
    before the reader left (a whole table at once, or in steps), so the same
    ``| head`` exited 0 after one command and 2 after another. The command now
    runs to its end and exits with its own code, its verdict included, as when
    the reader takes every byte.
    """

    def __init__(self, stream):
        self._stream = stream
        self.reader_left = False

    def write(self, text: str) -> int:
        if not self.reader_left:
            try:
                self._stream.write(text)
            except BrokenPipeError:
                self._leave()
        return len(text)

    def flush(self) -> None:
        if not self.reader_left:
            try:
                self._stream.flush()
            except BrokenPipeError:
                self._leave()

    def _leave(self) -> None:
        """Discard from here on, and what the buffer still holds: its flush at exit would fail again."""
        self.reader_left = True
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, self._stream.fileno())
            os.close(devnull)
        except (OSError, ValueError, AttributeError):  # no descriptor (a test's buffer): nothing reaches it anyway
            pass

    def __getattr__(self, name):
        return getattr(self._stream, name)


def reader_left() -> bool:
    """Whether stdout's reader stopped reading (``| head``) before the output was all written."""
    return bool(getattr(sys.stdout, "reader_left", False))


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


def stdout_console():
    from rich.console import Console

    return _escaping(Console(soft_wrap=False, width=output_width()))


def _escaping(console):
    """``console`` with every text it renders passed through :func:`~mismatchscope.terminal.shown`: a control
    character from a file's metadata, a path or a column's values reaches the terminal as its escape text,
    whichever table, header or message carries it. rich's own styling is not text and is left alone."""
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
