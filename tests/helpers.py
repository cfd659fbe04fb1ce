"""Shared helpers: tiny token-pair tables, the command line (in this process or as the real console script)."""

from __future__ import annotations

import io
import json
import math
import os
import shutil
import subprocess
import sys
import types
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

REPO = Path(__file__).resolve().parents[1]
SAMPLE_PAIRS = REPO / "sample_data" / "simulated_pairs.parquet"
JUNIT_XSD = REPO / "tests" / "data" / "junit.xsd"


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


IN_PROCESS = frozenset({"report", "compare-masks", "gate", "import", "timeline", "certify", "doctor"})
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


# ---- the one-line error contract, shared by the modules that pin refusals ----

ROWS = [(1, 0, 0.5, 0.2), (1, 1, 0.2, 0.6), (1, 2, 0.9, 0.9), (2, 0, 0.5, 1e-5), (2, 1, 0.5, 0.5)]
DUP_HINT = "(each generated token must appear once; was a file read twice, or do two runs share sequence ids?)"


def error_line(r, after_work: bool = False) -> str:
    """The one line a user error prints; fails on a traceback, a second line or another exit code.

    ``after_work``: the command legitimately printed progress and warnings before failing (a gate
    whose output device fills up after the analysis); the error must still be one last line.
    """
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert "Traceback" not in r.stderr, r.stderr
    lines = r.stderr.strip().splitlines()
    errors = [line for line in lines if line.startswith("error")]
    assert len(errors) == 1 and lines[-1] == errors[0], r.stderr
    if not after_work:
        assert len(lines) == 1, r.stderr
    return lines[-1]


def raw_parquet(path, columns: dict, metadata: dict | None = None, **write_options):
    """A Parquet file written around the schema helpers (foreign files, odd metadata, other writer options)."""
    table = pa.table(columns)
    if metadata is not None:
        table = table.replace_schema_metadata(metadata)
    pq.write_table(table, path, **write_options)
    return path


def assert_plots_folder_checked(command: str, data: Path, tmp_path: Path) -> None:
    """``--plots`` onto a file, or onto the input itself: refused before any work, the input untouched."""
    before = data.read_bytes()
    notes = tmp_path / "notes.txt"
    notes.write_text("x")
    assert error_line(cli(command, str(data), "--plots", str(notes))) == (
        f"error: --plots {notes} exists and is not a directory (give --plots a folder)"
    )
    assert error_line(cli(command, str(data), "--plots", str(data))) == (
        f"error: --plots {data} is an input of this command ({data}); writing it would destroy the data "
        "(choose another output path)"
    )
    assert data.read_bytes() == before


def sequence_rows(sequence_id: int, positions: list[int]) -> list[tuple[int, int, float, float]]:
    """Rows of one sequence at these positions (q = 0.5, p = 0.4): duplicates and gaps as written."""
    return [(sequence_id, p, 0.5, 0.4) for p in positions]


def gate_cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    """``gate`` with no bootstrap and a limit every run passes: for the checks around the verdict."""
    return cli("gate", *args, "--bootstrap", "0", "--limit", "tv_token_mean<=1", env=env)


def jsonl_dump(tmp_path, *records: str):
    """``dump.jsonl`` in ``tmp_path``, one record (a JSON text) a line."""
    dump = tmp_path / "dump.jsonl"
    dump.write_text("".join(r + "\n" for r in records))
    return dump


def one_sequence(n: int = 5, **changes) -> dict:
    """Columns of ``n`` tokens of sequence 1, log q = -0.5 and log p = -0.6 on each (|log p - log q| = 0.1)."""
    cols = {
        "sequence_id": [1] * n,
        "position": list(range(n)),
        "token_id": list(range(7, 7 + n)),
        "sampler_logprob": [-0.5] * n,
        "trainer_logprob": [-0.6] * n,
    }
    cols.update(changes)
    return cols


def report_json(path, *args) -> dict:
    """``report --format json`` of ``path``, which must succeed."""
    r = cli("report", str(path), "--format", "json", *args)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def topk_lists(ids=None, logprobs=None, at=None, trainer_ids=None, trainer_logprobs=None) -> dict:
    """Two tokens' top-2 lists (the token ids of ``one_sequence(2)`` are 7 and 8)."""
    cols = {
        "sampler_topk_ids": [[7, 9], [8, 3]] if ids is None else ids,
        "sampler_topk_logprobs": [[-0.7, -1.0]] * 2 if logprobs is None else logprobs,
        "trainer_logprobs_at_sampler_topk": [[-0.7, -1.0]] * 2 if at is None else at,
    }
    if trainer_ids is not None:
        cols["trainer_topk_ids"] = trainer_ids
        cols["trainer_topk_logprobs"] = [[-0.7, -1.0]] * 2 if trainer_logprobs is None else trainer_logprobs
    return cols


def one_line_error(r, *parts: str) -> None:
    """A one-line ``error:`` and exit code 2, holding each of ``parts`` (where the whole line is not pinned)."""
    assert r.returncode == 2, r.stderr
    assert r.stderr.startswith("error: ") and r.stderr.count("\n") == 1, r.stderr
    for p in parts:
        assert p in r.stderr, r.stderr


def validate_junit(path: Path) -> None:
    """Against tests/data/junit.xsd (the structure Jenkins, GitLab and GitHub reporters read) when xmllint exists,
    and by hand always."""
    if shutil.which("xmllint"):
        r = subprocess.run(
            ["xmllint", "--noout", "--schema", str(JUNIT_XSD), str(path)], capture_output=True, text=True
        )
        assert r.returncode == 0, r.stderr
    root = ET.parse(path).getroot()
    assert root.tag == "testsuites"
    for suite in root:
        assert suite.tag == "testsuite" and {"name", "tests", "failures", "errors", "time"} <= set(suite.attrib)
        cases = suite.findall("testcase")
        assert int(suite.get("tests")) == len(cases)
        assert int(suite.get("failures")) == sum(c.find("failure") is not None for c in cases)
        for c in cases:
            assert {"name", "classname", "time"} <= set(c.attrib)
            assert all(ch.tag in ("failure", "error", "skipped", "system-out", "system-err") for ch in c)


def write_run_dir(root: Path, write, status: str = "complete") -> Path:
    """A run directory as the writers leave it: ``RUN/tokens/*.parquet`` and ``RUN/manifest.json``."""
    (root / "tokens").mkdir(parents=True)
    shard = write(pairs(ROWS), "shard.parquet")
    shard.rename(root / "tokens" / "part-00000.parquet")
    (root / "manifest.json").write_text(json.dumps({"status": status}))
    return root


def gate_config(tmp_path: Path, text: str) -> str:
    """A gate configuration file holding text; its path."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    path = tmp_path / "gate.toml"
    path.write_text(text)
    return str(path)


RECORDED_Q = np.log([[0.5, 0.25], [0.8, 0.5]])
RECORDED_P = np.log([[0.25, 0.25], [0.1, 0.5]])
"""Two sequences of two tokens: what :func:`recorded_run` records at every step (q, then p)."""


def recorded_run(path: Path, steps: int = 3, close: bool = True) -> Path:
    """A recorded run of ``steps`` steps, 4 tokens each (one shard a step)."""
    from mismatchscope.live import Recorder

    rec = Recorder(path, rank=0, world_size=1)
    for step in range(steps):
        rec.add(step, RECORDED_Q, RECORDED_P)
    if close:
        rec.close()
    else:
        rec.flush()
        rec._lock.release()  # a killed writer: its shards stay, its run is not complete
    return path
