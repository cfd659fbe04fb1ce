"""Inputs built by hand for the tests, and the one-line error contract the refusal tests assert.

The hand-built token pairs (``ROWS``, ``one_sequence``, ``topk_lists``), files written around the schema
helpers (``raw_parquet``), runs (``write_run_dir``, ``recorded_run``), a gate's configuration, and the checks
every refusal shares: ``error_line`` (exit 2, one line, no traceback) and its looser ``one_line_error``.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from tests.helpers import REPO, cli, pairs

JUNIT_XSD = REPO / "tests" / "data" / "junit.xsd"


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
