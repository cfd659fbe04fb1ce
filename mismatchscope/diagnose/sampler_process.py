"""One sampler configuration in a fresh interpreter: its spec, its process, and its result read back.

In-process engines share global state, so every sampler configuration of a
diagnose runs in its own process (:mod:`.worker`); this side writes the
spec, starts the process (kept up as a timing server for the baseline and,
while the baseline's is up, for sampler-side variants: :mod:`.timing`), and
turns whatever it left (a result file, an exit code, a timeout) into one
result record, with the engine's own words where its start-up failed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import IO, Any

from .. import rundir
from ..documents import json_edge
from .locate.capture import LocateSpec
from .options import DiagnoseOptions
from .sampler_result import SamplerResult, WorkerSpec
from .timing import SamplerServer
from .variants import Configuration

WORKER_TIMEOUT_S = 900
WORKER = [sys.executable, "-m", "mismatchscope.diagnose.worker"]


def sampler_run(
    opts: DiagnoseOptions, cfg: Configuration, out: Path, *, repeat: bool, prefill: bool, serve: bool = False
) -> tuple[SamplerResult, SamplerServer | None]:
    """One sampler configuration in a fresh interpreter (see :mod:`.worker`); with ``serve``, the process is
    kept up, its engine warm, to time sampling rounds (:mod:`.timing`), and returned when it started."""
    return launch(opts, cfg, out, repeat=repeat, prefill=prefill, serve=serve).wait()


def launch(
    opts: DiagnoseOptions, cfg: Configuration, out: Path, *, repeat: bool, prefill: bool, serve: bool = False
) -> Launched:
    """Start one configuration's sampler process and return at once: it starts its engine and probes while
    the caller does other work; :meth:`Launched.wait` collects it."""
    out.parent.mkdir(parents=True, exist_ok=True)
    spec = _spec(opts, cfg, out, repeat=repeat, prefill=prefill)
    spec_path = out.parent / f"{out.name}.spec.json"  # the spec and the result cross to the process as JSON
    log_path = out.parent / f"{out.name}.log"
    with open(log_path, "w") as log:  # the child holds its own copy of the file
        if serve:
            return _Served(spec, spec_path, log_path, log)
        return _ToEnd(spec, spec_path, log_path, log)


class Launched:
    """A sampler process started and not yet collected: its result (and, served, its timing server) once it
    has probed, or why there is none. The time limit runs from the start."""

    def __init__(self, spec: WorkerSpec, log_path: Path) -> None:
        self.spec = spec
        self.log_path = log_path
        self.t0 = time.perf_counter()
        self.proc: subprocess.Popen | None = None
        self._code: int | None = None
        self._done = False

    def left_s(self) -> float:
        return max(0.0, WORKER_TIMEOUT_S - (time.perf_counter() - self.t0))

    def settle(self) -> None:
        """Wait until the process is idle: it has written its result (and serves rounds) or it has ended."""
        if not self._done:
            try:
                self._code = self._settle()
            except BaseException:  # an interrupt while it starts: it does not outlive the wait
                self.kill()
                raise
            self._wall = time.perf_counter() - self.t0
            self._done = True

    @property
    def settled(self) -> bool:
        return self._done

    def wait(self) -> tuple[SamplerResult, SamplerServer | None]:
        """The result (``process_wall_s``: launch to result) and the timing server, if it serves."""
        self.settle()
        result = SamplerResult.of_message(_result(Path(self.spec.result), self._code, self.log_path))
        return result.collected(self._wall, str(self.log_path)), self._server()

    def kill(self) -> None:
        """Stop it now, whatever it is doing (an interrupt, an error elsewhere): nothing keeps running."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
        if self.proc is not None:
            self.proc.wait()
        self._close()

    def _settle(self) -> int | None:
        raise NotImplementedError

    def _server(self) -> SamplerServer | None:
        return None

    def _close(self) -> None:
        pass


