"""Progress on stderr for the commands that start engines (probe, rescore, diagnose), and the engines' log settings."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from ..progress import Progress
from ._streams import stderr_console

if TYPE_CHECKING:
    from rich.progress import TaskID


class Bars(Progress):
    """Rich progress bars on stderr for the probe's stages (the library's :class:`~mismatchscope.progress.Progress`).

    Started on the first stage or note, so an error found by the checks that
    run first stays the only line on stderr.
    """

    def __init__(self, enabled: bool):
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            TextColumn,
            TimeElapsedColumn,
        )
        from rich.progress import Progress as RichProgress

        self._p = RichProgress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=stderr_console(),
            disable=not enabled,
            transient=False,
            redirect_stderr=False,
        )  # what the engines write to stderr goes to their log
        self._tasks: dict[str, TaskID] = {}
        self._started = False

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if self._started:
            self._p.__exit__(*exc)

    def _start(self) -> None:
        if not self._started:
            self._p.__enter__()
            self._started = True

    def stage(self, name: str, total: int) -> None:
        self._start()
        label = {"sampling": "sampling (completions)", "scoring": "scoring (tokens)"}.get(name, name)
        if name in self._tasks:
            self._p.reset(self._tasks[name], total=total, description=label)
        else:
            self._tasks[name] = self._p.add_task(label, total=total)

    def advance(self, name: str, amount: int) -> None:
        if name in self._tasks:
            self._p.advance(self._tasks[name], amount)

    def note(self, message: str) -> None:
        self._start()
        self._p.console.print(message, highlight=False)


def engine_env() -> None:
    """Keep stdout for data: vLLM logs to stdout at INFO by default, in its worker
    processes too (they inherit the environment). A user's own settings win.
    vLLM's CPU backend also needs a KV-cache size: 1 GiB suits a probe."""
    os.environ.setdefault("VLLM_LOGGING_STREAM", "ext://sys.stderr")
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
