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

from mismatchscope import rundir
from mismatchscope.errors import UsageError
from tests.helpers import REPO, cli, cli_no_engine
from tests.probe.refusals import (
    GOOD_CHOICE,
    checkpoint_copy,
    error_line,
    prompts_file,
    refused_probe,
)

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


def test_an_out_that_is_a_file(tmp_path):
    out = tmp_path / "run"
    out.write_text("x")
    r = cli_no_engine("probe", str(CHECKPOINT), "--out", str(out), "--sampler", "hf")
    assert error_line(r) == f"error: --out {out} exists and is not a directory (give --out a folder)"
    assert out.read_text() == "x"


def test_an_unreachable_server_leaves_no_run_and_a_rerun_is_not_blocked(tmp_path):
    from tests.probe.conftest import free_port

    args = ["--sampler", "vllm-server", "--url", f"http://127.0.0.1:{free_port()}", "-n", "1", "--max-tokens", "2"]
    for _ in range(2):  # the second run gets the same answer, not "already holds a probe run"
        line = refused_probe(tmp_path, *args)
        assert (
            line.startswith("error: cannot reach the vLLM server at http://127.0.0.1:") and "Connection refused" in line
        )


def test_a_start_that_fails_after_the_run_was_made_takes_it_back(server, tmp_path):
    """The models check passes; the first completions request fails: nothing was sampled, nothing is left."""
    url, handler = server
    handler.routes["completions"] = (500, b'{"error": "engine dead"}')
    out = tmp_path / "run"
    args = [
        "probe",
        str(CHECKPOINT),
        "--out",
        str(out),
        "--prompts",
        str(prompts_file(tmp_path)),
        "--sampler",
        "vllm-server",
        "--url",
        url,
        "-n",
        "1",
        "--max-tokens",
        "2",
        "--top-k-logprobs",
        "1",
    ]
    for _ in range(2):
        assert (
            error_line(cli_no_engine(*args))
            == f'error: POST {url}/v1/completions failed with HTTP 500: {{"error": "engine dead"}}'
        )
        assert not out.exists()
    handler.routes["completions"] = (200, json.dumps({"choices": [GOOD_CHOICE]}).encode())
    r = cli_no_engine(*args)
    assert r.returncode == 0, r.stderr[-2000:]
    assert json.loads((out / "manifest.json").read_text())["status"] == "complete"


def test_an_unstarted_run_is_replaced_and_a_sampled_one_is_kept(tmp_path):
    from mismatchscope.probe.writer import RunDir

    run = RunDir(tmp_path / "run")
    run.open({"a": 1}, resume=False)
    run.write_manifest({"fingerprint": {"a": 1}, "status": "running"})  # what a killed start leaves
    manifest = run.open({"a": 2}, resume=False)  # another configuration, no --resume: replaced, not refused
    assert manifest == {"fingerprint": {"a": 2}, "status": "running", "shard_index": rundir.INDEX_VERSION}
    run.write_manifest(manifest)
    (run.samples / "round-00000.parquet").write_bytes(b"a sampled round")
    run.discard_unstarted()
    assert run.exists()  # a sampled round is worth a --resume
    with pytest.raises(UsageError, match="already holds a probe run"):
        run.open({"a": 2}, resume=False)
    (run.samples / "round-00000.parquet").unlink()
    run.discard_unstarted()
    assert sorted(p.name for p in run.path.iterdir()) == []


def test_a_recorder_run_as_out_is_refused_and_kept_whole(tmp_path):
    """A Recorder's run names its shards step-*.parquet and has no probe fingerprint: never an "unstarted" probe.

    Taking it for one would delete its manifest (the start a failed probe takes back).
    """
    import shutil

    from mismatchscope.probe.writer import RunDir, unstarted_run

    recorded = tmp_path / "recorded"
    shutil.copytree(REPO / "sample_data" / "runs" / "rl-default", recorded)
    before = {p.relative_to(recorded): p.read_bytes() for p in recorded.rglob("*") if p.is_file()}
    assert not unstarted_run(recorded)
    RunDir(recorded).discard_unstarted()
    expected = f"error: {recorded} holds a run that probe did not write (choose another --out)"
    assert error_line(cli_no_engine("probe", str(CHECKPOINT), "--out", str(recorded), "--sampler", "hf")) == expected
    golden = REPO / "tests" / "data" / "golden-probe"
    assert error_line(cli_no_engine("rescore", str(golden), "--out", str(recorded))) == expected
    assert {p.relative_to(recorded): p.read_bytes() for p in recorded.rglob("*") if p.is_file()} == before


def test_an_out_that_holds_other_files_is_refused_without_a_lock(tmp_path):
    other = tmp_path / "notes"
    other.mkdir()
    (other / "notes.txt").write_text("mine")
    assert error_line(
        cli_no_engine("probe", str(CHECKPOINT), "--out", str(other), "--prompts", str(prompts_file(tmp_path)))
    ) == (f"error: {other} exists and is not a probe run directory (choose an empty or new --out)")
    assert sorted(p.name for p in other.iterdir()) == ["notes.txt"]
    ckpt = checkpoint_copy(tmp_path)
    before = sorted(p.name for p in ckpt.iterdir())
    assert error_line(
        cli_no_engine("probe", str(ckpt), "--out", str(ckpt), "--prompts", str(prompts_file(tmp_path)))
    ) == (f"error: {ckpt} exists and is not a probe run directory (choose an empty or new --out)")
    assert sorted(p.name for p in ckpt.iterdir()) == before


def test_a_run_inside_another_run_is_refused(tmp_path):
    outer = tmp_path / "outer"
    (outer / "tokens").mkdir(parents=True)
    (outer / "manifest.json").write_text('{"status": "complete"}')
    inner = outer / "tokens" / "inner"
    r = cli_no_engine("probe", str(CHECKPOINT), "--out", str(inner), "--prompts", str(prompts_file(tmp_path)))
    assert error_line(r) == (
        f"error: --out {inner} is inside the run directory {outer} (give each run its own folder, outside other runs)"
    )
    assert not inner.exists()


def test_an_empty_out_is_refused(tmp_path):
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    (cwd / "mine.txt").write_text("x")
    for command in (["probe", str(CHECKPOINT)], ["rescore", str(tmp_path)]):
        r = cli_no_engine(*command, "--out", "", cwd=cwd)
        assert error_line(r) == "error: --out is an empty path (give --out a new folder, e.g. --out runs/new)"
        assert sorted(p.name for p in cwd.iterdir()) == ["mine.txt"]
