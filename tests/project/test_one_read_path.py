"""Every command reads token pairs and routes one way, and a run knows its bytes.

``certify`` once read shards with its own ``read_table`` and a cast: a file
``report`` refuses was certified, fractional ids ended in a traceback, and a
damaged page got a verdict. Here the same hostile file goes to both commands
and must give the same one line; and a real run (the golden probe run, written
again the way runs are written now: page checksums, footer hash in its index)
with one byte flipped inside a dictionary page fails on every command that
reads it, naming the shard.
"""

from __future__ import annotations

import json
import shutil

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from mismatchscope import rundir
from mismatchscope.analysis.summaries import add_summaries
from mismatchscope.routing.layout import ROUTES
from mismatchscope.schema import WRITE_OPTIONS
from tests.certify.runs import make_run, route_rows, routes_of
from tests.helpers import REPO, cli
from tests.inputs import error_line

GOLDEN = REPO / "tests" / "data" / "golden-probe"


def _pairs(**changes) -> dict:
    cols = {
        "sequence_id": pa.array([1] * 4, pa.int64()),
        "position": pa.array(range(4), pa.int32()),
        "token_id": pa.array([7, 8, 9, 10], pa.int64()),
        "sampler_logprob": pa.array([-0.5] * 4),
        "trainer_logprob": pa.array([-0.5] * 4),
    }
    cols.update(changes)
    return cols


HOSTILE = {
    "positive logprob": {"sampler_logprob": pa.array([-0.5, 0.5, -0.5, -0.5])},
    "logprobs as text": {"sampler_logprob": pa.array(["-0.5"] * 4)},
    "logprobs as booleans": {"trainer_logprob": pa.array([False] * 4)},
    "position -1": {"position": pa.array([0, 1, -1, 3], pa.int32())},
    "fractional token ids": {"token_id": pa.array([7.5, 8.0, 9.0, 10.0])},
    "list-typed logprobs": {"sampler_logprob": pa.array([[-0.5]] * 4)},
    "a token twice": {"position": pa.array([0, 1, 1, 3], pa.int32())},
}


@pytest.mark.parametrize("case", HOSTILE)
def test_certify_refuses_what_report_refuses_with_the_same_line(tmp_path, case):
    path = tmp_path / "t.parquet"
    pq.write_table(pa.table(_pairs(**HOSTILE[case])), path)
    line = error_line(cli("report", str(path)))
    assert error_line(cli("certify", str(path))) == line


def test_certify_refuses_a_routes_shard_with_a_duplicated_row(tmp_path):
    run = routes_of(make_run(tmp_path / "run"), route_rows(), route_rows())
    shard = run / ROUTES / "part-00000.parquet"
    table = pq.read_table(shard)
    pq.write_table(pa.concat_tables([table, table.slice(3, 1)]), shard)  # one route row written twice
    line = error_line(cli("certify", str(run)))
    assert line.startswith(f"error: {run / ROUTES}: sequence 0 input position 3 has more than one route row")
    assert error_line(cli("report", str(run))) == line


# -- a run that knows its bytes -----------------------------------------------------------------


def _current_golden(tmp_path):
    """The golden probe run, its shard written again as every writer writes shards now, and indexed."""
    run = tmp_path / "golden"
    shutil.copytree(GOLDEN, run)
    (shard,) = (run / "tokens").glob("*.parquet")
    table = add_summaries(pq.read_table(shard))
    pq.write_table(table, shard, **WRITE_OPTIONS)
    rundir.ShardIndex(run, rundir.TOKENS).commit(shard, table.num_rows)
    rundir.write_manifest(run, {**(rundir.read_manifest(run) or {}), "shard_index": rundir.INDEX_VERSION})
    return run, shard


def _flip(path, offset):
    data = bytearray(path.read_bytes())
    data[offset] ^= 0x10
    path.write_bytes(bytes(data))


def test_a_run_written_now_reads_as_before_and_without_a_note(tmp_path):
    run, _ = _current_golden(tmp_path)
    r = cli("report", str(run), "--format", "json")
    assert r.returncode == 0 and r.stderr == "", r.stderr
    old = json.loads(cli("report", str(GOLDEN), "--format", "json").stdout)["metrics"]
    now = json.loads(r.stdout)["metrics"]
    # same values: the checksums and the top-k summaries are new; the top-k means are now of the float32
    # values the summaries keep, so they agree to float32's precision
    for name in ("tv_topk_lower_mean", "kl_topk_lower_mean"):
        assert now.pop(name) == pytest.approx(old.pop(name), rel=1e-6)
    assert now == old


