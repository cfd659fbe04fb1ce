"""The reader: what a token-pair file may hold, and how each hostile file is refused in one line naming the
cause or read to the right numbers.

Every hostile case here once crashed (exit 3), or printed a number that was silently wrong: metadata that is
not JSON or cannot be printed, damaged pages, unsigned or fractional ids, top-k lists of the wrong kind or
holding no logprobs, ``--column`` mappings that read a column twice. Each column's kind comes from the schema:
every integer column comes back as int64, and a file holding floats in one is refused, whichever column it is.
Many cases start from ``tests.helpers.one_sequence``: five tokens of one sequence with log q = -0.5 and
log p = -0.6, so |log p - log q| = 0.1 on every token.
"""

from __future__ import annotations

import json
import math
import os
import re

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from mismatchscope.errors import InputError
from mismatchscope.reader import Hygiene, iter_batches, open_source
from mismatchscope.schema import COLUMNS, METADATA_KEY, SUMMARY_NAMES
from tests.helpers import cli, pairs
from tests.inputs import ROWS, error_line, one_line_error, one_sequence, raw_parquet, report_json, topk_lists

# ---- file metadata -------------------------------------------------------------------------------


def test_a_lone_surrogate_in_the_metadata_is_printed_as_its_escape(tmp_path):
    """JSON may spell an unpaired surrogate; UTF-8 cannot encode it. Every output shows the 6 characters \\ud800."""
    raw = b'{"schema_version": 1, "sampler": {"kind": "\\ud800"}, "trainer": {"\\udfff": "x"}}'
    path = raw_parquet(tmp_path / "s.parquet", one_sequence(), {METADATA_KEY: raw})
    payload = report_json(path)
    assert payload["run"]["sampler"] == {"kind": "\\ud800"}
    assert payload["run"]["trainer"] == {"\\udfff": "x"}
    table = cli("report", str(path))
    assert table.returncode == 0 and table.stderr == "", table.stderr
    assert "\\ud800" in table.stdout
    assert cli("compare-masks", str(path)).returncode == 0
    page = tmp_path / "page.html"
    r = cli("report", str(path), "--html", str(page))
    assert r.returncode == 0, r.stderr
    assert "\\ud800" in page.read_text(encoding="utf-8")


def test_printable_keeps_good_text_and_escapes_only_lone_surrogates():
    from mismatchscope.reader import printable

    # a surrogate pair decoded by json is one astral character: kept; the lone one becomes its escape text
    meta = json.loads('{"a": ["\\ud83d\\ude00", "x\\ud800y"], "caf\\u00e9": 1}')
    assert printable(meta) == {"a": ["\U0001f600", "x\\ud800y"], "café": 1}


def test_metadata_that_is_json_null_is_refused(tmp_path):
    path = raw_parquet(tmp_path / "n.parquet", one_sequence(), {METADATA_KEY: b"null"})
    assert error_line(cli("report", str(path))) == (
        f"error: {path}: the 'mismatchscope' file metadata is a JSON null, not an object (the file was not written by "
        "mismatchscope; rewrite it without that metadata key)"
    )


def test_metadata_nested_too_deeply_to_walk_names_the_file(tmp_path):
    """900 levels parse (json's C parser) but are too deep to walk in Python: the same message as deeper nesting."""
    raw = b'{"schema_version": 1, "sampler": ' + b'{"a": ' * 900 + b"1" + b"}" * 900 + b"}"
    path = raw_parquet(tmp_path / "d.parquet", one_sequence(), {METADATA_KEY: raw})
    assert error_line(cli("report", str(path))) == (
        f"error: {path}: the 'mismatchscope' file metadata is nested too deeply (the file was not written by "
        "mismatchscope, or was damaged; rewrite it without that metadata key)"
    )


def test_a_file_name_that_is_not_utf8_is_refused(tmp_path):
    import os

    raw_parquet(tmp_path / "good.parquet", one_sequence())
    bad = os.path.join(os.fsencode(tmp_path), b"\xffbad.parquet")
    os.link(os.fsencode(tmp_path / "good.parquet"), bad)
    # the byte 0xff reaches Python as the surrogate escape U+DCFF, printed as its escape text
    assert error_line(cli("report", os.fsdecode(bad))) == (
        f"error: {tmp_path}/\\udcffbad.parquet: the file name is not valid UTF-8 (rename the file)"
    )