class _ToEnd(Launched):
    """Runs to its end: the result file is all it leaves."""

    def __init__(self, spec: WorkerSpec, spec_path: Path, log_path: Path, log: IO[str]) -> None:
        super().__init__(spec, log_path)
        rundir.atomic_write_bytes(spec_path, json.dumps(spec.message(), indent=2).encode())
        self.proc = subprocess.Popen([*WORKER, str(spec_path)], stdout=log, stderr=subprocess.STDOUT)

    def _settle(self) -> int | None:
        """The worker's exit code; None when it ran past the time limit (it is stopped)."""
        assert self.proc is not None
        try:
            return self.proc.wait(timeout=self.left_s())
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            return None


class _Served(Launched):
    """Kept up after its probe as a timing server (:class:`.timing.SamplerServer`)."""

    def __init__(self, spec: WorkerSpec, spec_path: Path, log_path: Path, log: IO[str]) -> None:
        read_end, write_end = SamplerServer.pipe()
        spec = replace(spec, reply_fd=write_end)
        super().__init__(spec, log_path)
        rundir.atomic_write_bytes(spec_path, json.dumps(spec.message(), indent=2).encode())
        try:
            self.proc = subprocess.Popen(
                [*WORKER, str(spec_path)],
                stdin=subprocess.PIPE,
                stdout=log,
                stderr=subprocess.STDOUT,
                pass_fds=(write_end,),
                text=True,
            )
        finally:
            os.close(write_end)
        self.server: SamplerServer | None = SamplerServer(self.proc, os.fdopen(read_end))

    def _settle(self) -> int | None:
        """0 once it serves rounds; else its exit code, or None when it ran past the time limit (stopped)."""
        assert self.server is not None and self.proc is not None
        if self.server.wait_ready(self.left_s()):
            return 0
        timed_out = self.proc.poll() is None
        if timed_out:  # still running past its time: stopped here, and said to be a timeout, not a death
            self.proc.kill()
        self.server.close()
        self.server = None
        return None if timed_out else self.proc.returncode

    def _server(self) -> SamplerServer | None:
        return self.server

    def _close(self) -> None:
        if self.server is not None:
            self.server.close()
            self.server = None


def _spec(opts: DiagnoseOptions, cfg: Configuration, out: Path, *, repeat: bool, prefill: bool) -> WorkerSpec:
    """What the worker reads: the configuration, the run directory to write, and what to measure besides."""
    locate = None
    if opts.locate is not None:
        path = str(out.parent / f"{out.name}.locate.npz")
        locate = LocateSpec(opts.locate.budget, path, sequences=opts.locate.sequences)
    return WorkerSpec(
        checkpoint=str(opts.checkpoint),
        prompts=str(opts.prompts),
        out=str(out),
        sampling=opts.sampling,
        sampler=cfg.sampler,
        trainer=cfg.trainer,
        env=cfg.env,
        repeat=repeat,
        prefill=prefill,
        result=str(out.parent / f"{out.name}.result.json"),
        seed=opts.bootstrap.seed,
        locate=locate,
    )


@json_edge
def _result(result_path: Path, code: int | None, log_path: Path) -> dict[str, Any]:
    """The worker's result file, or why there is none (``code`` None: it ran out of time; else it died)."""
    result: dict[str, Any]
    if result_path.is_file():
        result = json.loads(result_path.read_text())
    elif code is None:
        result = {
            "status": "failed",
            "stage": "timeout",
            "reason": f"no result within {WORKER_TIMEOUT_S} s: the sampler process was stopped (its output: {log_path})",
        }
    else:
        result = {
            "status": "failed",
            "stage": "engine process",
            "reason": f"the sampler process died (exit code {code}): {_last_line(log_path)}",
        }
    if result.get("stage") == "engine start-up":  # the worker's whole output is the log: the cause is there
        from ..probe.engine_log import cause_in_log

        result["reason"] = cause_in_log(log_path, result["reason"])
    return result


def _last_line(path: Path) -> str:
    lines = [ln.strip() for ln in path.read_text(errors="replace").splitlines() if ln.strip()]
    return lines[-1][:300] if lines else "no output"
