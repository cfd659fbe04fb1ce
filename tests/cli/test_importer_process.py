"""``import`` as a process others kill and pipe: what a killed import leaves, its workers, a closed stdout.

The imports here run as real processes (a script that slows the JSONL
converter down, so there is time to kill it mid-way), killed by SIGKILL or by
the SIGTERM a CI timeout sends.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mismatchscope.importers import import_run
from mismatchscope.rundir import STAGING, is_run_dir

ROOT = Path(__file__).resolve().parents[2]
SLOW_IMPORT = """
import sys, time
from pathlib import Path
from mismatchscope.importers import generic, import_run

convert = generic.GenericJsonlImporter.convert

def slow(self, *args):
    time.sleep(0.05)
    return convert(self, *args)

generic.GenericJsonlImporter.convert = slow
import_run("jsonl", Path(sys.argv[1]), Path(sys.argv[2]), workers=int(sys.argv[3]), flush_tokens=4)
"""


def _dump(folder: Path, files: int = 40, records: int = 4) -> Path:
    """``files`` JSONL files (each a unit of its own, so shards are written as they are read)."""
    folder.mkdir()
    rec = {"token_ids": [5, 6], "sampler_logprobs": [-0.5, -0.6], "trainer_logprobs": [-0.4, -0.7]}
    for i in range(files):
        (folder / f"part-{i:03d}.jsonl").write_text((json.dumps(rec) + "\n") * records)
    return folder


def _start(src: Path, out: Path, workers: int) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    return subprocess.Popen([sys.executable, "-c", SLOW_IMPORT, str(src), str(out), str(workers)], env=env)


def _wait_for(what, timeout: float = 60.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        found = what()
        if found:
            return found
        time.sleep(0.05)
    raise AssertionError("timed out waiting")


def _children(pid: int) -> list[int]:
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            out.append(int(stat.parent.name))
    return out


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"  # a zombie is dead, only not reaped yet


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_an_import_killed_mid_way_leaves_no_run_and_the_next_one_succeeds(tmp_path):
    """Killed (SIGKILL) once shards are written: no tokens/ without a manifest in --out (what every reader would
    take for an incomplete run), only the hidden staging folder, which the next import into --out removes."""
    src, out = _dump(tmp_path / "dump"), tmp_path / "out"
    proc = _start(src, out, workers=0)
    try:
        _wait_for(lambda: list(out.rglob("*.parquet")))
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
    assert not (out / "tokens").exists() and not (out / "manifest.json").exists() and not is_run_dir(out)
    assert (out / STAGING).is_dir()
    result = import_run("jsonl", src, out)
    assert result.tokens_written == 40 * 4 * 2 and is_run_dir(out) and not (out / STAGING).exists()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="workers are forked and read from /proc on Linux")
@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM])
def test_parse_workers_die_with_the_import(tmp_path, sig):
    """Two parse workers, busy for seconds more; the import killed: they die with it (once they went on,
    re-parented, for minutes, holding a caller's pipes open)."""
    src, out = _dump(tmp_path / "dump", files=60), tmp_path / "out"
    proc = _start(src, out, workers=2)
    try:
        workers = _wait_for(lambda: len(_children(proc.pid)) >= 2 and _children(proc.pid))
    finally:
        proc.send_signal(sig)
        proc.wait(30)
    end = time.monotonic() + 10
    while time.monotonic() < end and any(_alive(w) for w in workers):
        time.sleep(0.05)
    assert not any(_alive(w) for w in workers)


def test_import_into_a_closed_pipe_still_succeeds(tmp_path):
    """``import ... | head -0``: the run is written whole, so the import does not fail for the summary it could
    not print (it once exited 2)."""
    src, out = _dump(tmp_path / "dump", files=1), tmp_path / "out"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    read, write = os.pipe()
    os.close(read)  # head -0: gone before the first byte
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "mismatchscope", "import", "jsonl", str(src), "--out", str(out)],
            stdout=write,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            timeout=300,
        )
    finally:
        os.close(write)
    assert proc.returncode == 0, proc.stderr
    assert "stdout was closed before the summary was written; the import is complete in" in proc.stderr
    assert json.loads((out / "manifest.json").read_text())["status"] == "complete"