# ---- Parquet integrity -----------------------------------------------------------------------------


def _crc_file(tmp_path):
    """200 tokens, uncompressed, with page checksums; |log p - log q| = 0.1 everywhere."""
    n = 200
    return raw_parquet(
        tmp_path / "crc.parquet",
        one_sequence(n, sequence_id=[i // 20 for i in range(n)], position=[i % 20 for i in range(n)]),
        compression="none",
        use_dictionary=False,
        write_page_checksum=True,
    )


def test_a_file_with_sound_page_checksums_reads(tmp_path):
    payload = report_json(_crc_file(tmp_path))
    assert payload["tokens"] == 200
    assert payload["metrics"]["abs_logprob_diff_mean"] == pytest.approx(0.1)


def test_a_data_page_that_fails_its_checksum_is_refused(tmp_path):
    path = _crc_file(tmp_path)
    chunk = pq.ParquetFile(path).metadata.row_group(0).column(3)  # sampler_logprob
    data = bytearray(path.read_bytes())
    data[chunk.data_page_offset + chunk.total_compressed_size - 1] ^= 0x10  # the last value's sign/exponent byte
    path.write_bytes(bytes(data))
    # without the check pyarrow decodes the flipped value and the mean moves; with it the page is refused
    assert error_line(cli("report", str(path))) == (
        f"error: {path}: damaged in row group 0: a page's checksum does not match its bytes (could not verify page "
        "integrity, CRC checksum verification failed for page_ordinal 0) (the file changed after it was written; "
        "restore it from a copy or write it again)"
    )


def _flip_in_footer(path, name: bytes) -> None:
    """Flip the high bit of the third byte of the footer's first spelling of ``name`` (the schema's column name):
    the name is no longer UTF-8, and no page checksum covers the footer."""
    data = bytearray(path.read_bytes())
    length = int.from_bytes(data[-8:-4], "little")
    start = len(data) - 8 - length
    i = data.index(name, start)
    data[i + 2] ^= 0x80
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("command", ["report", "doctor", "certify", "compare-masks", "timeline", "gate"])
def test_a_column_name_that_is_not_utf8_in_the_footer_is_the_shard_error(tmp_path, command):
    """A byte flip in a footer's column name once escaped as a UnicodeDecodeError traceback (exit 3)."""
    path = raw_parquet(tmp_path / "f.parquet", {**pairs(ROWS), "step": [0, 0, 1, 1, 1]})
    _flip_in_footer(path, b"sampler_logprob")
    args = ["--absolute-only", "--bootstrap", "0"] if command == "gate" else []
    line = error_line(cli(command, str(path), *args))
    assert line.startswith(
        f"error: {path}: not a Parquet file, or truncated (a column name in its footer is not valid UTF-8"
    ), line


# ---- values ----------------------------------------------------------------------------------------


def test_the_sentinel_in_a_float16_column_is_the_sentinel(tmp_path):
    """float16 cannot hold -9999 and stores -10000; read as the -inf sentinel, the token is dropped:
    4 tokens left, each with |log p - log q| = |-0.6 - (-0.5)| = 0.1 (not 9999.4)."""
    path = raw_parquet(
        tmp_path / "h.parquet", one_sequence(sampler_logprob=pa.array([-0.5, -9999.0, -0.5, -0.5, -0.5], pa.float16()))
    )
    assert pq.read_table(path).column("sampler_logprob").to_pylist()[1] == -10000.0
    r = cli("report", str(path), "--format", "json")
    assert r.returncode == 0 and r.stderr.splitlines() == [
        "warning: 1 of 5 tokens have a non-finite logprob (NaN or inf, 1 of them -9999 sentinels read as -inf) and were "
        "excluded from every number below"
    ]
    payload = json.loads(r.stdout)
    assert payload["tokens"] == 4
    assert payload["metrics"]["abs_logprob_diff_max"] == pytest.approx(0.1)


# ---- integer ranges ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "column, values, shown",
    [
        ("sequence_id", pa.array([2**64 - 1] * 2, pa.uint64()), 2**64 - 1),
        ("token_id", pa.array([2**63, 5], pa.uint64()), 2**63),
    ],
)
def test_unsigned_ids_beyond_int64_are_refused(tmp_path, column, values, shown):
    """2^64 - 1 cast to int64 is -1: report --worst printed sequence -1."""
    path = raw_parquet(tmp_path / "u.parquet", one_sequence(2, **{column: values}))
    assert error_line(cli("report", str(path), "--worst", "1")) == (
        f"error: {path}: column {column!r} holds {shown}, above the largest int64 (2^63 - 1) the format stores "
        "(ids are signed 64-bit integers; renumber them, or write the column as int64)"
    )


def test_unsigned_ids_within_int64_are_read(tmp_path):
    path = raw_parquet(
        tmp_path / "u.parquet",
        one_sequence(2, sequence_id=pa.array([2**63 - 1] * 2, pa.uint64()), token_id=pa.array([3, 4], pa.uint64())),
    )
    assert report_json(path)["tokens"] == 2


def test_unsigned_topk_ids_beyond_int64_are_refused(tmp_path):
    path = raw_parquet(
        tmp_path / "u.parquet",
        one_sequence(2, **topk_lists(ids=pa.array([[2**64 - 1, 9], [8, 3]], pa.list_(pa.uint64())))),
    )
    assert error_line(cli("report", str(path))) == (
        f"error: {path}: column 'sampler_topk_ids' holds {2**64 - 1}, above the largest int64 (2^63 - 1) the format "
        "stores (ids are signed 64-bit integers; renumber them, or write the column as int64)"
    )


# ---- top-k lists ---------------------------------------------------------------------------------


def test_fixed_size_topk_lists_read_like_lists(tmp_path):
    """pa.list_(t, 2) columns give the numbers of the same lists written as plain lists."""
    plain = raw_parquet(tmp_path / "plain.parquet", one_sequence(2, **topk_lists(trainer_ids=[[7, 9], [8, 5]])))
    fixed = raw_parquet(
        tmp_path / "fixed.parquet",
        one_sequence(
            2,
            **{
                name: pa.array(values, pa.list_(pa.int64() if name.endswith("ids") else pa.float64(), 2))
                for name, values in topk_lists(trainer_ids=[[7, 9], [8, 5]]).items()
            },
        ),
    )
    want, got = report_json(plain), report_json(fixed)
    assert got["topk"] == want["topk"] and got["score_centering"] == want["score_centering"]
    assert got["score_centering"]["topk_overlap"]["mean"] == pytest.approx(0.75)  # rows: 2/2 and 1/2


@pytest.mark.parametrize(
    "columns, message",
    [
        (
            topk_lists(ids=[[7, None], [8, 3]]),
            "column 'sampler_topk_ids' has 1 null id(s) inside its lists (a top-k list holds "
            "one id per listed token; write each list whole)",
        ),
        (
            topk_lists(trainer_ids=[[7, 9], [None, 3]]),
            "column 'trainer_topk_ids' has 1 null id(s) inside its lists (a top-k list "
            "holds one id per listed token; write each list whole)",
        ),
        (
            topk_lists(logprobs=[[-0.7, None], [-0.7, -1.0]]),
            "column 'sampler_topk_logprobs' has 1 null logprob(s) inside its "
            "lists (a top-k list holds one logprob per listed token; write each "
            "list whole)",
        ),
    ],
)
def test_bad_topk_lists_are_refused(tmp_path, columns, message):
    path = raw_parquet(tmp_path / "t.parquet", one_sequence(2, **columns))
    assert error_line(cli("report", str(path))) == f"error: {path}: {message}"


def test_trainer_topk_logprobs_feed_no_number_and_are_not_read(tmp_path):
    """The trainer's own top-k logprobs enter no statistic: a file with garbage there (a positive value, a NaN,
    a list one short) reports exactly what the same file without the column reports."""
    cols = one_sequence(2, **topk_lists(trainer_ids=[[7, 9], [8, 3]], trainer_logprobs=[[3.0], [-0.6, math.nan]]))
    garbage = raw_parquet(tmp_path / "a.parquet", cols)
    del cols["trainer_topk_logprobs"]
    without = raw_parquet(tmp_path / "b.parquet", cols)
    assert report_json(garbage)["score_centering"] == report_json(without)["score_centering"]
    assert report_json(garbage)["score_centering"]["topk_overlap"]["mean"] == 1.0  # both rows list the same ids


def test_surrogate_sanitising_leaves_numbers_alone():
    """printable() walks only containers and strings: numbers, None and booleans come back as they are."""
    from mismatchscope.reader import printable

    values = {"n": [1, 2.5, None, True, np.float64(3.0)]}
    assert printable(values) == values


# ---- ratios beyond float64 -----------------------------------------------------------------------


def test_a_mapping_onto_a_column_the_file_already_reads_is_refused(write):
    path = write(pairs(ROWS))
    r = cli("report", str(path), "--column", "sampler_logprob=trainer_logprob")
    assert error_line(r) == (
        f"error: {path}: --column sampler_logprob=trainer_logprob makes sampler_logprob and trainer_logprob both read "
        "the file's column 'trainer_logprob' (also map the file's own trainer_logprob to another name, or map "
        "sampler_logprob to another column)"
    )


def test_a_swap_of_two_columns_is_allowed(write):
    path = write(pairs(ROWS))
    r = cli(
        "report",
        str(path),
        "--column",
        "sampler_logprob=trainer_logprob",
        "--column",
        "trainer_logprob=sampler_logprob",
        "--format",
        "json",
    )
    assert r.returncode == 0, r.stderr


def test_two_targets_on_one_source_are_refused(write):
    cols = pairs(ROWS)
    cols["lp"] = cols.pop("sampler_logprob")
    path = raw_parquet(write(pairs(ROWS)).with_name("lp.parquet"), cols)
    r = cli("report", str(path), "--column", "sampler_logprob=lp", "--column", "trainer_logprob=lp")
    assert error_line(r) == (
        "error: --column 'trainer_logprob=lp': 'lp' is already read as sampler_logprob "
        "(map each column of the file to one mismatchscope column)"
    )


def test_one_target_mapped_twice_is_refused(write):
    path = write(pairs(ROWS))
    r = cli("compare-masks", str(path), "-c", "advantage=a", "-c", "advantage=b")
    assert error_line(r) == "error: --column 'advantage=b': advantage is already mapped to 'a' (map each column once)"


@pytest.mark.parametrize("target", ["sampler_logprob", "advantage"])
def test_a_mapping_from_a_missing_column_is_refused(write, target):
    path = write(pairs(ROWS))
    r = cli("compare-masks", str(path), "--column", f"{target}=nope")
    assert error_line(r) == (
        f"error: {path}: --column {target}=nope: the file has no column 'nope'; it has: position, sampler_logprob, "
        "sequence_id, token_id, trainer_logprob (check the spelling of the name in the file)"
    )


@pytest.mark.parametrize(
    "raw, reason",
    [
        (b"{not json", "is not valid JSON"),
        (b"\xff\xfe", "is not valid JSON"),
        (b"[" * 100_000 + b"]" * 100_000, "is nested too deeply"),
    ],
)
def test_metadata_that_is_not_json_is_refused(tmp_path, raw, reason):
    path = raw_parquet(tmp_path / "m.parquet", pairs(ROWS), {METADATA_KEY: raw})
    assert error_line(cli("report", str(path))) == (
        f"error: {path}: the 'mismatchscope' file metadata {reason} (the file was not written by mismatchscope, or was "
        "damaged; rewrite it without that metadata key)"
    )


@pytest.mark.parametrize(
    "payload, message",
    [
        (
            [1, 2],
            "the 'mismatchscope' file metadata is a JSON list, not an object (the file was not written by "
            "mismatchscope; rewrite it without that metadata key)",
        ),
        (
            {"schema_version": "1"},
            "the 'mismatchscope' file metadata has schema_version '1', not a version number (the file "
            "was not written by mismatchscope; rewrite it without that metadata key)",
        ),
        (
            {"schema_version": True},
            "the 'mismatchscope' file metadata has schema_version True, not a version number (the "
            "file was not written by mismatchscope; rewrite it without that metadata key)",
        ),
        (
            {},
            "the 'mismatchscope' file metadata has schema_version None, not a version number (the file was not written by "
            "mismatchscope; rewrite it without that metadata key)",
        ),
        (
            {"schema_version": 99},
            "schema_version 99 is newer than this mismatchscope understands (1) (upgrade mismatchscope)",
        ),
        (
            {"schema_version": 1, "sampler": "vllm"},
            "the 'mismatchscope' file metadata has 'sampler' = 'vllm', not a table "
            "(the file's metadata was damaged; rewrite it without that metadata key)",
        ),
        (
            {"schema_version": 1, "checkpoint": [1]},
            "the 'mismatchscope' file metadata has 'checkpoint' = [1], not a table "
            "(the file's metadata was damaged; rewrite it without that metadata key)",
        ),
        (
            {"schema_version": 1, "source": {"semantics": "lagged"}},
            "the 'mismatchscope' file metadata has 'source.semantics' = 'lagged', not a table (the file's metadata was damaged; "
            "rewrite it without that metadata key)",
        ),
    ],
)
def test_metadata_of_the_wrong_shape_is_refused(tmp_path, payload, message):
    path = raw_parquet(tmp_path / "m.parquet", pairs(ROWS), {METADATA_KEY: json.dumps(payload).encode()})
    for command in ("report", "compare-masks"):
        assert error_line(cli(command, str(path))) == f"error: {path}: {message}"


def test_gate_reads_damaged_metadata_as_an_error_too(tmp_path):
    good = raw_parquet(tmp_path / "good.parquet", pairs(ROWS))
    bad = raw_parquet(tmp_path / "bad.parquet", pairs(ROWS), {METADATA_KEY: b'{"schema_version": 1, "sampling": 3}'})
    r = cli("gate", str(bad), "--baseline", str(good), "--bootstrap", "0")
    assert error_line(r) == (
        f"error: {bad}: the 'mismatchscope' file metadata has 'sampling' = 3, not a table "
        "(the file's metadata was damaged; rewrite it without that metadata key)"
    )


@pytest.mark.parametrize(
    "extra, message",
    [
        (
            {"trainer_entropy": [[1.0], [2.0], [3.0], [1.0], [1.0]]},
            "column 'trainer_entropy' must hold numbers, found list<element: double>",
        ),
        (
            {
                "sampler_topk_ids": [1, 2, 3, 4, 5],
                "sampler_topk_logprobs": [[-1.0]] * 5,
                "trainer_logprobs_at_sampler_topk": [[-1.0]] * 5,
            },
            "column 'sampler_topk_ids' must hold lists of integers, found int64 (top-k columns hold one list per token)",
        ),
        (
            {
                "sampler_topk_ids": [["a"]] * 5,
                "sampler_topk_logprobs": [[-1.0]] * 5,
                "trainer_logprobs_at_sampler_topk": [[-1.0]] * 5,
            },
            "column 'sampler_topk_ids' must hold lists of integers, found list<element: string> (top-k columns hold one list per token)",
        ),
        (
            {
                "sampler_topk_ids": [[7]] * 5,
                "sampler_topk_logprobs": [["x"]] * 5,
                "trainer_logprobs_at_sampler_topk": [[-1.0]] * 5,
            },
            "column 'sampler_topk_logprobs' must hold lists of numbers, found list<element: string> (top-k columns hold one list per token)",
        ),
        (
            {
                "sampler_topk_ids": pa.array([[7], None, [8], [9], [7]]),
                "sampler_topk_logprobs": [[-1.0]] * 5,
                "trainer_logprobs_at_sampler_topk": [[-1.0]] * 5,
            },
            "column 'sampler_topk_ids' has 1 null list(s) (write an empty list for a position without a top-k)",
        ),
    ],
)
def test_columns_of_the_wrong_kind(tmp_path, extra, message):
    path = raw_parquet(tmp_path / "t.parquet", {**pairs(ROWS), **extra})
    assert error_line(cli("report", str(path))) == f"error: {path}: {message}"


def test_a_negative_token_id_other_than_minus_one_is_refused(tmp_path):
    """-1 is a token whose id was not recorded (the Recorder without token_ids); any other negative id is no token."""
    cols = pairs(ROWS)
    cols["token_id"] = [7, -1, 9, -5, 11]
    path = raw_parquet(tmp_path / "t.parquet", cols)
    for command in ("report", "compare-masks", "certify", "doctor"):
        assert error_line(cli(command, str(path))) == (
            f"error: {path}: token_id -5 of sequence 2 position 0 is negative (token ids are >= 0; -1 marks a "
            "token whose id was not recorded)"
        )
    cols["token_id"] = [7, -1, 9, 10, 11]
    assert report_json(raw_parquet(tmp_path / "ok.parquet", cols))["tokens"] == 5


def test_a_negative_id_in_a_topk_list_is_refused(write):
    cols = pairs(ROWS[:2])
    cols["sampler_topk_ids"] = [[7, 9], [8, -3]]
    cols["sampler_topk_logprobs"] = [[-0.7, -2.0], [-1.6, -2.5]]
    cols["trainer_logprobs_at_sampler_topk"] = [[-0.7, -2.0], [-1.6, -2.5]]
    path = write(cols)
    assert error_line(cli("report", str(path))) == (
        f"error: {path}: column 'sampler_topk_ids' holds the negative id -3 at sequence 1 position 1 (a top-k list "
        "holds the ids of real tokens, >= 0)"
    )


@pytest.mark.parametrize("position", [-1, 1 << 24, 1 << 40])
def test_positions_outside_any_context(tmp_path, position):
    cols = pairs(ROWS)
    cols["position"] = pa.array([0, 1, 2, position, 1], pa.int64())
    path = raw_parquet(tmp_path / "p.parquet", cols)
    for command in ("report", "compare-masks"):
        assert error_line(cli(command, str(path))) == (
            f"error: {path}: position {position} of sequence 2 is outside 0..16777215 (position is the 0-based index of "
            "the token within its completion)"
        )


def _topk_columns(sampler_lists, trainer_lists):
    cols = pairs(ROWS[:2])
    cols["sampler_topk_ids"] = [[7, 9], [8, 3]]
    cols["sampler_topk_logprobs"] = sampler_lists
    cols["trainer_logprobs_at_sampler_topk"] = trainer_lists
    return cols


@pytest.mark.parametrize(
    "column, sampler_lists, trainer_lists, what",
    [
        (
            "sampler_topk_logprobs",
            [[-0.7, 0.5], [-1.6, -3.0]],
            [[-1.6, -2.0], [-0.5, -3.0]],
            "a positive value 0.5 at sequence 1 position 0",
        ),
        (
            "sampler_topk_logprobs",
            [[-0.7, -1.0], [-1.6, math.nan]],
            [[-1.6, -2.0], [-0.5, -3.0]],
            "a NaN at sequence 1 position 1",
        ),
        (
            "trainer_logprobs_at_sampler_topk",
            [[-0.7, -1.0], [-1.6, -3.0]],
            [[-1.6, -2.0], [math.inf, -3.0]],
            "a positive value inf at sequence 1 position 1",
        ),
    ],
)
def test_topk_lists_hold_logprobs(write, column, sampler_lists, trainer_lists, what):
    path = write(_topk_columns(sampler_lists, trainer_lists))
    assert error_line(cli("report", str(path))) == (
        f"error: {path}: column {column!r} holds 1 NaN or positive value(s), e.g. {what} (top-k lists hold natural-log "
        "probabilities <= 0; is the column holding logits or probabilities?)"
    )


def test_topk_lists_within_the_rounding_tolerance_and_minus_inf_are_fine(write):
    path = write(_topk_columns([[-0.7, 5e-5], [-1.6, -math.inf]], [[-1.6, -2.0], [-0.5, -3.0]]))
    assert cli("report", str(path), "--format", "json").returncode == 0


INTEGER_COLUMNS = [name for name, col in COLUMNS.items() if pa.types.is_integer(col.type)]


def test_the_schema_has_the_integer_columns_we_expect():
    assert {"sequence_id", "position", "token_id", "step", "rank"} <= set(INTEGER_COLUMNS)


def test_every_integer_column_is_read_as_int64(write):
    cols = pairs([(1, 0, 0.5, 0.4), (1, 1, 0.6, 0.6), (2, 0, 0.9, 0.8)])
    cols.update({name: [3, 4, 5] for name in INTEGER_COLUMNS if name not in cols})
    source = open_source(write(cols))
    (batch,) = iter_batches(source, INTEGER_COLUMNS, Hygiene())
    for name in INTEGER_COLUMNS:  # but the top-k summaries' counts, read at their own width (int32)
        assert batch[name].dtype == (np.int32 if name in SUMMARY_NAMES else np.int64), name
    assert batch["rank"].tolist() == [3, 4, 5]


def test_a_float_rank_column_is_refused(tmp_path):
    table = pa.table({**pairs([(1, 0, 0.5, 0.4), (1, 1, 0.6, 0.6)]), "step": [0, 1], "rank": [0.0, 1.5]})
    path = tmp_path / "float-rank.parquet"
    pq.write_table(table, path)
    with pytest.raises(InputError, match="column 'rank' must hold integers, found double"):
        list(iter_batches(open_source(path), ["rank"], Hygiene()))
    # the commands say it in one line, exit 2: before, timeline --by rank truncated 1.5 to rank 1
    r = cli("timeline", str(path), "--by", "rank")
    assert r.returncode == 2 and r.stderr.startswith("error: ") and "'rank' must hold integers" in r.stderr, r.stderr


def test_shard_metadata_with_a_wrongly_typed_section(tmp_path):
    from mismatchscope.schema import write_table

    write_table(tmp_path / "a.parquet", pairs([(0, 0, 0.5, 0.25)]), {"trainer_checkpoint": [1]})
    one_line_error(cli("report", str(tmp_path / "a.parquet")), "'trainer_checkpoint' = [1], not a table")


def test_empty_and_special_input_paths(tmp_path):
    assert error_line(cli("report", "", cwd=tmp_path)) == (
        "error: an empty path was given as input (give a Parquet file, a folder of shards, a run directory or a glob)"
    )
    assert error_line(cli("compare-masks", os.devnull)) == (
        f"error: {os.devnull}: not a regular file or a directory (give a Parquet file, a folder of shards, a run directory "
        "or a glob)"
    )
    assert error_line(cli("gate", str(tmp_path), "--config", str(tmp_path))) == (
        f"error: config file {tmp_path} is a directory (give a file, e.g. {tmp_path / 'gate.toml'})"
    )
    assert error_line(cli("gate", str(tmp_path), "--config", os.devnull)) == (
        f"error: config file {os.devnull} is not a regular file (give a gate.toml file)"
    )


def test_control_characters_from_the_metadata_never_reach_the_terminal(tmp_path):
    """A raw ESC in a file's metadata once reached the terminal in report's header and certify's scope line (a
    terminal obeys it: clear the screen, rewrite a line). Every terminal path shows its escape text instead."""
    raw = json.dumps(
        {
            "schema_version": 1,
            "sampler": {"kind": "vllm\x1b[2J", "dtype": "float16\x07[/oops]"},
            "trainer": {"dtype": "float32\x9b31m"},
            "scope": {"model": "m\x1b]0;title\x07"},
        }
    ).encode()
    path = raw_parquet(tmp_path / "esc.parquet", one_sequence(), {METADATA_KEY: raw})
    for command in ("report", "certify", "compare-masks", "doctor"):
        r = cli(command, str(path))
        assert r.returncode in (0, 1), (command, r.stderr)
        for stream in (r.stdout, r.stderr):
            assert not re.search(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]", stream), (command, stream)
    out = cli("report", str(path), env={"COLUMNS": "300"}).stdout  # rich drops a bell itself; escaped or gone
    assert re.search(r"sampler vllm\\x1b\[2J/float16(\\x07)?\[/oops\] vs trainer float32\\x9b31m", out), out
    scope = " ".join(cli("certify", str(path), env={"COLUMNS": "300"}).stdout.split())
    assert "model=m\\x1b]0;title" in scope and "sampler=vllm\\x1b[2J" in scope


def test_control_characters_in_an_error_line_are_escaped(tmp_path):
    missing = tmp_path / "x\x1bcy.parquet"  # ESC c resets a terminal
    assert error_line(cli("report", str(missing))) == f"error: {tmp_path}/x\\x1bcy.parquet: no such file or directory"


@pytest.mark.parametrize("bad, what", [(0.5, "positive value 0.5"), (math.nan, "NaN")])
def test_float32_topk_lists_are_checked_at_their_own_width(tmp_path, bad, what):
    """A run written now stores its lists as float32: the check reads them unwidened and refuses the same values."""
    from mismatchscope.errors import InputError
    from mismatchscope.reader.hygiene import _check_logprob_list

    ok = pa.array([[-0.7, -1.0], [-1.6, 5e-5]], pa.list_(pa.float32()))
    _check_logprob_list(tmp_path, "sampler_topk_logprobs", ok, {})
    arr = pa.array([[-0.7, -1.0], [-1.6, bad]], pa.list_(pa.float32()))
    with pytest.raises(InputError, match=f"holds 1 NaN or positive value.*e.g. a {what} at sequence 4 position 9"):
        _check_logprob_list(tmp_path, "sampler_topk_logprobs", arr, {"sequence_id": [3, 4], "position": [8, 9]})
