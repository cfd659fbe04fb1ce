"""Shared helpers: tiny token-pair tables, the command line (in this process or as the real console script).

Inputs built by hand for one class of cases, and the one-line error contract, are in ``tests/inputs.py``.
"""

from __future__ import annotations

import io
import math
import os
import subprocess
import sys
import types
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
SAMPLE_PAIRS = REPO / "sample_data" / "simulated_pairs.parquet"


def pairs(rows: list[tuple[int, int, float, float]], **extra) -> dict:
    """Columns from (sequence_id, position, q, p) rows given as probabilities."""
    return {
        "sequence_id": [r[0] for r in rows],
        "position": [r[1] for r in rows],
        "token_id": [7 + i for i in range(len(rows))],
        "sampler_logprob": [math.log(r[2]) for r in rows],
        "trainer_logprob": [math.log(r[3]) for r in rows],
        **extra,
    }


IN_PROCESS = frozenset(
    {"report", "compare-masks", "gate", "import", "timeline", "certify", "doctor", "provenance", "view"}
)
"""Commands :func:`cli` runs inside the test process: they start no engine and hold no process-wide state, and
a subprocess would spend most of its time starting Python and importing numpy, pyarrow and typer again."""


def cli(
    *args: str, env: dict | None = None, timeout: float = 600, cwd: Path | None = None
) -> subprocess.CompletedProcess:
    """The command line's behaviour (exit code, stdout, stderr), as the console script gives it.

    ``IN_PROCESS`` commands run through ``main()`` in this process; probe, rescore and diagnose (engines, child
    processes, signals) and anything else run as the real console script. ``MISMATCHSCOPE_TEST_SUBPROCESS=1``
    runs every call as a subprocess, to check that both ways agree.
    """
    if args and args[0] in IN_PROCESS and not os.environ.get("MISMATCHSCOPE_TEST_SUBPROCESS"):
        return cli_in_process(*args, env=env, cwd=cwd)
    return cli_process(*args, env=env, timeout=timeout, cwd=cwd)


