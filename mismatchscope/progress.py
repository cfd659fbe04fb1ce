"""How long work tells its caller how far it got: one protocol for every layer.

The library never draws a bar: it reports stages, amounts and notes to a
:class:`Progress` its caller passes in (the command line's bars on stderr, a
test's recorder, or the class itself, silent, when nobody watches). The callbacks below
are that protocol's methods as plain functions, for the code that only ever
does one of them: a sampler advancing, a gate saying what it does, an importer
finishing a file.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

Advance = Callable[[int], None]
"""``advance(n)``: n more units of the current stage are done (a sampler's completions, a trainer's requests)."""

Note = Callable[[str], None]
"""``note(message)``: one line saying what happens now (an engine starting, the candidate being read)."""

FileProgress = Callable[[int, int, Path], None]
"""``progress(files_done, files_total, path)``, called after each source file."""


class Progress:
    """A stage-by-stage account of long work, and its silent default.

    The command line's progress bars subclass it; the library calls an
    instance of this class itself when nobody watches, so no caller needs a
    ``None`` check.
    """

    def stage(self, name: str, total: int) -> None:
        """A stage of ``total`` units starts (again, when the name was seen before)."""

    def advance(self, name: str, amount: int) -> None:
        """``amount`` more units of the stage ``name`` are done."""

    def note(self, message: str) -> None:
        """One line of what happens now."""
