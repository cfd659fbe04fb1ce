"""The terminal's stderr, the one stream the tool's own messages write to.

While engines run, descriptor 2 points at their log (``probe.engine_log``):
vLLM's worker processes write there whatever Python's logging says.  The
tool's progress, notes and warnings must still reach the person at the
terminal, so they write to :data:`terminal`, which follows a copy of the
terminal's descriptor 2 while the engines' output is captured and
``sys.stderr`` otherwise.  It sits in the vocabulary layer because both the
engines' capture and the command line's consoles need it.
"""

from __future__ import annotations

import contextlib
import re
import sys
from typing import TextIO


class Terminal:
    """The terminal's stderr, also while descriptor 2 is the engines' log: the tool's own messages write here."""

    def __init__(self) -> None:
        self._captured: TextIO | None = None  # a text stream on a copy of the terminal's descriptor 2

    @property
    def captured(self) -> bool:
        """Whether descriptor 2 is the engines' log right now."""
        return self._captured is not None

    def capture(self, stream: TextIO) -> None:
        """Write to ``stream`` (a copy of the terminal's descriptor 2) until :meth:`release`."""
        self._captured = stream

    def release(self) -> TextIO | None:
        """Back on ``sys.stderr``; the stream written to until now, for its owner to close."""
        stream, self._captured = self._captured, None
        return stream

    def _stream(self) -> TextIO:
        return self._captured if self._captured is not None else sys.stderr

    def write(self, text: str) -> int:
        try:
            return self._stream().write(text)
        except (OSError, ValueError):  # a closed or full terminal never fails a command
            return len(text)

    def flush(self) -> None:
        with contextlib.suppress(OSError, ValueError):
            self._stream().flush()

    def isatty(self) -> bool:
        try:
            return bool(self._stream().isatty())
        except (OSError, ValueError, AttributeError):
            return False

    def fileno(self) -> int:
        return self._stream().fileno()

    @property
    def encoding(self) -> str:
        return getattr(self._stream(), "encoding", None) or "utf-8"


terminal = Terminal()
"""Where the tool's progress, notes and warnings go: the terminal, whatever descriptor 2 points at."""


_CONTROL = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f]")
"""C0 controls but the newline, DEL and C1 controls: a terminal obeys them (ESC starts a sequence that can clear
the screen, move the cursor or set the window's title; 0x9b is an 8-bit one)."""


def shown(text: str) -> str:
    """``text`` with every control character a terminal would obey written as its ``\\xNN`` escape text.

    Text from a file (its metadata, a path, a group value) reaches the
    terminal in tables, headers and messages; the tool's own styling never
    goes through here, so only what the file said is escaped.
    """
    return _CONTROL.sub(lambda m: f"\\x{ord(m[0]):02x}", text) if _CONTROL.search(text) else text
