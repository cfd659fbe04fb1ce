"""The engines' own output goes to a log file in the run directory, not to the screen.

vLLM, torch and transformers write dozens of lines while an engine starts
(a dtype cast per weight, a missing Triton backend, LD_PRELOAD hints). Some of
it comes from vLLM's engine-core and worker processes, which write to the
file descriptor 2 they inherited, so a Python logging setting cannot catch it:
:func:`engine_output` points descriptor 2 at a log file while the engines run
and always points it back, error or not. The tool's own progress, notes and
warnings keep reaching the terminal through :data:`mismatchscope.terminal.terminal`
(the stream ``stderr_console`` prints to).

An exception raised inside vLLM while the output is captured becomes one
:class:`EngineError` line: the root cause found in the engine's output (the
exception the engine process died of, a missing package behind "failed to be
inspected"), the log's path, and ``--sampler hf`` where transformers can
sample the checkpoint instead.

The log is first written to a temporary file, because the run directory does
not exist yet while the checks run and is taken back when the engine fails
to start; it is moved into the run directory (appended on ``--resume``) when
the run directory holds a run at the end, and otherwise kept where it is when
an error needs it.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import sys
import tempfile
import types
from collections.abc import Iterator
from pathlib import Path

from ..errors import EngineError, MismatchscopeError
from ..terminal import terminal

LOG_NAME = "engine.log"
"""The engines' output in a run directory."""

LOG_TAIL_BYTES = 1_000_000
"""How much of the end of the log is searched for the root cause of a failure."""
CAPTURED_READ_BYTES = 64_000_000
"""How much of the start of the log is searched for the engines' fallbacks."""

_PREFIX = re.compile(r"^\((?:[\w.-]+) pid=\d+\)\s*")
"""vLLM marks each line of its processes' output with the process: ``(EngineCore pid=12) ``."""
_LOG_RECORD = re.compile(r"^(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) \d\d-\d\d \d\d:\d\d:\d\d \[[^\]]*\]\s*")
"""vLLM's log record header: ``ERROR 12-04 14:59:44 [registry.py:1120] ``."""
_EXCEPTION_LINE = re.compile(r"^((?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*(?:Error|Exception))(?:: (.*\S))?\s*$")
"""The last line of a Python traceback: ``ModuleNotFoundError: No module named 'torchvision'``."""
_WRAPPERS = (
    "Engine core initialization failed",
    "Error raised in subprocess",
    "returned non-zero exit status",
    "failed to be inspected",
    "Please check the logs",
    "See root cause above",
)
"""Messages that only say that something else failed: never the root cause."""
_MISSING_PACKAGE = ("ImportError", "ModuleNotFoundError")
NO_CAUSE = "no cause found in the engine's output"


class _Capture:
    """The log :func:`engine_output` writes while it runs: a failed engine start reads its cause there."""

    log: Path | None = None


_capture = _Capture()


@contextlib.contextmanager
def engine_output(
    run_dir: Path, *, verbose: bool = False, sampler_kind: str | None = None, any_dir: bool = False
) -> Iterator[None]:
    """Send the engines' output (descriptor 2 and everything written to it) to a log; ``verbose`` leaves it on screen.

    ``run_dir``: where the log ends up if the run directory holds a run on exit
    (``any_dir``: if it is a folder at all, as diagnose's output folder is).
    ``sampler_kind``: the probe's sampler; ``vllm`` adds the ``--sampler hf``
    hint to an engine failure. An exception raised inside vLLM leaves as an
    :class:`EngineError` naming its root cause and the log.
    """
    fd, tmp_name = -1, ""
    if not verbose and not terminal.captured:  # not shown live, nor already captured by an outer call
        with contextlib.suppress(OSError):  # no writable temporary folder: the output stays on screen
            fd, tmp_name = tempfile.mkstemp(prefix="mismatchscope-engine-", suffix=".log")
    if fd < 0:
        try:
            yield
        except Exception as e:
            _raise_engine_error(e, None, sampler_kind, shown=verbose)
            raise
        return
    tmp = Path(tmp_name)
    saved = _redirect(fd, tmp)
    try:
        yield
    except BaseException as e:
        _on_failure(e, tmp, saved, run_dir, sampler_kind=sampler_kind, any_dir=any_dir)
        raise
    _restore(saved)
    log = _place(tmp, run_dir, keep=False, any_dir=any_dir)
    if log is not None:
        live = "" if any_dir else " (--verbose shows it live)"
        terminal.write(f"the engines' output: {log}{live}\n")  # one line of 80 columns for a run under runs/


