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
from pathlib import Path
from typing import IO, Any

from .. import rundir
from .options import DiagnoseOptions
from .timing import SamplerServer
from .variants import Configuration

WORKER_TIMEOUT_S = 900
WORKER = [sys.executable, "-m", "mismatchscope.diagnose.worker"]


def sampler_run(
    opts: DiagnoseOptions, cfg: Configuration, out: Path, *, repeat: bool, prefill: bool, serve: bool = False
) -> tuple[dict[str, Any], SamplerServer | None]:
    """One sampler configuration in a fresh interpreter (see :mod:`.worker`); with ``serve``, the process is
    kept up, its engine warm, to time sampling rounds (:mod:`.timing`), and returned when it started."""
    out.parent.mkdir(parents=True, exist_ok=True)
    spec = _spec(opts, cfg, out, repeat=repeat, prefill=prefill)
    spec_path = out.parent / f"{out.name}.spec.json"
    log_path = out.parent / f"{out.name}.log"
    t0 = time.perf_counter()
    server = None
    with open(log_path, "w") as log:
        if serve:
            server, code = _start_server(spec, spec_path, log)
        else:
            code = _run_to_end(spec, spec_path, log)
    wall = time.perf_counter() - t0
    result = _result(Path(spec["result"]), code, log_path)
    result["process_wall_s"] = wall
    result["log"] = str(log_path)
    return result, server


def _spec(opts: DiagnoseOptions, cfg: Configuration, out: Path, *, repeat: bool, prefill: bool) -> dict[str, Any]:
    """What the worker reads: the configuration, the run directory to write, and what to measure besides."""
    spec = {
        "checkpoint": str(opts.checkpoint),
        "prompts": str(opts.prompts),
        "out": str(out),
        "sampling": opts.sampling.to_dict(),
        "sampler": cfg.sampler.to_dict(),
        "trainer": cfg.trainer.to_dict(),
        "env": cfg.env,
        "repeat": repeat,
        "prefill": prefill,
        "result": str(out.parent / f"{out.name}.result.json"),
        "seed": opts.bootstrap.seed,
    }
    if opts.locate is not None:
        budget, n = opts.locate.budget, opts.locate.sequences
        spec["locate"] = {"sequences": n, "budget": budget, "path": str(out.parent / f"{out.name}.locate.npz")}
    return spec


def _run_to_end(spec: dict[str, Any], spec_path: Path, log: IO[str]) -> int | None:
    """The worker's exit code; None when it ran past the time limit."""
    rundir.atomic_write_bytes(spec_path, json.dumps(spec, indent=2).encode())
    try:
        proc = subprocess.run([*WORKER, str(spec_path)], stdout=log, stderr=subprocess.STDOUT, timeout=WORKER_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return None
    return proc.returncode


def _start_server(spec: dict, spec_path: Path, log) -> tuple[SamplerServer | None, int | None]:
    """Start the worker as a timing server; wait until it has written its result (or ended)."""
    read_end, write_end = SamplerServer.pipe()
    spec["reply_fd"] = write_end
    rundir.atomic_write_bytes(spec_path, json.dumps(spec, indent=2).encode())
    proc = subprocess.Popen(
        [*WORKER, str(spec_path)],
        stdin=subprocess.PIPE,
        stdout=log,
        stderr=subprocess.STDOUT,
        pass_fds=(write_end,),
        text=True,
    )
    os.close(write_end)
    server = SamplerServer(proc, os.fdopen(read_end))
    if server.wait_ready(WORKER_TIMEOUT_S):
        return server, 0
    timed_out = proc.poll() is None
    if timed_out:  # still running past its time: stopped here, and said to be a timeout, not a death
        proc.kill()
    server.close()
    return None, None if timed_out else proc.returncode


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
