"""A run knows its own contents: the shard index, and every reader holding the shards against it.

Each writer lists every shard it commits (name, rows, size) in
``DIR/index/``; a reader refuses a complete run whose shards disagree with
that list (one lost, one foreign, one truncated, one that is not a file) and
says how an incomplete run disagrees in its warning. ``gate`` refuses both. A folder of runs where one is
unfinished, and a manifest whose fields have the wrong type, are named as such.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from mismatchscope import rundir
from mismatchscope.errors import InputError
from mismatchscope.live import Recorder
from mismatchscope.reader import open_source
from mismatchscope.schema import write_table
from tests.helpers import cli, pairs
from tests.inputs import RECORDED_P, RECORDED_Q, error_line, one_line_error, recorded_run, write_run_dir


@pytest.fixture(scope="module")
def complete_run(tmp_path_factory) -> Path:
    return recorded_run(tmp_path_factory.mktemp("runs") / "run")


@pytest.fixture
def run(complete_run, tmp_path) -> Path:
    """A fresh copy of the complete run for one test to damage."""
    return Path(shutil.copytree(complete_run, tmp_path / "run"))


def _shards(run: Path) -> list[Path]:
    return sorted((run / "tokens").glob("*.parquet"))


def test_a_complete_run_lists_every_shard_with_its_rows_and_size(run):
    index = rundir.read_index(run, rundir.TOKENS)
    # 3 steps of a [2, 2] batch with no mask: 4 rows in each shard
    assert {name: e.rows for name, e in index.items()} == {f.name: 4 for f in _shards(run)}
    assert all(index[f.name].size == f.stat().st_size for f in _shards(run))
    assert json.loads((run / "manifest.json").read_text())["shard_index"] == rundir.INDEX_VERSION
    source = open_source(run)
    assert source.incomplete is None and source.notes == []


def test_a_lost_shard_is_an_error_and_gate_refuses_the_run(run):
    _shards(run)[1].unlink()
    with pytest.raises(InputError, match=r"1 shard\(s\) listed in the run's index are missing \(4 rows\)"):
        open_source(run)
    r = cli("report", str(run))
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "missing" in r.stderr, r.stderr
    g = cli("gate", str(run), "--absolute-only", "--limit", "tv_token_mean<=1")
    assert g.returncode == 2 and "missing" in g.stderr, g.stderr


def test_the_run_read_through_its_tokens_folder_is_checked_the_same(run):
    _shards(run)[0].unlink()
    with pytest.raises(InputError, match="missing"):
        open_source(run / "tokens")


def test_one_listed_shard_given_alone_reads_without_its_siblings(run):
    shard = _shards(run)[0]
    _shards(run)[2].unlink()  # not asked for: only the shards read are held against the index
    assert open_source(shard).files == [shard]


def test_a_foreign_shard_in_tokens_is_refused_not_merged(run):
    write_table(run / "tokens" / "extra.parquet", pairs([(99, 0, 0.5, 0.9)]))
    with pytest.raises(InputError, match=r"tokens/extra.parquet is not one of the run's shards"):
        open_source(run)
    r = cli("report", str(run))
    assert r.returncode == 2 and "not one of the run's shards" in r.stderr


def test_a_link_to_a_foreign_file_in_tokens_is_refused_naming_it(run, tmp_path):
    """A symlink in tokens/ to a Parquet file outside the run was once read as one of its shards (9,570 tokens
    instead of 9,370, and ``gate --absolute-only`` passed on it): it is named and refused, as a copy is."""
    foreign = write_table(tmp_path / "elsewhere" / "foreign.parquet", pairs([(99, 0, 0.5, 0.9)]))
    (run / "tokens" / "planted.parquet").symlink_to(foreign)
    with pytest.raises(InputError, match=r"tokens/planted.parquet is not one of the run's shards"):
        open_source(run)
    for command in ("report", "compare-masks"):
        assert "tokens/planted.parquet is not one of the run's shards" in error_line(cli(command, str(run)))
    g = cli("gate", str(run), "--absolute-only", "--limit", "tv_token_mean<=1", "--bootstrap", "0")
    assert g.returncode == 2 and "tokens/planted.parquet is not one of the run's shards" in g.stderr, g.stderr


def test_a_link_to_one_of_the_runs_own_shards_names_the_link(run):
    """A second name for a listed shard would read its tokens twice: the planted name is the one refused."""
    (run / "tokens" / "again.parquet").symlink_to(_shards(run)[0])
    with pytest.raises(InputError, match=r"tokens/again.parquet is not one of the run's shards"):
        open_source(run)


def test_a_truncated_or_replaced_shard_is_refused(run):
    shard = _shards(run)[0]
    data = shard.read_bytes()
    shard.write_bytes(data[: len(data) // 2])
    with pytest.raises(InputError, match="truncated"):
        open_source(run)
    write_table(shard, pairs([(0, 0, 0.5, 0.25)]))  # a whole Parquet file, but not the one the run wrote
    with pytest.raises(InputError, match=r"step-000000-rank-0000.parquet is \d[\d,]* bytes, the run's index says"):
        open_source(run)


def test_a_fifo_named_like_a_shard_is_refused_at_once(run):
    fifo = run / "tokens" / "step-000009-rank-0000.parquet"
    os.mkfifo(fifo)
    r = cli("report", str(run), timeout=60)  # a reader that opened it would wait forever
    assert r.returncode == 2 and "a FIFO, not a Parquet file" in r.stderr, r.stderr
    r = cli("report", str(fifo), timeout=60)
    assert r.returncode == 2 and "not a regular file" in r.stderr, r.stderr


def test_an_incomplete_run_says_how_it_disagrees_and_is_still_read(tmp_path):
    run = recorded_run(tmp_path / "run", close=False)
    write_table(run / "tokens" / "step-000003-rank-0000.parquet", pairs([(99, 0, 0.5, 0.9)]))  # committed, not listed
    source = open_source(run)
    assert "incomplete run" in source.incomplete
    assert "tokens/step-000003-rank-0000.parquet is not one of the run's shards" in source.incomplete
    assert len(source.files) == 4  # read, and said: never silently
    g = cli("gate", str(run), "--absolute-only", "--limit", "tv_token_mean<=1")
    assert g.returncode == 2 and "incomplete run" in g.stderr


def test_a_run_written_before_the_index_reads_as_before_with_a_note(tmp_path):
    run = tmp_path / "old"
    write_table(run / "tokens" / "part-00000.parquet", pairs([(0, 0, 0.5, 0.25), (0, 1, 0.5, 0.5)]))
    rundir.write_manifest(run, {"status": "complete"})
    source = open_source(run)
    assert source.incomplete is None
    assert len(source.notes) == 1 and "has no shard index" in source.notes[0]
    r = cli("report", str(run), "--format", "json")
    assert r.returncode == 0, r.stderr
    assert any("has no shard index" in w for w in json.loads(r.stdout)["warnings"])


def test_a_run_whose_manifest_keeps_an_index_but_lost_it_is_refused(run):
    shutil.rmtree(run / "index")
    with pytest.raises(InputError, match=r"its shard index \(index/tokens.jsonl\) is missing"):
        open_source(run)


def test_a_damaged_index_line_is_an_error_a_torn_last_line_is_not(tmp_path):
    run = tmp_path / "run"
    index = rundir.ShardIndex(run, rundir.TOKENS)
    shard = write_table(run / "tokens" / "part-0.parquet", pairs([(0, 0, 0.5, 0.25)]))
    index.commit(shard, 1)
    with index.path.open("ab") as fh:
        fh.write(b'{"shard": "part-1.par')  # a writer killed mid-append
    assert set(rundir.read_index(run, rundir.TOKENS)) == {"part-0.parquet"}
    shard1 = write_table(run / "tokens" / "part-1.parquet", pairs([(1, 0, 0.5, 0.25)]))
    rundir.ShardIndex(run, rundir.TOKENS).commit(shard1, 1)  # the next writer cuts the torn line off first
    assert index.path.read_text().count("\n") == 2
    assert {n: e.rows for n, e in rundir.read_index(run, rundir.TOKENS).items()} == {
        "part-0.parquet": 1,
        "part-1.parquet": 1,
    }
    index.path.write_text('{"shard": "part-0.parquet", "rows": "1", "bytes": 5}\n')
    with pytest.raises(InputError, match=r"tokens.jsonl:1: the shard index is damaged"):
        rundir.read_index(run, rundir.TOKENS)


def test_the_index_is_generic_over_the_folder(tmp_path):
    """``routes/`` (or any folder of shards) is held to its own index the same way."""
    run = tmp_path / "run"
    shard = write_table(run / "routes" / "part-00000.parquet", pairs([(0, 0, 0.5, 0.25), (0, 1, 0.5, 0.5)]))
    rundir.ShardIndex(run, "routes").commit(shard, 2)
    assert rundir.shard_problems(run, "routes", [shard], {shard: 2}, whole=True) == []
    assert rundir.shard_problems(run, "routes", [shard], {shard: 3}, whole=True) == [
        "routes/part-00000.parquet holds 3 rows, the run's index says 2 (replaced)"
    ]
    assert rundir.shard_problems(run, "routes", [], {}, whole=True) == [
        "1 shard(s) listed in the run's index are missing (2 rows), e.g. routes/part-00000.parquet"
    ]
    assert rundir.shard_problems(run, "other", [], {}, whole=True) is None


def test_a_resumed_recorder_adopts_a_shard_written_just_before_a_kill(tmp_path):
    run = recorded_run(tmp_path / "run", steps=2, close=False)
    index = rundir.ShardIndex(run, rundir.TOKENS, "rank-0000")
    lines = index.path.read_text().splitlines()
    index.path.write_text(lines[0] + "\n")  # killed between the second shard's rename and its index line
    with Recorder(run, rank=0, world_size=1, resume=True) as rec:
        rec.add(2, RECORDED_Q, RECORDED_P)
    source = open_source(run)  # complete, and every shard listed: the adopted one and the new one
    assert source.incomplete is None and len(source.files) == 3
    assert sum(pq.read_metadata(f).num_rows for f in source.files) == 12


def test_a_resumed_step_forgets_the_shards_it_replaces(tmp_path):
    run = recorded_run(tmp_path / "run", steps=2, close=False)
    with Recorder(run, rank=0, world_size=1, resume=True) as rec:
        rec.add(1, RECORDED_Q[:1], RECORDED_P[:1])  # step 1 again, one row: replaces the earlier shard of step 1
    index = rundir.read_index(run, rundir.TOKENS)
    assert {n: e.rows for n, e in index.items()} == {
        "step-000000-rank-0000.parquet": 4,
        "step-000001-rank-0000.parquet": 2,
    }
    assert open_source(run).incomplete is None


def test_an_import_lists_its_shards(tmp_path):
    from mismatchscope.importers import import_run

    src = tmp_path / "dump.jsonl"
    src.write_text(
        "\n".join(
            json.dumps({"sampler_logprobs": [-0.5, -1.0], "trainer_logprobs": [-0.6, -1.1], "token_ids": [1, 2]})
            for _ in range(3)
        )
        + "\n"
    )
    out = tmp_path / "imported"
    import_run("jsonl", src, out)
    index = rundir.read_index(out, rundir.TOKENS)
    assert {n: e.rows for n, e in index.items()} == {"part-00000.parquet": 6}  # 3 records of 2 tokens
    assert open_source(out).notes == []


# -- the Recorder writes only into its own run -----------------------------------------------

GOLDEN = Path(__file__).resolve().parent / "data" / "golden-probe"


# -- writers refuse what the readers would refuse, at the call or the line ---------------------


# -- routes/: the same index, written by import, probe and rescore ---------------------------------------------------


@pytest.fixture
def routed_import(tmp_path) -> Path:
    """An import with the sampler's routes (sequences 5 and 9: 6 + 4 = 10 route rows in one shard)."""
    from tests.importers.test_routes import CONFIG, vllm_lists, write_tokens

    write_tokens(tmp_path / "tokens.jsonl")
    (tmp_path / "config.json").write_text(json.dumps(CONFIG))
    (tmp_path / "routes.jsonl").write_text("".join(json.dumps(vllm_lists(s)) + "\n" for s in (5, 9)))
    out = tmp_path / "out"
    r = cli(
        "import", "jsonl", str(tmp_path / "tokens.jsonl"), "--out", str(out),
        "--routes", str(tmp_path / "routes.jsonl"), "--routes-format", "vllm", "--routes-config", str(tmp_path / "config.json"),
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    return out


def test_an_import_lists_its_route_shards(routed_import):
    shard = routed_import / "routes" / "part-00000.parquet"
    index = rundir.read_index(routed_import, rundir.ROUTES)
    assert index == {"part-00000.parquet": rundir.ShardEntry(10, shard.stat().st_size, rundir.footer_hash(shard))}
    r = cli("report", str(routed_import), "--format", "json")
    assert r.returncode == 0, r.stderr


@pytest.mark.parametrize(
    "damage, message",
    [
        ("truncate", r"routes/part-00000.parquet is [\d,]+ bytes, the run's index says [\d,]+ \(truncated"),
        ("remove", r"1 shard\(s\) listed in the run's index are missing \(10 rows\), e.g. routes/part-00000"),
        ("foreign", r"routes/extra.parquet is not one of the run's shards"),
        ("lose the index", r"its shard index \(index/routes.jsonl\) is missing"),
    ],
)
def test_a_damaged_routes_folder_is_refused_not_read_as_fewer_routes(routed_import, damage, message):
    from mismatchscope.reader import read_routes

    shard = routed_import / "routes" / "part-00000.parquet"
    if damage == "truncate":
        shard.write_bytes(shard.read_bytes()[:-100])
    elif damage == "remove":
        shard.unlink()
    elif damage == "foreign":
        shutil.copy(shard, shard.with_name("extra.parquet"))
    else:
        (routed_import / "index" / "routes.jsonl").unlink()
    with pytest.raises(InputError, match=message):
        read_routes(routed_import)
    r = cli("report", str(routed_import))
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and re.search(message, r.stderr), r.stderr


def test_routes_of_a_run_written_before_routes_were_indexed_read_as_before(routed_import):
    """``shard_index`` 1 listed tokens/ only: such a run's routes have no index and are read unchecked."""
    from mismatchscope.reader import read_routes

    (routed_import / "index" / "routes.jsonl").unlink()
    manifest = json.loads((routed_import / "manifest.json").read_text())
    rundir.write_manifest(routed_import, {**manifest, "shard_index": 1})
    assert read_routes(routed_import).num_rows == 10


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda m: m.update(config=[1]), "manifest.json: config is [1], not a table"),
        (
            lambda m: m["config"]["sampling"].update(temperature="hot"),
            "manifest.json: config.sampling.temperature is 'hot', not a number",
        ),
        (
            lambda m: m["config"]["checkpoint"].update(path=5),
            "manifest.json: config.checkpoint.path is 5, not a string",
        ),
    ],
)
def test_rescore_of_a_manifest_with_a_wrongly_typed_field(tmp_path, edit, message):
    run = Path(shutil.copytree(GOLDEN, tmp_path / "run"))
    manifest = json.loads((run / "manifest.json").read_text())
    edit(manifest)
    (run / "manifest.json").write_text(json.dumps(manifest))
    r = cli("rescore", str(run), "--out", str(tmp_path / "again"))
    one_line_error(r, message)
    assert not (tmp_path / "again").exists()