def _redirect(fd: int, tmp: Path) -> int:
    """Descriptor 2 onto the log (``fd``, at ``tmp``), the tool's messages onto a copy of the terminal's; the copy."""
    _flush_all()
    saved = os.dup(2)
    os.dup2(fd, 2)
    os.close(fd)
    terminal.capture(os.fdopen(os.dup(saved), "w", buffering=1, encoding="utf-8", errors="replace"))
    _capture.log = tmp
    return saved


def _on_failure(
    e: BaseException, tmp: Path, saved: int, run_dir: Path, *, sampler_kind: str | None, any_dir: bool
) -> None:
    """Descriptor 2 back and the log placed; ``e`` raised again as one :class:`EngineError` line where it is an
    engine's failure (otherwise the caller raises ``e`` itself)."""
    if _from_vllm(e):
        _release(e)  # a half-started engine's progress bars print as they are freed: into the log
    _restore(saved)
    if isinstance(e, MismatchscopeError) and not _from_vllm(e):  # the tool's own refusal: its line says it all,
        tmp.unlink(missing_ok=True)  # and a refused command changes nothing, not even a run's log
        return
    log = _place(tmp, run_dir, keep=True, any_dir=any_dir)
    if isinstance(e, Exception):
        _raise_engine_error(e, log, sampler_kind)
    if log is not None and not isinstance(e, MismatchscopeError):
        terminal.write(f"the engines' output up to the failure: {log}\n")


def _flush_all() -> None:
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()


def _restore(saved: int) -> None:
    """Descriptor 2 back to the terminal; the tool's messages back on ``sys.stderr``."""
    _flush_all()
    _capture.log = None
    captured = terminal.release()
    with contextlib.suppress(Exception):
        captured.close()  # type: ignore[attr-defined]
    os.dup2(saved, 2)
    os.close(saved)


def _place(tmp: Path, run_dir: Path, *, keep: bool, any_dir: bool = False) -> Path | None:
    """Move the log into the run directory if it holds a run; otherwise keep it only when ``keep`` and not empty.

    A run that sampled nothing is replaced or taken back by the next start,
    which a stray log in its folder would block: its log stays outside.
    """
    from .. import rundir
    from .writer import unstarted_run

    try:
        if tmp.stat().st_size == 0:
            tmp.unlink()
            return None
        holds_run = (Path(run_dir) / rundir.MANIFEST).is_file() and not unstarted_run(Path(run_dir))
        if holds_run or (any_dir and Path(run_dir).is_dir() and not keep):
            dest = Path(run_dir) / LOG_NAME
            with open(dest, "ab") as out, open(tmp, "rb") as src:  # a resumed run's log grows
                shutil.copyfileobj(src, out)
            tmp.unlink()
            return dest
        if keep:
            return tmp
        tmp.unlink()
    except OSError:  # the log is a convenience: its loss never hides the run's own outcome
        return tmp if tmp.exists() else None
    return None


# ------------------------------------------------------------ failures


def _raise_engine_error(e: Exception, log: Path | None, sampler_kind: str | None, *, shown: bool = False) -> None:
    """Raise the one-line :class:`EngineError` for an exception raised inside vLLM; return for any other.

    ``shown``: the engine's output went to the terminal (``--verbose``), not to ``log``.
    """
    if not _from_vllm(e):
        return
    text = _tail(log) if log is not None else ""
    where = f"see the engine's output: {log}" if log is not None else "see the engine's output above" if shown else None
    if isinstance(e, MismatchscopeError) and not _is_wrapper(str(e)):  # already one clear line: add the log only
        if where is not None:
            e.hint = f"{e.hint}; {where}" if e.hint else where
        return
    cause = root_cause(text, e)
    from .samplers import capabilities_of

    caps = capabilities_of(sampler_kind or "")
    hf = "--sampler hf samples with transformers instead" if caps.package == "vllm" and not caps.remote else None
    what = "vLLM could not start the engine" if _in_start(e) else "vLLM failed"
    raise EngineError(f"{what}: {cause}", hint="; ".join(h for h in (hf, where) if h) or None) from e


