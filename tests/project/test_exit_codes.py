"""The exit-code contract every command keeps: a user error is one line on stderr and exit code 2, never a
traceback, whatever ``MISMATCHSCOPE_DEBUG`` says; a bug is 3, never the 1 of a failed gate; a closed or full
stdout changes neither; no error line prints a credential; and the documented table names every command.

Each module's own refusals (one hostile input of one class, the whole message pinned) live beside the module
that refuses it; ``tests.helpers.error_line`` is the contract they all assert.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import REPO, cli, pairs
from tests.inputs import ROWS, error_line, gate_config

# ---- debug mode -----------------------------------------------------------------


@pytest.mark.parametrize("value", ["0", "false", "no", ""])
def test_debug_off_values_keep_the_one_line(tmp_path, value):
    r = cli("report", str(tmp_path / "missing.parquet"), env={"MISMATCHSCOPE_DEBUG": value})
    assert error_line(r) == f"error: {tmp_path / 'missing.parquet'}: no such file or directory"


@pytest.mark.parametrize("value", ["1", "true", "YES"])
def test_debug_on_adds_the_traceback_and_keeps_exit_2(tmp_path, value):
    r = cli("report", str(tmp_path / "missing.parquet"), env={"MISMATCHSCOPE_DEBUG": value})
    assert r.returncode == 2 and "Traceback" in r.stderr
    assert r.stderr.strip().splitlines()[-1] == f"error: {tmp_path / 'missing.parquet'}: no such file or directory"


def test_debug_keeps_gate_exit_codes(runs):
    base, cand = runs
    r = cli("gate", str(cand), "--baseline", str(cand), "--bootstrap", "0", env={"MISMATCHSCOPE_DEBUG": "1"})
    assert r.returncode == 2


# ---- secrets in error messages -------------------------------------------------


def test_an_error_message_with_url_credentials_is_printed_redacted(tmp_path):
    r = cli("report", "http://alice:s3cret@example.invalid/x.parquet")
    line = error_line(r)
    assert "s3cret" not in line and "alice" not in line
    assert line == "error: http://<redacted>@example.invalid/x.parquet: no such file or directory"


# ---- exit codes for what is not a user error -------------------------------------------


def test_a_bug_in_gate_exits_3_never_1(runs, monkeypatch, capsys):
    """A crash must not read as 'a limit failed' in CI; the traceback stays, for the report."""
    import mismatchscope.gate.run as gate_run
    from mismatchscope.cli.main import main

    def broken(*args, **kwargs):
        raise RuntimeError("boom")

    monkeypatch.setattr(gate_run, "run_gate", broken)
    base, cand = runs
    with pytest.raises(SystemExit) as exit_:
        main(["gate", str(cand), "--baseline", str(base), "--bootstrap", "0"])
    assert exit_.value.code == 3
    err = capsys.readouterr().err
    assert "Traceback" in err
    assert err.strip().splitlines()[-1] == (
        "error: internal error (RuntimeError: boom); please report it with the traceback above"
    )


def test_a_full_stdout_is_one_line_and_exit_2(data):
    if not os.path.exists("/dev/full"):
        pytest.skip("needs /dev/full (Linux)")
    import subprocess

    exe = os.path.join(os.path.dirname(sys.executable), "mismatchscope")
    env = {k: v for k, v in os.environ.items() if k != "MISMATCHSCOPE_DEBUG"}
    with open("/dev/full", "w") as full:
        r = subprocess.run(
            [exe, "report", str(data), "--format", "json"], stdout=full, stderr=subprocess.PIPE, text=True, env=env
        )
    assert (
        r.returncode == 2
        and r.stderr.strip() == "error: No space left on device (free space on the device, or write elsewhere)"
    )


def test_credentials_in_a_files_metadata_are_never_printed(write):
    meta = {
        "sampler": {"kind": "vllm-server", "url": "http://bob:hunter22@10.0.0.1:8000"},
        "trainer": {"dtype": "float32"},
    }
    path = write(pairs(ROWS), metadata=meta)
    r = cli("report", str(path), "--format", "json")
    assert r.returncode == 0, r.stderr
    assert "hunter22" not in r.stdout + r.stderr
    assert json.loads(r.stdout)["run"]["sampler"]["url"] == "http://<redacted>@10.0.0.1:8000"


@pytest.mark.parametrize(
    "args, message",
    [
        (["report"], "Missing argument 'path'. (see mismatchscope report --help)"),
        (
            ["report", "x", "--format", "yaml"],
            "Invalid value for '--format' / '-f': 'yaml' is not one of 'table', 'json'. (see mismatchscope report --help)",
        ),
        (["report", "--nope"], "No such option: --nope (see mismatchscope report --help)"),
        (["nosuchcmd"], "No such command 'nosuchcmd'. (see mismatchscope --help)"),
    ],
)
def test_usage_errors_are_one_line_too(args, message):
    assert error_line(cli(*args)) == f"error: {message}"


def test_a_closed_stdout_is_not_a_failed_gate(runs):
    """``gate ... | head -1``: the pipe closes early; the exit code is the gate's verdict, the one it gives when
    the output is read whole (a 1 the pipe made up would say a limit failed)."""
    import subprocess

    base, cand = runs
    exe = os.path.join(os.path.dirname(sys.executable), "mismatchscope")
    argv = [exe, "gate", str(cand), "--baseline", str(base), "--bootstrap", "0", "--limit", "tv_token_mean<=1"]
    whole = subprocess.run(argv, capture_output=True)
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None
    proc.stdout.close()  # the reader went away before any output
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == whole.returncode and err == whole.stderr, err


def test_the_exit_code_table_names_every_command_that_exits_1_and_every_command():
    """docs/errors.md once said only gate and certify exit 1, while doctor exits 1 on a likely pipeline
    problem: the commands whose module raises ``typer.Exit(1)`` (certify, doctor, gate) must be the ones the
    table's row for 1 names, and the per-command sentence must name every command."""
    import re

    from mismatchscope.cli.main import COMMANDS

    cli_dir = REPO / "mismatchscope" / "cli"
    verdicts = {p.stem for p in cli_dir.glob("*.py") if "typer.Exit(1)" in p.read_text()}
    assert verdicts == {"certify", "doctor", "gate"}
    text = (REPO / "docs" / "errors.md").read_text()
    row = next(line for line in text.splitlines() if line.startswith("| 1 |"))
    assert set(re.findall(r"`([a-z-]+)`,", row)) == verdicts, row
    sentence = text.split("Per command:", 1)[1].split("The library", 1)[0]
    assert set(COMMANDS) <= set(re.findall(r"`([a-z-]+)`", sentence)), sentence