def test_a_folder_holding_an_unfinished_run(tmp_path, write):
    parent = tmp_path / "runs"
    run = write_run_dir(parent / "a", write, status="running")
    r = cli("gate", str(parent), "--absolute-only", "--bootstrap", "0", "--limit", "tv_token_mean<=1")
    expected = (
        f"{run} is an incomplete run (manifest.json status is 'running', not 'complete': killed, or still being "
        "written); read what is there: 1 shard(s), 5 rows"
    )
    assert error_line(r) == f"error: {expected} (wait for the run to finish, or point at complete shards)"
    r = cli("report", str(parent), "--format", "json")
    assert r.returncode == 0, r.stderr
    assert f"warning: {expected}" in " ".join(r.stderr.split())


def test_a_folder_of_runs_where_one_was_killed_before_its_first_shard(tmp_path, write):
    parent = tmp_path / "runs"
    write_run_dir(parent / "a" / "ok", write)
    killed = parent / "b" / "killed"
    (killed / "tokens").mkdir(parents=True)  # no manifest, no shard: killed at once
    r = cli("gate", str(parent), "--absolute-only", "--bootstrap", "0", "--limit", "tv_token_mean<=1")
    assert error_line(r) == (
        f"error: {killed} is an incomplete run (no readable manifest.json: killed, or still being "
        "written); read what is there: 1 shard(s), 5 rows (wait for the run to finish, or point at "
        "complete shards)"
    )