def root_cause(log_text: str, exc: BaseException | None = None) -> str:
    """The one line that says why the engine failed, from its output and the exception's chain.

    A missing package wins (a model class whose module imports it: vLLM only
    says the architecture "failed to be inspected"); then the last exception
    the output shows that is not a wrapper of another; then the innermost one
    of the chain; then the exception itself.
    """
    found = [_exception_line(line) for line in log_text.splitlines()]
    lines = [f for f in found if f is not None]
    chain = [f"{type(c).__name__}: {c}".splitlines()[0] for c in _chain(exc)] if exc is not None else []
    missing = [ln for ln in lines + chain if ln.split(":", 1)[0].rsplit(".", 1)[-1] in _MISSING_PACKAGE]
    if missing:
        return missing[-1]
    for candidates in (lines, list(reversed(chain))):
        real = [ln for ln in candidates if not _is_wrapper(ln)]
        if real:
            return real[-1]
    return chain[0] if chain else NO_CAUSE


def start_cause(exc: BaseException) -> str | None:
    """Why vLLM did not start: the root cause in the output captured so far and ``exc``'s chain; None if none.

    vLLM inspects model classes and runs its engine core in child processes:
    the exception the caller gets says only that they failed ("See root cause
    above"), their output in the log (while :func:`engine_output` captures it)
    says why.
    """
    cause = root_cause(_tail(_capture.log) if _capture.log is not None else "", exc)
    return None if cause == NO_CAUSE or _is_wrapper(cause) else cause


def captured_text() -> str | None:
    """The engines' output captured so far in this process (its first :data:`CAPTURED_READ_BYTES`); None while the
    output is not captured (``--verbose``, or a library call outside :func:`engine_output`). The run's provenance
    reads the engines' fallbacks here: an engine announces them as it starts, so the head of the log holds them."""
    if _capture.log is None:
        return None
    _flush_all()
    try:
        with open(_capture.log, "rb") as f:
            return f.read(CAPTURED_READ_BYTES).decode("utf-8", errors="replace")
    except OSError:
        return None


def cause_in_log(log: Path, reason: str) -> str:
    """``reason`` (a one-line failure), or the root cause in ``log`` when ``reason`` only wraps another failure.

    For a process whose whole output is the log (a ``diagnose`` variant): vLLM's
    "failed to be inspected" names no cause; the log holds it.
    """
    if not _is_wrapper(reason):
        return reason
    found = root_cause(_tail(log))
    return reason if found == NO_CAUSE else found


def _exception_line(line: str) -> str | None:
    line = _LOG_RECORD.sub("", _PREFIX.sub("", line.strip()))
    m = _EXCEPTION_LINE.match(line)
    if m is None:
        return None
    return f"{m.group(1)}: {m.group(2)}" if m.group(2) else m.group(1)


def _is_wrapper(message: str) -> bool:
    return any(w in message for w in _WRAPPERS)


def _chain(exc: BaseException) -> list[BaseException]:
    """The exception and its causes, outermost first (each once)."""
    out: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and current not in out:
        out.append(current)
        current = current.__cause__ or current.__context__
    return out


def _frames(exc: BaseException) -> Iterator[types.FrameType]:
    for c in _chain(exc):
        tb = c.__traceback__
        while tb is not None:
            yield tb.tb_frame
            tb = tb.tb_next


def _release(exc: BaseException) -> None:
    """Clear the locals of the finished frames behind ``exc`` (and its chain) and collect them now."""
    import gc
    import traceback

    for c in _chain(exc):
        if c.__traceback__ is not None:
            traceback.clear_frames(c.__traceback__)
    gc.collect()


def _from_vllm(exc: BaseException) -> bool:
    """Raised inside vLLM's code (anywhere in the chain): the engine's failure, not the tool's."""
    return any(str(f.f_globals.get("__name__", "")).split(".")[0] == "vllm" for f in _frames(exc))


def _in_start(exc: BaseException) -> bool:
    """Raised while ``vllm.LLM(...)`` was being built."""
    return any(
        f.f_code.co_name == "__init__" and f.f_globals.get("__name__") == "vllm.entrypoints.llm" for f in _frames(exc)
    )


def _tail(log: Path) -> str:
    try:
        with open(log, "rb") as f:
            size = f.seek(0, os.SEEK_END)
            f.seek(max(0, size - LOG_TAIL_BYTES))
            return f.read().decode("utf-8", errors="replace")
    except OSError:
        return ""