EXE = str(Path(sys.executable).with_name("mismatchscope"))


def test_a_closed_stdout_or_an_unwritable_stderr_does_not_change_the_verdict(tmp_path, write):
    cand = write(pairs(ROWS), "cand.parquet")
    # ROWS' k3 mean is about 2.2 (((0.4-1)-ln 0.4 + (3-1)-ln 3 + 0 + (2e-5-1)-ln 2e-5 + 0) / 5): max 10 passes, max 0.1 fails
    passing = [
        EXE,
        "gate",
        str(cand),
        "--absolute-only",
        "--bootstrap",
        "0",
        "--config",
        gate_config(tmp_path, "[absolute]\nk3_mean = { max = 10 }\n"),
    ]
    failing = passing[:-1] + [gate_config(tmp_path / "f", "[absolute]\nk3_mean = { max = 0.1 }\n")]
    # stdout closed outright (>&-): the tables are lost, the verdict is not
    for argv, code in ((passing, 0), (failing, 1)):
        r = subprocess.run(["bash", "-c", " ".join(f"'{a}'" for a in argv) + " >&-"], stderr=subprocess.PIPE, text=True)
        assert r.returncode == code and "Traceback" not in r.stderr, r.stderr
    with open("/dev/full", "w") as full:
        assert subprocess.run(passing, stdout=subprocess.DEVNULL, stderr=full).returncode == 0
        assert subprocess.run(failing, stdout=subprocess.DEVNULL, stderr=full).returncode == 1
        # a usage error stays exit 2 even when its line cannot be printed
        assert subprocess.run([EXE, "report", str(tmp_path / "missing.parquet")], stderr=full).returncode == 2


def test_a_pipe_closed_before_the_first_byte_keeps_the_exit_code(tmp_path, write):
    """`| head -c0`: the reader went away before the first byte. The output is lost to a reader who chose not to
    read it; the exit code is the command's own, as when the reader takes every byte."""
    cand = write(pairs(ROWS), "cand.parquet")
    proc = subprocess.Popen([EXE, "report", str(cand)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()
    err = proc.stderr.read()
    assert proc.wait() == 0 and "error" not in err and "Traceback" not in err, err


def _shifted(tmp_path) -> Path:
    """A run whose trainer logprobs are the sampler's shifted by one position: doctor's verdict is a pipeline
    problem (exit 1), the verdict a closed pipe must never turn into."""
    import numpy as np

    from mismatchscope.schema import write_table

    rng = np.random.default_rng(0)
    n = 4000
    lq = np.log(rng.uniform(0.05, 1, n))
    cols = {
        "sequence_id": np.arange(n) // 40,
        "position": np.arange(n) % 40,
        "token_id": np.zeros(n, np.int64),
        "sampler_logprob": lq,
        "trainer_logprob": np.roll(lq, 1),
    }
    return write_table(tmp_path / "shifted.parquet", cols)


@pytest.mark.parametrize("command", ["report", "doctor", "compare-masks", "certify", "gate"])
def test_every_command_exits_the_same_on_a_pipe_closed_after_its_first_line(tmp_path, command):
    """`doctor | head` exited 2 where `report | head` exited 0: whether a command met the closed pipe depended on
    how much it had written before the reader left (report writes its tables at once, doctor in steps). A pipe
    closed by its reader is no error of the command: each exits with its own code, its verdict included (doctor's
    here is a pipeline problem, certify's not certified, gate's a failed limit), as when nothing is cut."""
    args = ["--absolute-only", "--bootstrap", "0", "--limit", "tv_token_mean<=0.001"] if command == "gate" else []
    argv = [EXE, command, str(_shifted(tmp_path)), *args]
    whole = subprocess.run(argv, capture_output=True, text=True)
    assert whole.returncode in (0, 1), whole.stderr
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.readline()
    proc.stdout.close()  # `| head -1`: the reader goes away after the first line
    err = proc.stderr.read()
    assert proc.wait() == whole.returncode and err == whole.stderr, err


def test_a_closed_pipe_found_only_at_the_last_flush_keeps_the_exit_code(tmp_path):
    """Output still in stdout's buffer when the command returns meets the closed pipe at interpreter exit, where
    Python prints "Exception ignored ... BrokenPipeError" and exits 120: the command's own code stands."""
    code = (
        "import sys\n"
        "from mismatchscope.cli import main as m\n"
        "def build(names):\n"
        "    def run(**kw):\n"
        "        sys.stdout.write('x' * 100000)  # no flush: left in the buffer\n"
        "        return 0\n"
        "    return run\n"
        "m.build_app = build\n"
        "m.main(['doctor', 'x'])\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()
    err = proc.stderr.read()
    assert proc.wait() == 0 and err == "", err
