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


def stdout_console():
    from rich.console import Console

    return Console(soft_wrap=False, width=None if sys.stdout.isatty() else 160)


def stderr_console():
    """The terminal's stderr, also while the engines' output is sent to their log (see ``probe.engine_log``)."""
    from rich.console import Console

    from ..probe.engine_log import terminal

    return Console(file=terminal, soft_wrap=True)  # type: ignore[arg-type]


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