def test_a_flipped_byte_in_a_dictionary_page_fails_every_command(tmp_path):
    run, shard = _current_golden(tmp_path)
    chunk = pq.ParquetFile(shard).metadata.row_group(0).column(3)  # sampler_logprob
    assert chunk.path_in_schema == "sampler_logprob" and chunk.has_dictionary_page
    # inside the dictionary page, past its header: the zstd frame still decodes, to other logprobs
    _flip(shard, chunk.dictionary_page_offset + (chunk.data_page_offset - chunk.dictionary_page_offset) // 2)
    unverified = pq.ParquetFile(shard, page_checksum_verification=False).read(columns=["sampler_logprob"])
    assert unverified.column(0) != pq.read_table(GOLDEN / "tokens", columns=["sampler_logprob"]).column(0)
    for args in (["report"], ["gate", "--baseline", str(GOLDEN)], ["certify"], ["compare-masks"]):
        line = error_line(cli(*args, str(run)))
        assert line.startswith(f"error: {shard}: damaged in row group 0: a page's checksum does not match"), args


def test_a_changed_footer_fails_naming_the_shard(tmp_path):
    """A statistics byte of the footer: no page CRC covers it; the footer hash in the index does."""
    run, shard = _current_golden(tmp_path)
    size = shard.stat().st_size
    footer = int.from_bytes(shard.read_bytes()[-8:-4], "little")
    _flip(shard, size - 8 - footer // 2)
    for command in ("report", "certify"):
        line = error_line(cli(command, str(run)))
        assert line.startswith(f"error: {shard}: damaged: its Parquet footer"), line


def test_a_footer_byte_that_pyarrow_cannot_decode_is_one_line_not_a_traceback(tmp_path):
    """Some footer bytes make pyarrow raise ArrowNotImplementedError (an integer type of 128 or 4 bits in the
    Arrow schema it stores in the footer), which once escaped as an internal error, exit 3."""
    run = tmp_path / "zero"
    shutil.copytree(REPO / "sample_data" / "runs" / "rl-zero", run)
    shard = sorted((run / "tokens").glob("*.parquet"))[2]
    original = shard.read_bytes()
    for offset in range(len(original) - 1, 0, -1):  # the footer lies at the end: search it from there
        _flip(shard, offset)
        try:
            pq.read_metadata(shard)
        except pa.ArrowNotImplementedError:
            break
        except Exception:
            pass
        shard.write_bytes(original)
    else:
        pytest.fail("no footer byte makes pyarrow raise ArrowNotImplementedError")
    for args in (["certify"], ["report"], ["timeline", "--x", "step"]):
        line = error_line(cli(*args, str(run)))
        assert line.startswith(f"error: {shard}: not a Parquet file, or truncated ("), (args, line)


def test_a_page_header_that_hides_its_page_fails_rather_than_dropping_the_rows(tmp_path):
    """A data page's header is covered by no page CRC. Its first field is the page type (thrift compact: 0x15,
    then 0x00 for DATA_PAGE); flipping 0x10 makes it type 8, which pyarrow skips as unknown: the shard once
    decoded 0 of its rows and every command went on with the other shards (report: 1,863 tokens, not 2,141)."""
    run = tmp_path / "default"
    shutil.copytree(REPO / "sample_data" / "runs" / "rl-default", run)
    shard = sorted((run / "tokens").glob("*.parquet"))[2]
    chunk = pq.ParquetFile(shard).metadata.row_group(0).column(0)
    assert chunk.path_in_schema == "sequence_id"
    assert shard.read_bytes()[chunk.data_page_offset : chunk.data_page_offset + 2] == b"\x15\x00"
    _flip(shard, chunk.data_page_offset + 1)
    for args in (["report"], ["certify"], ["timeline", "--x", "step"]):
        line = error_line(cli(*args, str(run)))
        assert line.startswith(
            f"error: {shard}: unreadable Parquet data in row group 0 (0 rows decode where the footer lists 278)"
        ), (args, line)


def test_an_index_without_hashes_reads_with_a_note(tmp_path):
    run, shard = _current_golden(tmp_path)
    index = run / "index" / "tokens.jsonl"
    entry = json.loads(index.read_text())
    del entry["footer"], entry["hash"]
    index.write_text(json.dumps(entry) + "\n")
    r = cli("report", str(run), "--format", "json")
    assert r.returncode == 0, r.stderr
    assert r.stderr.strip().splitlines() == [
        f"warning: {run} was written before runs recorded their shards' checksums: a shard damaged in place is "
        "not detected"
    ]


def test_route_shards_are_written_with_page_checksums(tmp_path):
    """A damaged route page is refused by certify like a token page (every writer uses the same options)."""
    run = routes_of(make_run(tmp_path / "run"), route_rows(), route_rows())
    shard = run / ROUTES / "part-00000.parquet"
    pq.write_table(pq.read_table(shard), shard, **WRITE_OPTIONS)
    chunk = pq.ParquetFile(shard).metadata.row_group(0).column(0)  # sequence_id
    _flip(shard, chunk.data_page_offset + chunk.total_compressed_size - 2)
    line = error_line(cli("certify", str(run)))
    assert line.startswith(f"error: {shard}: damaged in row group 0"), line
