"""Hostile token-pair files: each is refused with one line naming the cause, or read to the right numbers.

Every case here once crashed (exit 3), or printed a number that was silently
wrong. The base table is five tokens of one sequence with log q = -0.5 and
log p = -0.6, so |log p - log q| = 0.1 on every token.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from mismatchscope.schema import METADATA_KEY
from tests.helpers import DUP_HINT, cli, error_line

INT64_MIN = -(2**63)


def base(n: int = 5, **changes) -> dict:
    cols = {
        "sequence_id": [1] * n,
        "position": list(range(n)),
        "token_id": list(range(7, 7 + n)),
        "sampler_logprob": [-0.5] * n,
        "trainer_logprob": [-0.6] * n,
    }
    cols.update(changes)
    return cols


def parquet(path, columns: dict, metadata: dict | None = None, **write_options):
    table = pa.table(columns)
    if metadata is not None:
        table = table.replace_schema_metadata(metadata)
    pq.write_table(table, path, **write_options)
    return path


def report_json(path, *args) -> dict:
    r = cli("report", str(path), "--format", "json", *args)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


# ---- file metadata -------------------------------------------------------------------------------


def test_a_lone_surrogate_in_the_metadata_is_printed_as_its_escape(tmp_path):
    """JSON may spell an unpaired surrogate; UTF-8 cannot encode it. Every output shows the 6 characters \\ud800."""
    raw = b'{"schema_version": 1, "sampler": {"kind": "\\ud800"}, "trainer": {"\\udfff": "x"}}'
    path = parquet(tmp_path / "s.parquet", base(), {METADATA_KEY: raw})
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
    path = parquet(tmp_path / "n.parquet", base(), {METADATA_KEY: b"null"})
    assert error_line(cli("report", str(path))) == (
        f"error: {path}: the 'mismatchscope' file metadata is a JSON null, not an object (the file was not written by "
        "mismatchscope; rewrite it without that metadata key)"
    )


def test_metadata_nested_too_deeply_to_walk_names_the_file(tmp_path):
    """900 levels parse (json's C parser) but are too deep to walk in Python: the same message as deeper nesting."""
    raw = b'{"schema_version": 1, "sampler": ' + b'{"a": ' * 900 + b"1" + b"}" * 900 + b"}"
    path = parquet(tmp_path / "d.parquet", base(), {METADATA_KEY: raw})
    assert error_line(cli("report", str(path))) == (
        f"error: {path}: the 'mismatchscope' file metadata is nested too deeply (the file was not written by "
        "mismatchscope, or was damaged; rewrite it without that metadata key)"
    )


def test_a_file_name_that_is_not_utf8_is_refused(tmp_path):
    import os

    parquet(tmp_path / "good.parquet", base())
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
    return parquet(
        tmp_path / "crc.parquet",
        base(n, sequence_id=[i // 20 for i in range(n)], position=[i % 20 for i in range(n)]),
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


# ---- values ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("command", ["report", "compare-masks", "timeline"])
def test_a_duplicate_hidden_behind_a_non_finite_logprob_is_refused(tmp_path, command):
    """Position 2 twice, one copy with a NaN: the NaN row is dropped from the numbers but still names the token."""
    path = parquet(
        tmp_path / "d.parquet",
        base(4, position=[0, 1, 2, 2], sampler_logprob=[-0.5, -0.5, -0.5, math.nan], step=[0, 0, 0, 0]),
    )
    assert error_line(cli(command, str(path))) == (
        f"error: duplicate (sequence_id, position) rows: sequence 1 position 2 appears more than once {DUP_HINT}"
    )


def test_a_duplicate_hidden_behind_a_sentinel_is_refused(tmp_path):
    path = parquet(tmp_path / "d.parquet", base(4, position=[0, 1, 2, 2], trainer_logprob=[-0.6, -0.6, -0.6, -9999.0]))
    assert error_line(cli("compare-masks", str(path))) == (
        f"error: duplicate (sequence_id, position) rows: sequence 1 position 2 appears more than once {DUP_HINT}"
    )


def test_a_dropped_token_is_not_a_gap(tmp_path):
    """Positions 0..4 with a NaN at 2: one warning for the NaN; the position is there, so no gap warning."""
    path = parquet(tmp_path / "g.parquet", base(sampler_logprob=[-0.5, -0.5, math.nan, -0.5, -0.5]))
    payload = report_json(path)
    assert payload["tokens"] == 4
    assert payload["warnings"] == [
        "1 of 5 tokens have a non-finite logprob (NaN or inf) and were excluded from every number below"
    ]


def test_the_sentinel_in_a_float16_column_is_the_sentinel(tmp_path):
    """float16 cannot hold -9999 and stores -10000; read as the -inf sentinel, the token is dropped:
    4 tokens left, each with |log p - log q| = |-0.6 - (-0.5)| = 0.1 (not 9999.4)."""
    path = parquet(
        tmp_path / "h.parquet", base(sampler_logprob=pa.array([-0.5, -9999.0, -0.5, -0.5, -0.5], pa.float16()))
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


def _overflow_warning(sequences: int, largest: float) -> str:
    return (
        f"warning: {sequences} sequence(s) hold a token with log p - log q above 354.9 (largest {largest}: the sampler "
        "gave it almost no probability); r^2 overflows float64 there, so chi2 reads inf and ESS is not reported\n"
    )


def test_huge_log_ratios_print_inf_and_no_numpy_warning(tmp_path):
    """Two tokens with log q = -1000, log p = -0.6: l = 999.4 and r = exp(l) overflows to inf.

    Sorted ratios: r, r, r, inf, inf with r = exp(-0.1). numpy's linear quantile sits at 4q:
    0.5 -> rank 2 exactly, r (r + (inf - r) * 0 was NaN, printed null); 0.95 and 0.99 -> between ranks
    3 and 4, two infinities, inf (inf - inf was NaN). No RuntimeWarning reaches stderr: only the line saying
    why chi2 is inf and ESS is missing.
    """
    path = parquet(tmp_path / "big.parquet", base(sampler_logprob=[-0.5, -1000.0, -0.5, -1000.0, -0.5]))
    for command in ("report", "compare-masks"):
        r = cli(command, str(path), "--format", "json")
        assert r.returncode == 0 and r.stderr == _overflow_warning(1, 999.4), r.stderr
    quantiles = report_json(path)["metrics"]["ratio_quantiles"]
    assert quantiles["0.5"] == pytest.approx(math.exp(-0.1))
    assert quantiles["0.95"] == "inf" and quantiles["0.99"] == "inf"


def test_infinite_geometric_ratios_have_infinite_quantiles(tmp_path):
    """Three sequences: seq 1 is the table above (mean l = (2 * 999.4 - 3 * 0.1) / 5 = 399.7, geo = exp(399.7),
    finite); seqs 2 and 3 are one token with l = 999.4 each (geo = inf). Sorted geo: g, inf, inf; the
    quantiles sit at 2q: 0.5 -> rank 1 (inf), 0.95 -> between ranks 1 and 2 (inf and inf): inf, not NaN."""
    cols = base(sampler_logprob=[-0.5, -1000.0, -0.5, -1000.0, -0.5])
    cols = {k: v + extra for (k, v), extra in zip(cols.items(), ([2, 3], [0, 0], [1, 2], [-1000.0] * 2, [-0.6] * 2))}
    r = cli("report", str(parquet(tmp_path / "geo.parquet", cols)), "--format", "json")
    assert r.returncode == 0 and r.stderr == _overflow_warning(3, 999.4), r.stderr
    geo = json.loads(r.stdout)["sequence_metrics"]["geo_ratio"]["quantiles"]
    assert geo["0.5"] == "inf" and geo["0.95"] == "inf" and geo["0.99"] == "inf"
    assert geo["0.001"] == "inf"  # g + (inf - g) * 0.002: interpolating toward inf


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
    path = parquet(tmp_path / "u.parquet", base(2, **{column: values}))
    assert error_line(cli("report", str(path), "--worst", "1")) == (
        f"error: {path}: column {column!r} holds {shown}, above the largest int64 (2^63 - 1) the format stores "
        "(ids are signed 64-bit integers; renumber them, or write the column as int64)"
    )


def test_unsigned_ids_within_int64_are_read(tmp_path):
    path = parquet(
        tmp_path / "u.parquet",
        base(2, sequence_id=pa.array([2**63 - 1] * 2, pa.uint64()), token_id=pa.array([3, 4], pa.uint64())),
    )
    assert report_json(path)["tokens"] == 2


def test_unsigned_topk_ids_beyond_int64_are_refused(tmp_path):
    path = parquet(
        tmp_path / "u.parquet", base(2, **_topk(ids=pa.array([[2**64 - 1, 9], [8, 3]], pa.list_(pa.uint64()))))
    )
    assert error_line(cli("report", str(path))) == (
        f"error: {path}: column 'sampler_topk_ids' holds {2**64 - 1}, above the largest int64 (2^63 - 1) the format "
        "stores (ids are signed 64-bit integers; renumber them, or write the column as int64)"
    )


@pytest.mark.parametrize("step", [INT64_MIN, -(2**52) - 1, 2**52 + 1, 2**63 - 1])
def test_timeline_refuses_steps_beyond_its_key_range(tmp_path, step):
    """np.abs(INT64_MIN) is INT64_MIN (negative): the old check let it through, and step * 1024 wrapped into step 0."""
    path = parquet(
        tmp_path / "s.parquet", base(4, sequence_id=[1, 1, 2, 2], position=[0, 1, 0, 1], step=[step, step, 0, 0])
    )
    assert error_line(cli("timeline", str(path))) == (
        f"error: step value {step} is beyond +-2^52: not a training step counter "
        "(map the training step column with --column step=NAME)"
    )


def test_timeline_keeps_the_largest_steps_apart(tmp_path):
    """Steps +-2^52 (the documented bound, inclusive) and 0 are three steps of two tokens each, never merged."""
    big = 2**52
    path = parquet(
        tmp_path / "s.parquet",
        base(6, sequence_id=[1, 1, 2, 2, 3, 3], position=[0, 1] * 3, step=[-big, -big, 0, 0, big, big]),
    )
    r = cli("timeline", str(path), "--format", "json")
    assert r.returncode == 0, r.stderr
    assert [(row["step"], row["tokens"]) for row in json.loads(r.stdout)["rows"]] == [(-big, 2), (0, 2), (big, 2)]


# ---- top-k lists ---------------------------------------------------------------------------------


def _topk(ids=None, logprobs=None, at=None, trainer_ids=None, trainer_logprobs=None) -> dict:
    """Two tokens' top-2 lists (the base table's token ids are 7 and 8)."""
    cols = {
        "sampler_topk_ids": [[7, 9], [8, 3]] if ids is None else ids,
        "sampler_topk_logprobs": [[-0.7, -1.0]] * 2 if logprobs is None else logprobs,
        "trainer_logprobs_at_sampler_topk": [[-0.7, -1.0]] * 2 if at is None else at,
    }
    if trainer_ids is not None:
        cols["trainer_topk_ids"] = trainer_ids
        cols["trainer_topk_logprobs"] = [[-0.7, -1.0]] * 2 if trainer_logprobs is None else trainer_logprobs
    return cols


def test_topk_overlap_with_ids_near_two_to_the_63(tmp_path):
    """Row 0: both lists hold {2^62, 9}: 2 of 2 shared. Row 1: {8, 2^62 + 1} against {2^62 + 1, 5}: 1 of 2.
    Mean overlap (1 + 0.5) / 2 = 0.75. (row * width + id overflowed int64 for the shared 2^62 + 1 of row 1.)"""
    big = 2**62
    path = parquet(
        tmp_path / "o.parquet", base(2, **_topk(ids=[[big, 9], [8, big + 1]], trainer_ids=[[big, 9], [big + 1, 5]]))
    )
    overlap = report_json(path)["score_centering"]["topk_overlap"]
    assert overlap["tokens"] == 2 and overlap["mean"] == pytest.approx(0.75)


def test_topk_overlap_of_huge_ids_by_hand():
    from mismatchscope.analysis.topk import topk_overlap

    top = 2**63 - 1
    # equal lengths: row 0 shares {0, top}: 2/2; row 1: A = {7} (7 twice counts once), B = {7, 1}: 1/2
    a = pa.array([[top, 0], [7, 7]], pa.list_(pa.int64()))
    b = pa.array([[0, top], [7, 1]], pa.list_(pa.int64()))
    assert topk_overlap(a, b).tolist() == [1.0, 0.5]
    # ragged: row 0 A = {3, top} of 3 listed, B = {3, top}: 2 / max(3, 2); row 1: nothing shared of 1: 0;
    # row 2: both empty: NaN
    a = pa.array([[top, 3, 3], [5], []], pa.list_(pa.int64()))
    b = pa.array([[3, top], [], []], pa.list_(pa.int64()))
    got = topk_overlap(a, b)
    assert got[:2].tolist() == [2 / 3, 0.0] and math.isnan(got[2])


def test_fixed_size_topk_lists_read_like_lists(tmp_path):
    """pa.list_(t, 2) columns give the numbers of the same lists written as plain lists."""
    plain = parquet(tmp_path / "plain.parquet", base(2, **_topk(trainer_ids=[[7, 9], [8, 5]])))
    fixed = parquet(
        tmp_path / "fixed.parquet",
        base(
            2,
            **{
                name: pa.array(values, pa.list_(pa.int64() if name.endswith("ids") else pa.float64(), 2))
                for name, values in _topk(trainer_ids=[[7, 9], [8, 5]]).items()
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
            _topk(ids=[[7, None], [8, 3]]),
            "column 'sampler_topk_ids' has 1 null id(s) inside its lists (a top-k list holds "
            "one id per listed token; write each list whole)",
        ),
        (
            _topk(trainer_ids=[[7, 9], [None, 3]]),
            "column 'trainer_topk_ids' has 1 null id(s) inside its lists (a top-k list "
            "holds one id per listed token; write each list whole)",
        ),
        (
            _topk(logprobs=[[-0.7, None], [-0.7, -1.0]]),
            "column 'sampler_topk_logprobs' has 1 null logprob(s) inside its "
            "lists (a top-k list holds one logprob per listed token; write each "
            "list whole)",
        ),
    ],
)
def test_bad_topk_lists_are_refused(tmp_path, columns, message):
    path = parquet(tmp_path / "t.parquet", base(2, **columns))
    assert error_line(cli("report", str(path))) == f"error: {path}: {message}"


def test_trainer_topk_logprobs_feed_no_number_and_are_not_read(tmp_path):
    """The trainer's own top-k logprobs enter no statistic: a file with garbage there (a positive value, a NaN,
    a list one short) reports exactly what the same file without the column reports."""
    cols = base(2, **_topk(trainer_ids=[[7, 9], [8, 3]], trainer_logprobs=[[3.0], [-0.6, math.nan]]))
    garbage = parquet(tmp_path / "a.parquet", cols)
    del cols["trainer_topk_logprobs"]
    without = parquet(tmp_path / "b.parquet", cols)
    assert report_json(garbage)["score_centering"] == report_json(without)["score_centering"]
    assert report_json(garbage)["score_centering"]["topk_overlap"]["mean"] == 1.0  # both rows list the same ids


def test_surrogate_sanitising_leaves_numbers_alone():
    """printable() walks only containers and strings: numbers, None and booleans come back as they are."""
    from mismatchscope.reader import printable

    values = {"n": [1, 2.5, None, True, np.float64(3.0)]}
    assert printable(values) == values


# ---- ratios beyond float64 -----------------------------------------------------------------------


def test_a_ratio_beyond_float64_reads_inf_and_says_why(tmp_path, monkeypatch):
    """One token has log q = -800, log p = -0.1: l = 799.9, r = e^799.9 overflows float64.

    Hand-derived, 4 tokens with l = (799.9, 0, 0, 0):
    - k3 = (r - 1) - l and reverse k3 = r l - (r - 1) are +inf for that token (the reverse one was inf - inf = NaN,
      printed null), so both means are inf; chi2 = mean r^2 - 1 = inf;
    - ESS / n = (sum r)^2 / (n sum r^2) is inf / inf: not reported (was NaN), with a warning naming the cause;
    - ratio max is inf (was exp(709) = 8.2e307, a number the data does not hold);
    - quantiles, numpy's linear method over r = (1, 1, 1, inf): q0.5 at virtual rank 1.5 is 1; q0.99 at 2.97 lies
      between 1 and inf, so inf (was NaN, from inf - inf * 0.03).
    """
    path = parquet(
        tmp_path / "o.parquet",
        base(
            4,
            sequence_id=[1, 1, 2, 2],
            position=[0, 1, 0, 1],
            sampler_logprob=[-800.0, -1.0, -0.5, -0.5],
            trainer_logprob=[-0.1, -1.0, -0.5, -0.5],
        ),
    )
    out = report_json(path)
    m = out["metrics"]
    assert (m["k3_mean"], m["kl_reverse_k3_mean"], m["chi2_token"], m["ess"], m["ratio_max"]) == (
        "inf",
        "inf",
        "inf",
        None,
        "inf",
    )
    assert m["ratio_min"] == 1.0
    assert m["ratio_quantiles"]["0.5"] == 1.0 and m["ratio_quantiles"]["0.99"] == "inf"
    assert m["k1_mean"] == pytest.approx(-799.9 / 4)
    assert out["warnings"] == [
        "1 sequence(s) hold a token with log p - log q above 354.9 (largest 799.9: the sampler gave it almost no "
        "probability); r^2 overflows float64 there, so chi2 reads inf and ESS is not reported"
    ]


def test_a_ratio_whose_square_overflows_leaves_ess_unreported(tmp_path):
    """l = 400: r = e^400 is finite but r^2 = e^800 is not; ESS = (e^400 + 3)^2 / (4 * inf) would read 0, a wrong
    number (the true ESS / n is about 1/4: one token carries all the weight). It is not reported."""
    path = parquet(
        tmp_path / "o.parquet",
        base(
            4,
            sequence_id=[1, 1, 2, 2],
            position=[0, 1, 0, 1],
            sampler_logprob=[-400.5, -1.0, -0.5, -0.5],
            trainer_logprob=[-0.5, -1.0, -0.5, -0.5],
        ),
    )
    m = report_json(path)["metrics"]
    assert m["ess"] is None and m["chi2_token"] == "inf"
    assert m["ratio_max"] == pytest.approx(math.exp(400.0))


def test_an_infinite_bucket_mean_is_drawn_and_marked(tmp_path):
    """The k3 panels got a NaN bar and matplotlib's RuntimeWarning; the bar now reaches the top, marked inf."""
    pytest.importorskip("matplotlib")
    path = parquet(
        tmp_path / "o.parquet",
        base(
            4,
            sequence_id=[1, 1, 2, 2],
            position=[0, 1, 0, 1],
            sampler_logprob=[-800.0, -1.0, -0.5, -0.5],
            trainer_logprob=[-0.1, -1.0, -0.5, -0.5],
        ),
    )
    r = cli("report", str(path), "--plots", str(tmp_path / "p"), "--format", "json")
    assert r.returncode == 0 and "RuntimeWarning" not in r.stderr, r.stderr
    assert (tmp_path / "p" / "breakdowns.png").stat().st_size > 0


def test_gate_does_not_read_an_overflowed_ess_as_zero(tmp_path):
    """With r = e^400, (sum r)^2 / (n * inf) was an ESS of 0, failing an ess limit on a number the data does not hold."""
    path = parquet(
        tmp_path / "o.parquet",
        base(
            4,
            sequence_id=[1, 1, 2, 2],
            position=[0, 1, 0, 1],
            sampler_logprob=[-400.5, -1.0, -0.5, -0.5],
            trainer_logprob=[-0.5, -1.0, -0.5, -0.5],
        ),
    )
    assert error_line(cli("gate", str(path), "--limit", "ess>=0.5", "--absolute-only")) == (
        f"error: ess is not available for the candidate ({path}): a token's log p - log q exceeds 354.9, so r^2 "
        "overflows float64 (report warns where) (remove the limit on it, or record what it needs)"
    )
