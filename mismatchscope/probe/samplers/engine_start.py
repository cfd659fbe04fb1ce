"""What vLLM refused when its engine did not start, in one line.

vLLM starts its engine core (and inspects model classes) in child
processes. When one fails, the parent raises only "Engine core
initialization failed. See root cause above" or "Model architectures [...]
failed to be inspected"; the cause (an unsupported dtype, a head size the
kernels lack, a package the model class imports) is in the children's log
lines on stderr. :class:`StderrTail` passes stderr through unchanged while
the engine starts and keeps its last lines, so :func:`root_cause` can name
the cause in the probe's one-line error.
"""

from __future__ import annotations

import collections
import contextlib
import os
import re
import sys
import threading

TAIL_LINES = 400
_EXCEPTION = re.compile(r"((?:[A-Za-z_][\w]*\.)*[A-Za-z_]\w*(?:Error|Exception|Exit|Interrupt)): (.+)$")
_WRAPPERS = (
    "Engine core initialization failed",
    "See root cause above",
    "failed to be inspected",
    "Please check the logs",
)


class StderrTail:
    """Forward fd 2 through a pipe while inside the block, keeping its last :data:`TAIL_LINES` lines.

    Child processes started inside the block inherit the pipe; a thread keeps
    forwarding what they write after the block ends.
    """

    def __init__(self, keep: int = TAIL_LINES):
        self._lines: collections.deque[str] = collections.deque(maxlen=keep)
        self._saved: int | None = None
        self._thread: threading.Thread | None = None
        self._forward = True

    def __enter__(self) -> StderrTail:
        try:
            sys.stderr.flush()
            self._saved = os.dup(2)
            read, write = os.pipe()
            os.dup2(write, 2)
            os.close(write)
        except OSError:  # no usable fd 2: start without a tail
            self._saved = None
            return self
        self._thread = threading.Thread(target=self._pump, args=(read, self._saved), daemon=True)
        self._thread.start()
        return self

    def _pump(self, read: int, out: int) -> None:
        pending = b""
        with os.fdopen(read, "rb", buffering=0) as pipe:
            while chunk := pipe.read(65536):
                if self._forward:
                    with contextlib.suppress(OSError):
                        os.write(out, chunk)
                pending += chunk
                *done, pending = pending.split(b"\n")
                self._lines.extend(line.decode("utf-8", "replace") for line in done)
        if pending:
            self._lines.append(pending.decode("utf-8", "replace"))

    def __exit__(self, *exc) -> None:
        if self._saved is None:
            return
        if exc[1] is not None:
            _release(exc[1])  # a half-started engine's progress bars print as they are freed: into the pipe
        with contextlib.suppress(Exception):
            sys.stderr.flush()
        os.dup2(self._saved, 2)  # this process writes to the terminal again; children keep the pipe
        if exc[0] is not None and self._thread is not None:
            self._thread.join(timeout=5.0)  # read what the failed children wrote last
            self._forward = False  # what a child still prints while it is torn down would follow the error line

    def lines(self) -> list[str]:
        return list(self._lines)


def _release(exc: BaseException) -> None:
    """Clear the locals of every frame behind ``exc`` (and its chain) and collect them now."""
    import gc
    import traceback

    seen: BaseException | None = exc
    for _ in range(20):
        if seen is None:
            break
        if seen.__traceback__ is not None:
            traceback.clear_frames(seen.__traceback__)
        seen = seen.__cause__ or seen.__context__
    gc.collect()


def root_cause(exc: BaseException, lines: list[str]) -> str | None:
    """The deepest ``SomeError: message`` behind ``exc``: its own chain first, then the captured log lines.

    Lines that only point elsewhere ("See root cause above") are skipped.
    """
    chain = []
    seen = exc
    while seen is not None and len(chain) < 20:
        chain.append(seen)
        seen = seen.__cause__ or seen.__context__
    for inner in reversed(chain[1:]):
        text = f"{type(inner).__name__}: {inner}".strip()
        if not any(w in text for w in _WRAPPERS):
            return _one_line(text)
    for line in reversed(lines):
        match = _EXCEPTION.search(line.strip())
        if match and not any(w in line for w in _WRAPPERS):
            return _one_line(f"{match.group(1).rsplit('.', 1)[-1]}: {match.group(2)}")
    return None


def _one_line(text: str, limit: int = 300) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."
