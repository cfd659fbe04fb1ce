"""A failed command leaves nothing half-written behind.

``import`` cannot resume, so any failure after it created its output (a full
disk, refused routes, an input error, an interrupt) takes back everything it
wrote there: no ``.lock``, no index naming a removed shard, no empty
``tokens/`` for a later command to mistake for a run. A full disk is made the
way the project's other full-device tests cannot reach a directory: the
Parquet writer fails with ENOSPC through its own interface, after writing part
of its file. The Recorder, which resumes, removes the temporary files a killed
writer of its rank left.
"""

from __future__ import annotations

import errno
import os
import shutil

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from mismatchscope import rundir
from mismatchscope.errors import ImportFormatError
from mismatchscope.importers import import_run
from mismatchscope.live import Recorder
from tests.helpers import cli
from tests.importers.test_routes import run as import_with_routes
from tests.importers.test_routes import slime, write_tokens
from tests.inputs import error_line


def _full_disk(monkeypatch, after: int = 0, error: type[BaseException] | None = None):
    """The Parquet writer succeeds ``after`` times, then writes half a file and fails as a full disk does."""
    real = pq.write_table
    calls = {"n": 0}

    def write_table(table, where, **options):
        calls["n"] += 1
        if calls["n"] <= after:
            return real(table, where, **options)
        with open(where, "wb") as f:
            f.write(b"PAR1" + b"\0" * 100)
        if error is not None:
            raise error()
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(pq, "write_table", write_table)


@pytest.fixture
def tokens(tmp_path):
    write_tokens(tmp_path / "tokens.jsonl")
    return tmp_path / "tokens.jsonl"


def test_an_import_on_a_full_disk_says_so_and_leaves_nothing(tmp_path, tokens, monkeypatch):
    _full_disk(monkeypatch)
    out = tmp_path / "out"
    assert error_line(cli("import", "jsonl", str(tokens), "--out", str(out)), after_work=True) == (
        "error: No space left on device (free space on the device, or write elsewhere)"
    )
    assert not out.exists()


def test_a_full_disk_after_a_shard_was_committed_takes_the_shard_and_its_index_back(tmp_path, tokens, monkeypatch):
    _full_disk(monkeypatch, after=1)  # the first shard (one sequence) is written and indexed, the second fails
    out = tmp_path / "out"
    with pytest.raises(OSError, match="No space left"):
        import_run("jsonl", tokens, out, flush_tokens=4)
    assert not out.exists()


def test_an_interrupted_import_leaves_nothing(tmp_path, tokens, monkeypatch):
    _full_disk(monkeypatch, error=KeyboardInterrupt)
    out = tmp_path / "out"
    r = cli("import", "jsonl", str(tokens), "--out", str(out))
    assert r.returncode == 130, r.stderr
    assert not out.exists()


def test_a_failed_import_into_a_folder_of_the_users_keeps_the_folder_and_its_files(tmp_path, tokens, monkeypatch):
    out = tmp_path / "out"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    _full_disk(monkeypatch)
    error_line(cli("import", "jsonl", str(tokens), "--out", str(out)), after_work=True)
    assert sorted(p.name for p in out.iterdir()) == ["notes.txt"]


def test_refused_routes_take_back_the_tokens_and_the_same_out_takes_a_good_import(tmp_path):
    write_tokens(tmp_path / "tokens.jsonl")
    (tmp_path / "config.json").write_text(
        '{"model_type": "qwen3_moe", "num_hidden_layers": 4, "mlp_only_layers": [0], "num_experts": 16, '
        '"num_experts_per_tok": 2}'
    )
    with pytest.raises(ImportFormatError, match="sequence_id 6 is not in the imported run"):
        import_with_routes(tmp_path, "slime", [{**slime(5), "sequence_id": 6}])  # checked after the tokens
    out = tmp_path / "out"
    assert not out.exists()  # no .lock, no index naming a removed shard, no empty tokens/
    import_with_routes(tmp_path, "slime", [slime(5), slime(9)])  # the same --out takes a good import
    assert rundir.completion(out) == rundir.Completion(True, "")


def test_a_resumed_recorder_removes_the_temporary_files_its_killed_writer_left(tmp_path):
    out = tmp_path / "run"
    with Recorder(out) as rec:
        rec.add(0, [[-0.5, -0.25]], [[-0.5, -0.5]])
    left = [
        out / "tokens" / ".step-000001-rank-0000.parquet.4242.tmp",
        out / "tokens" / ".step-000001-rank-0000-part-0001.parquet.4242.tmp",
        out / "ranks" / ".rank-0000.json.4242.tmp",
        out / ".manifest.json.4242.tmp",
    ]
    other_rank = out / "tokens" / ".step-000001-rank-0001.parquet.77.tmp"  # a live writer of rank 1 may own it
    for f in [*left, other_rank]:
        f.write_bytes(b"PAR1 half a shard")
    with Recorder(out, resume=True) as rec:
        assert not any(f.exists() for f in left)
        assert other_rank.exists()
        rec.add(1, [[-0.5]], [[-0.5]])
    other_rank.unlink()
    r = cli("report", str(out), "--format", "json")
    assert r.returncode == 0, r.stderr


def test_a_recorder_run_with_routes_resumes_and_cleans_its_route_temporaries(tmp_path):
    from tests.live.test_routes import LQ, META, SAMPLER, TRAINER

    out = tmp_path / "run"
    with Recorder(out, routing=META) as rec:
        rec.add(0, LQ, LQ, sampler_experts=SAMPLER, trainer_experts=TRAINER)
    half = out / "routes" / ".step-000001-rank-0000.parquet.4242.tmp"
    half.write_bytes(b"PAR1")
    with Recorder(out, routing=META, resume=True) as rec:  # its routes/ and index/routes.* are the run's own
        assert not half.exists()
        rec.add(1, LQ, LQ, sampler_experts=SAMPLER, trainer_experts=TRAINER)
    assert sorted(p.name for p in (out / "routes").iterdir()) == [
        "step-000000-rank-0000.parquet",
        "step-000001-rank-0000.parquet",
    ]


def test_a_plots_folder_that_fails_midway_keeps_none_of_the_new_pictures(tmp_path):
    """The third picture cannot be written (a folder holds its name): the two written before it go again."""
    from tests.helpers import pairs

    data = tmp_path / "pairs.parquet"
    pq.write_table(pa.Table.from_pydict(pairs([(1, 0, 0.5, 0.6), (1, 1, 0.8, 0.75), (2, 0, 0.3, 0.4)])), data)
    plots = tmp_path / "plots"
    ok = cli("report", str(data), "--plots", str(plots))
    assert ok.returncode == 0, ok.stderr
    names = sorted(p.name for p in plots.iterdir())
    assert len(names) >= 3
    shutil.rmtree(plots)
    (plots / names[2]).mkdir(parents=True)  # in the way of the third picture
    r = cli("report", str(data), "--plots", str(plots))
    assert error_line(r, after_work=True).startswith(f"error: --plots {plots / names[2]}: cannot write")
    assert [p.name for p in plots.iterdir()] == [names[2]]
