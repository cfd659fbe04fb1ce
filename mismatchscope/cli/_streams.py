"""stdout and stderr of a command line: data on stdout (the seam writes it: ``render.seam.show``), everything
else (progress, warnings, hints) on stderr, so ``--format json | jq`` always works; a stdout whose reader left."""

from __future__ import annotations

import os
import sys

from ..render.consoles import stderr_console


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


def warn(message: str) -> None:
    from rich.markup import escape

    from ..redact import redact

    stderr_console().print(f"[yellow]warning:[/yellow] {escape(redact(message))}", highlight=False)


def info(message: str) -> None:
    from rich.markup import escape

    from ..redact import redact

    stderr_console().print(escape(redact(message)), highlight=False)
