"""One writer per run directory, and rescore only from a complete run.

A second process is refused while another holds a run directory's writer
lock (``DIR/.lock``), before any engine starts: here the holder is a real
helper process, and the refused command is the real console script. No
engine starts in this module (the refusals come first).
"""

from __future__ import annotations

import json
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.helpers import REPO, cli
from tests.probe.test_probe_errors import error_line

CHECKPOINT = REPO / "sample_data" / "tiny-qwen3"
PROMPTS = REPO / "sample_data" / "prompts.jsonl"

pytestmark = pytest.mark.skipif(not (CHECKPOINT / "config.json").is_file(), reason="needs the bundled tiny-qwen3")

HOLDER = """
import sys
from mismatchscope import rundir
lock = rundir.lock_run(sys.argv[1])
print("locked", flush=True)
sys.stdin.read()  # held until the test closes our stdin
"""


@contextmanager
def held(run: Path):
    """Another process holding ``run``'s writer lock; yields its pid."""
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(run)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout.readline().strip() == "locked"
        yield proc.pid
    finally:
        proc.stdin.close()
        proc.wait(timeout=30)


def _source(tmp_path: Path, status: str) -> Path:
    """A run directory's outline: a manifest with ``status`` and one recorded round (the round is never read here)."""
    src = tmp_path / "src"
    (src / "samples").mkdir(parents=True)
    (src / "tokens").mkdir()
    (src / "samples" / "round-00000.parquet").write_bytes(b"")
    config = {"sampling": {}, "checkpoint": {"path": "ckpt", "sha256": "0" * 64}}  # the fields rescore checks first
    (src / "manifest.json").write_text(json.dumps({"status": status, "config": config, "fingerprint": {}}))
    return src


def test_a_second_probe_resume_is_refused_while_another_writes(tmp_path):
    run = tmp_path / "run"
    with held(run) as pid:
        r = cli(
            "probe",
            str(CHECKPOINT),
            "--prompts",
            str(PROMPTS),
            "--sampler",
            "hf",
            "-n",
            "1",
            "--max-tokens",
            "2",
            "--out",
            str(run),
            "--resume",
        )
        assert error_line(r) == (
            f"error: {run} is being written by another process (pid {pid} holds {run / '.lock'}) "
            "(wait for it to finish, or write to another directory)"
        )
    assert [p.name for p in run.iterdir()] == [".lock"]  # nothing else was written


def test_rescore_into_a_directory_another_process_writes_is_refused(tmp_path):
    src, out = _source(tmp_path, "complete"), tmp_path / "out"
    with held(out) as pid:
        r = cli("rescore", str(src), "--out", str(out), "--resume")
        assert error_line(r) == (
            f"error: {out} is being written by another process (pid {pid} holds {out / '.lock'}) "
            "(wait for it to finish, or write to another directory)"
        )


def test_the_lock_ends_with_its_holder(tmp_path):
    from mismatchscope import rundir
    from mismatchscope.errors import RunLockedError

    run = tmp_path / "run"
    with held(run):
        with pytest.raises(RunLockedError):
            rundir.lock_run(run)
    with rundir.lock_run(run):  # the holder exited: its lock went with it, the file left behind is no obstacle
        assert rundir.is_empty_dir(run)


def test_rescore_refuses_an_incomplete_source(tmp_path):
    src, out = _source(tmp_path, "running"), tmp_path / "out"
    r = cli("rescore", str(src), "--out", str(out))
    assert error_line(r) == (
        f"error: {src} is an incomplete run (manifest.json status is 'running', not 'complete'); "
        f"rescore needs a complete one (finish it first with the same probe command and "
        f"--resume --out {src})"
    )
    assert not out.exists()


def test_import_into_a_directory_another_process_writes_is_refused(tmp_path):
    import math

    from tests.importers.layouts import nemo_sample, write_nemo_step

    write_nemo_step(
        tmp_path / "logs" / "exp", 1, [nemo_sample([5], [7], [math.log(0.5)], [math.log(0.4)], adv=1.0, reward=1.0)]
    )
    out = tmp_path / "imported"
    with held(out) as pid:
        r = cli("import", "nemo-rl", str(tmp_path / "logs"), "--out", str(out))
        assert error_line(r) == (
            f"error: {out} is being written by another process (pid {pid} holds {out / '.lock'}) "
            "(wait for it to finish, or write to another directory)"
        )
    assert [p.name for p in out.iterdir()] == [".lock"]
    assert (
        cli("import", "nemo-rl", str(tmp_path / "logs"), "--out", str(out)).returncode == 0
    )  # once the holder is gone