def cli_no_engine(*args: str, env: dict | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """:func:`cli` for a call that starts no vLLM engine: probe and rescore too run in this process.

    For refusals before any engine starts, the ``hf`` sampler and a ``vllm-server`` sampler: a subprocess would
    spend seconds importing torch, transformers and vLLM again for each call. An in-process vLLM engine is kept
    out of it: it would set up process-wide state the engine fixtures own (``tests/probe/conftest.py``).
    ``MISMATCHSCOPE_TEST_SUBPROCESS=1`` runs these as subprocesses too.
    """
    if os.environ.get("MISMATCHSCOPE_TEST_SUBPROCESS"):
        return cli_process(*args, env=env, cwd=cwd)
    return cli_in_process(*args, env=env, cwd=cwd)


def cli_process(
    *args: str, env: dict | None = None, timeout: float = 600, cwd: Path | None = None
) -> subprocess.CompletedProcess:
    """Run the real console script installed next to this interpreter."""
    exe = Path(sys.executable).with_name("mismatchscope")
    full_env = {k: v for k, v in os.environ.items() if k != "MISMATCHSCOPE_DEBUG"}
    full_env.update(env or {})
    return subprocess.run([str(exe), *args], capture_output=True, text=True, env=full_env, timeout=timeout, cwd=cwd)


CALLS_RUNNER = r"""
import json, os, sys
from mismatchscope.cli.main import main
terminal = os.dup(1), os.dup(2)
env, cwd = dict(os.environ), os.getcwd()
for call in json.loads(sys.argv[1]):
    sys.stdout.flush()
    sys.stderr.flush()
    for fd, name in ((1, "stdout"), (2, "stderr")):
        f = os.open(call[name], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(f, fd)
        os.close(f)
    os.environ.clear()
    os.environ.update(env)
    os.chdir(cwd)
    sys.argv = ["mismatchscope", *call["args"]]
    code = 0
    try:
        main(call["args"])
    except SystemExit as e:
        if isinstance(e.code, str):
            sys.stderr.write(e.code + "\n")
        code = e.code if isinstance(e.code, int) else 0 if e.code is None else 1
    sys.stdout.flush()
    sys.stderr.flush()
    with open(call["code"], "w") as f:
        f.write(str(code))
os.dup2(terminal[0], 1)
os.dup2(terminal[1], 2)
"""


def cli_calls(
    calls: list[list[str]], scratch: Path, env: dict | None = None, cwd: Path | None = None
) -> list[subprocess.CompletedProcess]:
    """Several command lines, one after the other, in ONE fresh interpreter, each with its own stdout, stderr
    (descriptors 1 and 2, which the engines' child processes inherit) and exit code; ``scratch`` holds them.

    For probes whose engines are the test's input, not its subject: a probe process spends about 15 s of its
    20 importing vLLM, torch and transformers, which the calls after the first then find imported. Each call
    starts from the same environment variables and working directory; what a process keeps beyond those (its
    imports, loggers, warnings already shown) carries over, so a call's own behaviour is checked through
    :func:`cli_process`. A child process a call leaves running (a resource tracker) keeps writing to that
    call's files. The interpreter's exit (its teardown) must succeed too.
    """
    import json

    scratch.mkdir(parents=True, exist_ok=True)
    spec = [
        {"args": list(args), **{k: str(scratch / f"call-{i}.{k}") for k in ("stdout", "stderr", "code")}}
        for i, args in enumerate(calls)
    ]
    full_env = {k: v for k, v in os.environ.items() if k != "MISMATCHSCOPE_DEBUG"}
    full_env.update(env or {})
    try:
        runner = subprocess.run(
            [sys.executable, "-P", "-c", CALLS_RUNNER, json.dumps(spec)],  # -P: no working folder on sys.path
            capture_output=True,
            text=True,
            env=full_env,
            timeout=600 * len(calls),
            cwd=cwd,
        )
    except subprocess.TimeoutExpired:
        hung = next(c["args"] for c in spec if not Path(c["code"]).is_file())
        raise AssertionError(f"no exit within {600 * len(calls)} s; the call still running: {hung}") from None
    done = []
    for call in spec:
        code, err = Path(call["code"]), Path(call["stderr"])
        if not code.is_file():
            raise AssertionError(
                f"the calls' process ended (exit {runner.returncode}) during {call['args']}: "
                f"{(err.read_text() if err.is_file() else runner.stderr)[-3000:]}"
            )
        done.append(
            subprocess.CompletedProcess(
                ["mismatchscope", *call["args"]],
                int(code.read_text()),
                Path(call["stdout"]).read_text(),
                err.read_text(),
            )
        )
    assert runner.returncode == 0, f"the calls' process failed at exit ({runner.returncode}): {runner.stderr[-3000:]}"
    return done


def cli_in_process(*args: str, env: dict | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """``main(args)`` with its own stdout, stderr, environment, working directory and program name.

    click names the program after ``__main__`` (``python -m pytest`` here): a bare ``__main__`` and
    ``sys.argv[0] = "mismatchscope"`` make usage lines read as the console script's do.
    """
    from mismatchscope.cli.main import main

    out, err = io.StringIO(), io.StringIO()
    saved_env = dict(os.environ)
    saved = sys.stdout, sys.stderr, sys.argv, sys.modules["__main__"], os.getcwd()
    os.environ.pop("MISMATCHSCOPE_DEBUG", None)
    os.environ.update(env or {})
    sys.stdout, sys.stderr, sys.argv = out, err, ["mismatchscope", *args]
    sys.modules["__main__"] = types.ModuleType("__main__")
    code: int = 0
    try:
        if cwd is not None:
            os.chdir(cwd)
        main(list(args))
    except SystemExit as e:
        if isinstance(e.code, str):  # sys.exit("message"): printed, exit 1, as the interpreter does
            err.write(e.code + "\n")
        code = e.code if isinstance(e.code, int) else 0 if e.code is None else 1
    finally:
        sys.stdout, sys.stderr, sys.argv, sys.modules["__main__"], cwd_before = saved
        os.chdir(cwd_before)
        os.environ.clear()
        os.environ.update(saved_env)
    return subprocess.CompletedProcess(["mismatchscope", *args], code, out.getvalue(), err.getvalue())


def random_pairs(rng: np.random.Generator, n_seq: int, max_len: int, advantage: bool = True) -> dict:
    cols: dict[str, list] = {
        k: [] for k in ("sequence_id", "position", "token_id", "sampler_logprob", "trainer_logprob")
    }
    if advantage:
        cols["advantage"] = []
    for s in range(n_seq):
        length = int(rng.integers(1, max_len + 1))
        lq = np.log(rng.uniform(1e-4, 1.0, length))
        lp = np.minimum(lq + rng.normal(0, 0.5, length), 0.0)
        cols["sequence_id"] += [s * 3 + 1] * length
        cols["position"] += list(range(length))
        cols["token_id"] += rng.integers(0, 1000, length).tolist()
        cols["sampler_logprob"] += lq.tolist()
        cols["trainer_logprob"] += lp.tolist()
        if advantage:
            cols["advantage"] += [float(rng.choice([-1.0, 0.0, 1.5]))] * length
    return cols


PROBE_META = {
    "checkpoint": {"sha256": "a" * 64, "path": "ckpt"},
    "prompts": {"sha256": "b" * 64, "count": 2},
    "sampling": {
        "temperature": 1.0,
        "top_p": 1.0,
        "top_k": -1,
        "n": 4,
        "max_tokens": 16,
        "top_k_logprobs": 5,
        "seed": 0,
        "logprobs_mode": "processed_logprobs",
    },
    "sampler": {"kind": "vllm", "dtype": "float32", "engine_args": {}},
    "trainer": {"dtype": "float32", "attn_implementation": None, "fp32_lm_head": False},
}
"""File metadata shaped like a probe run's (the parts the gate's comparability check reads)."""


def probe_meta(**changes) -> dict:
    """PROBE_META with sections updated: probe_meta(sampler={"dtype": "float16"})."""
    import json

    out = json.loads(json.dumps(PROBE_META))
    for section, values in changes.items():
        out[section] = {**out.get(section, {}), **values} if isinstance(values, dict) else values
    return out
