"""Generic one-row-per-sequence dumps (JSONL and Parquet), the probe round trip, and hostile dumps.

The round trip pins the promise of the generic layout: a probe's token pairs,
written out one row per sequence and imported back, come back bit for bit.

Each hostile dump is refused with one line naming the file, the record and the cause. Every such case once
crashed (exit 3), or was imported as numbers the dump does not hold (a boolean read as 0/1, an id wrapped to a
negative one, a per-sequence number repeated as per-token logprobs). The good record
(``tests.importers.layouts.GOOD``) has two tokens, 5 and 6, with log q = -0.5, -1.0 and log p = -0.4, -1.1.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest

from mismatchscope.errors import ImportFormatError, InputError, UsageError
from mismatchscope.importers import import_run
from mismatchscope.schema import write_table
from tests.helpers import cli
from tests.importers.layouts import (
    GOOD,
    GOOD_COLUMNS,
    import_cli,
    import_error,
    imported_tokens,
    jsonl_file,
    parquet_file,
)
from tests.inputs import error_line, jsonl_dump

TOKEN_COLUMNS = ("sequence_id", "position", "token_id", "sampler_logprob", "trainer_logprob")


def read(out) -> dict[str, np.ndarray]:
    t = ds.dataset(out / "tokens", format="parquet").to_table()
    return {name: t.column(name).to_numpy() for name in t.column_names}


def probe_pairs(path):
    """A probe's output as the probe writes it: one row per token, through ``schema.write_table``.

    Sequences of different lengths, ids that are not 0..n-1, and logprobs that
    need all 17 significant digits (or are subnormal) to survive a text format.
    """
    rng = np.random.default_rng(7)
    cols: dict[str, list] = {c: [] for c in TOKEN_COLUMNS + ("advantage", "reward")}
    for seq_id, length in [(3, 5), (8, 1), (11, 7), (12, 4)]:
        q = np.log(rng.uniform(1e-6, 1.0, length))
        p = q + rng.normal(0, 1e-3, length)
        p[0] = -5e-324 if seq_id == 11 else p[0]  # a subnormal
        cols["sequence_id"] += [seq_id] * length
        cols["position"] += list(range(length))
        cols["token_id"] += rng.integers(0, 150_000, length).tolist()
        cols["sampler_logprob"] += q.tolist()
        cols["trainer_logprob"] += np.minimum(p, 0.0).tolist()
        cols["advantage"] += [float(seq_id) / 3] * length
        cols["reward"] += [float(seq_id % 2)] * length
    write_table(path, cols, {"probe": {"model": "tiny"}})
    return pq.read_table(path)


def to_sequences(table: pa.Table) -> list[dict]:
    """Token pairs -> the generic layout: one row per sequence, list columns (see docs/import.md)."""
    t = table.to_pydict()
    rows: dict[int, dict] = {}
    for i, sid in enumerate(t["sequence_id"]):
        row = rows.setdefault(
            sid,
            {
                "sequence_id": sid,
                "token_ids": [],
                "sampler_logprobs": [],
                "trainer_logprobs": [],
                "advantages": [],
                "reward": t["reward"][i],
            },
        )
        row["token_ids"].append(t["token_id"][i])
        row["sampler_logprobs"].append(t["sampler_logprob"][i])
        row["trainer_logprobs"].append(t["trainer_logprob"][i])
        row["advantages"].append(t["advantage"][i])
    return list(rows.values())


def assert_bitwise_equal(a: dict[str, np.ndarray], b: pa.Table) -> None:
    for name in TOKEN_COLUMNS + ("advantage", "reward"):
        expected = b.column(name).to_numpy()
        got = a[name]
        assert got.dtype == expected.dtype, name
        if expected.dtype == np.float64:  # bit for bit, not approximately
            assert np.array_equal(got.view(np.int64), expected.view(np.int64)), name
        else:
            assert np.array_equal(got, expected), name


@pytest.mark.parametrize("dumps", [json.dumps, lambda r: orjson.dumps(r).decode()], ids=["json", "orjson"])
def test_probe_pairs_round_trip_through_generic_jsonl_bit_for_bit(tmp_path, dumps):
    table = probe_pairs(tmp_path / "probe.parquet")
    dump = tmp_path / "dump.jsonl"
    dump.write_text("".join(dumps(r) + "\n" for r in to_sequences(table)))
    result = import_run("jsonl", dump, tmp_path / "out")
    assert (result.sequences, result.tokens_written, result.tokens_dropped_by_mask) == (4, 17, 0)
    assert_bitwise_equal(read(tmp_path / "out"), table)


def test_probe_pairs_round_trip_through_generic_parquet_bit_for_bit(tmp_path):
    table = probe_pairs(tmp_path / "probe.parquet")
    pq.write_table(pa.Table.from_pylist(to_sequences(table)), tmp_path / "dump.parquet")
    import_run("parquet", tmp_path / "dump.parquet", tmp_path / "out")
    assert_bitwise_equal(read(tmp_path / "out"), table)


VERL_ROWS = [
    # verl-style names; response_mask 0 on the padding at the end
    {
        "responses": [5, 6, 7, 0],
        "response_mask": [1, 1, 1, 0],
        "rollout_log_probs": [-0.5, -0.25, -1.0, 0.0],
        "old_log_probs": [-0.5, -0.3, -0.9, 0.0],
        "advantages": [0.5, 0.5, 0.5, 0.0],
        "global_step": 12,
    },
    {
        "responses": [8, 0, 0, 0],
        "response_mask": [1, 0, 0, 0],
        "rollout_log_probs": [-2.0, 0.0, 0.0, 0.0],
        "old_log_probs": [-2.5, 0.0, 0.0, 0.0],
        "advantages": [-1.0, 0.0, 0.0, 0.0],
        "global_step": 12,
    },
]
VERL_MAP = {
    "token_id": "responses",
    "mask": "response_mask",
    "sampler_logprob": "rollout_log_probs",
    "trainer_logprob": "old_log_probs",
    "step": "global_step",
}


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_column_mapping_and_mask(tmp_path, fmt):
    if fmt == "jsonl":
        src = tmp_path / "verl.jsonl"
        src.write_text("".join(json.dumps(r) + "\n" for r in VERL_ROWS))
    else:
        src = tmp_path / "verl.parquet"
        pq.write_table(pa.Table.from_pylist(VERL_ROWS), src)
    result = import_run(fmt, src, tmp_path / "out", columns=VERL_MAP)
    t = read(tmp_path / "out")
    assert t["token_id"].tolist() == [5, 6, 7, 8]
    assert t["sequence_id"].tolist() == [0, 0, 0, 1]
    assert t["position"].tolist() == [0, 1, 2, 0]
    assert t["sampler_logprob"].tolist() == [-0.5, -0.25, -1.0, -2.0]
    assert t["trainer_logprob"].tolist() == [-0.5, -0.3, -0.9, -2.5]
    assert t["advantage"].tolist() == [0.5, 0.5, 0.5, -1.0]
    assert t["step"].tolist() == [12] * 4
    assert result.tokens_dropped_by_mask == 4


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_bad_rows_are_named_or_skipped(tmp_path, fmt):
    rows = [
        VERL_ROWS[0],
        {**VERL_ROWS[1], "old_log_probs": [-1.0]},
        {**VERL_ROWS[1], "response_mask": [0, 0, 0, 0]},
        VERL_ROWS[1],
    ]
    if fmt == "jsonl":
        src = tmp_path / "verl.jsonl"
        src.write_text("".join(json.dumps(r) + "\n" for r in rows))
        where = "verl.jsonl:2: "
    else:
        src = tmp_path / "verl.parquet"
        pq.write_table(pa.Table.from_pylist(rows), src)
        where = "verl.parquet (record 1): "
    with pytest.raises(ImportFormatError, match="misaligned") as err:
        import_run(fmt, src, tmp_path / "out", columns=VERL_MAP)
    assert str(err.value).startswith(where)
    result = import_run(fmt, src, tmp_path / "out2", columns=VERL_MAP, skip_bad=True)
    assert (result.sequences, result.bad_records_skipped) == (2, 2)
    assert read(tmp_path / "out2")["sequence_id"].tolist() == [0, 0, 0, 1]


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_repeated_user_sequence_ids_are_bad_records(tmp_path, fmt):
    rows = [{"sequence_id": 5, "token_ids": [1], "sampler_logprobs": [-0.1], "trainer_logprobs": [-0.2]}] * 2
    src = tmp_path / f"d.{fmt}"
    if fmt == "jsonl":
        src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    else:
        pq.write_table(pa.Table.from_pylist(rows), src)
    with pytest.raises(ImportFormatError, match="sequence_id 5 appears twice"):
        import_run(fmt, src, tmp_path / "out")
    result = import_run(fmt, src, tmp_path / "out2", skip_bad=True)
    assert (result.sequences, result.bad_records_skipped) == (1, 1)


def test_unknown_mapping_key_and_missing_mapped_column(tmp_path):
    src = tmp_path / "d.jsonl"
    src.write_text(json.dumps(VERL_ROWS[0]) + "\n")
    with pytest.raises(UsageError, match="logprob_sampler"):
        import_run("jsonl", src, tmp_path / "out", columns={"logprob_sampler": "x"})
    with pytest.raises(InputError, match="no column 'nope' for trainer_logprob") as err:
        import_run("jsonl", src, tmp_path / "out", columns={**VERL_MAP, "trainer_logprob": "nope"})
    assert "--column trainer_logprob=NAME" in str(err.value)


def test_a_token_pair_file_is_not_a_generic_dump(tmp_path):
    probe_pairs(tmp_path / "probe.parquet")
    with pytest.raises(ImportFormatError, match="one row per token"):
        import_run(
            "parquet",
            tmp_path / "probe.parquet",
            tmp_path / "out",
            columns={
                "token_id": "token_id",
                "sampler_logprob": "sampler_logprob",
                "trainer_logprob": "trainer_logprob",
            },
        )


def test_per_sequence_reward_and_missing_optional_floats(tmp_path):
    rows = [
        {"token_ids": [1, 2], "sampler_logprobs": [-0.1, -0.2], "trainer_logprobs": [-0.1, -0.2], "reward": 1.0},
        {"token_ids": [3], "sampler_logprobs": [-0.3], "trainer_logprobs": [-0.3]},
    ]
    src = tmp_path / "d.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    import_run("jsonl", src, tmp_path / "out")
    reward = read(tmp_path / "out")["reward"]
    assert reward[:2].tolist() == [1.0, 1.0] and math.isnan(reward[2])


GOOD_RECORD = '{"token_ids": [5, 6], "sampler_logprobs": [-0.5, -1.0], "trainer_logprobs": [-0.4, -1.1]}'


@pytest.mark.parametrize(
    "record, reason",
    [
        ("[" * 100_000 + "]" * 100_000, "malformed JSON (nested too deeply)"),
        (
            '{"token_ids": '
            + "[" * 3000
            + "1"
            + "]" * 3000
            + ', "sampler_logprobs": [-0.5], "trainer_logprobs": [-0.4]}',
            "malformed JSON (nested too deeply)",
        ),
        (
            '{"token_ids": [5, 6.5], "sampler_logprobs": [-0.5, -1.0], "trainer_logprobs": [-0.4, -1.1]}',
            "bad value (token ids must be integers, got 6.5 at index 1)",
        ),
        (
            '{"token_ids": [5, "6"], "sampler_logprobs": [-0.5, -1.0], "trainer_logprobs": [-0.4, -1.1]}',
            "bad value (token ids must be integers, got '6' at index 1)",
        ),
        (
            '{"token_ids": [5, null], "sampler_logprobs": [-0.5, -1.0], "trainer_logprobs": [-0.4, -1.1]}',
            "bad value (token ids must be integers, got None at index 1)",
        ),
        (
            '{"token_ids": [true, false], "sampler_logprobs": [-0.5, -1.0], "trainer_logprobs": [-0.4, -1.1]}',
            "bad value (token ids must be integers, got True at index 0)",
        ),
        (
            '{"token_ids": [[5, 6]], "sampler_logprobs": [[-0.5, -1.0]], "trainer_logprobs": [[-0.4, -1.1]]}',
            "bad value (token ids must be a flat list of integers, got nested lists)",
        ),
        (
            '{"token_ids": [5, 6], "sampler_logprobs": [[-0.5], [-1.0]], "trainer_logprobs": [-0.4, -1.1]}',
            "bad value (a per-token list holds nested lists, not one number per token)",
        ),
    ],
)
def test_pathological_jsonl_records(tmp_path, record, reason):
    dump = jsonl_dump(tmp_path, GOOD_RECORD, record)
    r = cli("import", "jsonl", str(dump), "--out", str(tmp_path / "out"))
    assert error_line(r) == f"error: dump.jsonl:2: {reason}"


def test_integral_float_token_ids_are_read(tmp_path):
    dump = jsonl_dump(
        tmp_path, '{"token_ids": [5.0, 6], "sampler_logprobs": [-0.5, -1.0], "trainer_logprobs": [-0.4, -1.1]}'
    )
    r = cli("import", "jsonl", str(dump), "--out", str(tmp_path / "out"), "--format", "json")
    assert r.returncode == 0, r.stderr
    assert pq.read_table(tmp_path / "out" / "tokens").column("token_id").to_pylist() == [5, 6]


def test_fractional_token_ids_in_parquet(tmp_path):
    dump = tmp_path / "dump.parquet"
    pq.write_table(
        pa.table({"token_ids": [[5.0, 6.25]], "sampler_logprobs": [[-0.5, -1.0]], "trainer_logprobs": [[-0.4, -1.1]]}),
        dump,
    )
    r = cli("import", "parquet", str(dump), "--out", str(tmp_path / "out"))
    assert error_line(r) == (
        "error: dump.parquet: bad values in rows 0..0 (integer columns must be integers, got 6.25 at index 1)"
    )


@pytest.mark.parametrize(
    "record, message",
    [
        ({"token_ids": [5.0, True]}, "token ids must be integers, got True at index 1"),
        ({"sampler_logprobs": ["-0.5", -1.0]}, "sampler_logprobs must hold numbers, got '-0.5' at index 0"),
        ({"advantages": [1.5, "2"]}, "advantages must hold numbers, got '2' at index 1"),
    ],
)
def test_import_refuses_text_and_booleans_among_numbers(tmp_path, record, message):
    rec = {"token_ids": [5, 6], "sampler_logprobs": [-0.5, -1.0], "trainer_logprobs": [-0.4, -1.1], **record}
    dump = tmp_path / "d.jsonl"
    dump.write_text(json.dumps(rec) + "\n")
    r = cli("import", "jsonl", str(dump), "--out", str(tmp_path / "o"))
    assert error_line(r, after_work=True) == f"error: d.jsonl:1: bad value ({message})"  # named relative to the dump


def test_a_bad_token_id_is_named_at_its_index_in_the_record(tmp_path):
    # the mask keeps indices 1 and 2; 'x' is token_ids[2] (once reported as index 1, its place among the kept)
    path = jsonl_file(
        tmp_path,
        '{"token_ids": [0, 5, "x"], "sampler_logprobs": [-0.5, -1, -1], "trainer_logprobs": [-0.4, -1, -1], '
        '"mask": [0, 1, 1]}\n',
    )
    assert import_error("jsonl", path, tmp_path).endswith("token ids must be integers, got 'x' at index 2)")


def test_a_null_field_is_not_called_missing(tmp_path):
    # trainer_logprobs is there, but null: once "missing field(s) trainer_logprobs" beside a list that named it
    path = jsonl_file(tmp_path, '{"token_ids": [5], "sampler_logprobs": [-0.5], "trainer_logprobs": null}\n')
    assert import_error("jsonl", path, tmp_path) == (
        "error: d.jsonl:1: null field(s) trainer_logprobs (the record's fields with a value: sampler_logprobs, "
        "token_ids)"
    )


@pytest.mark.parametrize(
    "field, value, bits",
    [
        ("sequence_id", 2**63, 64),
        ("step", 2**64 - 1, 64),
        ("rank", 2**31, 32),
        ("sample_index", -(2**31) - 1, 32),
    ],
)
def test_jsonl_per_sequence_integers_beyond_their_column(tmp_path, field, value, bits):
    """sequence_id 2^63 raised OverflowError (exit 3); rank 2^31 would have wrapped in the int32 column."""
    path = jsonl_file(tmp_path, GOOD + f', "{field}": {value}}}\n')
    assert error_line(import_cli("jsonl", path, tmp_path / "out")) == (
        f"error: d.jsonl:1: bad value ({field} {value} does not fit in a signed {bits}-bit integer)"
    )


@pytest.mark.parametrize(
    "ids, index, shown",
    [
        ([2**63, 2**64 - 1], 0, 2**63),  # numpy reads these as uint64, which int64 would wrap to negative ids
        ([5, 2**64 - 1], 1, 2**64 - 1),  # with a small one, as float64: the list's own value is named
    ],
)
def test_jsonl_token_ids_beyond_int64(tmp_path, ids, index, shown):
    path = jsonl_file(tmp_path, GOOD.replace("[5, 6]", str(ids)) + "}\n")
    assert error_line(import_cli("jsonl", path, tmp_path / "out")) == (
        f"error: d.jsonl:1: bad value (token ids must fit in a signed 64-bit integer, got {shown} at index {index})"
    )


@pytest.mark.parametrize(
    "column, values, message",
    [
        (
            "token_ids",
            pa.array([[2**64 - 1, 6]], pa.list_(pa.uint64())),
            f"integer columns must fit in a signed 64-bit integer, got {2**64 - 1} at index 0",
        ),
        (
            "sequence_id",
            pa.array([2**63], pa.uint64()),
            f"sequence_id must fit in a signed 64-bit integer, got {2**63} at index 0",
        ),
        ("rank", pa.array([2**40], pa.int64()), f"rank {2**40} does not fit in a signed 32-bit integer"),
    ],
)
def test_parquet_integers_beyond_their_column(tmp_path, column, values, message):
    path = parquet_file(tmp_path, {**GOOD_COLUMNS, column: values})
    assert (
        error_line(import_cli("parquet", path, tmp_path / "out"))
        == f"error: d.parquet: bad values in rows 0..0 ({message})"
    )


@pytest.mark.parametrize(
    "record, message",
    [
        (
            '{"token_ids": [5, true], "sampler_logprobs": [-0.5, -1.0], "trainer_logprobs": [-0.4, -1.1]}',
            "token ids must be integers, got True at index 1",
        ),
        (
            '{"token_ids": [5, 6], "sampler_logprobs": [false, -1.0], "trainer_logprobs": [-0.4, -1.1]}',
            "sampler_logprobs must hold numbers, got False at index 0",
        ),
        (
            '{"token_ids": [5, 6], "sampler_logprobs": [-0.5, -1.0], "trainer_logprobs": [-0.4, -1.1], "advantages": [1.0, true]}',
            "advantages must hold numbers, got True at index 1",
        ),
        (
            '{"token_ids": [5, 6], "sampler_logprobs": [-0.5, -1.0], "trainer_logprobs": [-0.4, -1.1], "advantages": true}',
            "advantages is not a number: True",
        ),
        (
            '{"token_ids": [5, 6], "sampler_logprobs": [-0.5, -1.0], "trainer_logprobs": [-0.4, -1.1], "reward": "1"}',
            "reward is not a number: '1'",
        ),
    ],
)
def test_jsonl_booleans_are_refused(tmp_path, record, message):
    """true was imported as token 1, false as logprob 0.0."""
    path = jsonl_file(tmp_path, record + "\n")
    assert error_line(import_cli("jsonl", path, tmp_path / "out")) == f"error: d.jsonl:1: bad value ({message})"


@pytest.mark.parametrize(
    "column, values, want",
    [
        ("sampler_logprobs", [[False, False]], "a list of numbers, one per token"),
        ("token_ids", [[True, False]], "a list of integers, one per token"),
        ("advantages", [True], "a list of numbers, one per token, or one number per sequence"),
    ],
)
def test_parquet_booleans_are_refused(tmp_path, column, values, want):
    path = parquet_file(tmp_path, {**GOOD_COLUMNS, column: values})
    canonical = {"sampler_logprobs": "sampler_logprob", "token_ids": "token_id", "advantages": "advantage"}[column]
    kind = "list<element: bool>" if isinstance(values[0], list) else "bool"
    assert error_line(import_cli("parquet", path, tmp_path / "out")) == (
        f"error: d.parquet: column {column!r} ({canonical}) holds {kind}; it must hold {want} "
        "(booleans are not read as 0/1)"
    )


def test_a_boolean_mask_is_still_a_mask(tmp_path):
    """docs/import.md: 1 (or true) keeps the token. [true, false] keeps token 5 only, in both formats."""
    path = jsonl_file(tmp_path, GOOD + ', "mask": [true, false]}\n')
    assert import_cli("jsonl", path, tmp_path / "out").returncode == 0
    assert imported_tokens(tmp_path / "out")["token_id"] == [5]
    path = parquet_file(tmp_path, {**GOOD_COLUMNS, "mask": [[True, False]]})
    assert import_cli("parquet", path, tmp_path / "out2").returncode == 0
    assert imported_tokens(tmp_path / "out2")["token_id"] == [5]


def test_parquet_lists_of_lists_are_refused(tmp_path):
    path = parquet_file(tmp_path, {**GOOD_COLUMNS, "sampler_logprobs": [[[-0.5], [-1.0]]]})
    assert error_line(import_cli("parquet", path, tmp_path / "out")) == (
        "error: d.parquet: column 'sampler_logprobs' (sampler_logprob) holds list<element: list<element: double>>; "
        "it must hold a list of numbers, one per token"
    )


def test_parquet_fixed_size_lists_import_like_lists(tmp_path):
    path = parquet_file(
        tmp_path,
        {
            "token_ids": pa.array([[5, 6]], pa.list_(pa.int64(), 2)),
            "sampler_logprobs": pa.array([[-0.5, -1.0]], pa.list_(pa.float64(), 2)),
            "trainer_logprobs": [[-0.4, -1.1]],
            "mask": pa.array([[1, 0]], pa.list_(pa.int8(), 2)),
        },
    )
    r = import_cli("parquet", path, tmp_path / "out")
    assert r.returncode == 0, r.stderr
    t = imported_tokens(tmp_path / "out")
    assert (t["token_id"], t["sampler_logprob"], t["trainer_logprob"]) == ([5], [-0.5], [-0.4])


def test_a_number_where_a_per_token_list_belongs_is_refused_in_both_formats(tmp_path):
    """Parquet broadcast the one number onto every token; JSONL refused the same record."""
    path = parquet_file(tmp_path, {**GOOD_COLUMNS, "sampler_logprobs": [-0.5]})
    assert error_line(import_cli("parquet", path, tmp_path / "out")) == (
        "error: d.parquet: column 'sampler_logprobs' (sampler_logprob) holds double; it must hold a list of numbers, "
        "one per token"
    )
    path = jsonl_file(tmp_path, '{"token_ids": [5, 6], "sampler_logprobs": -0.5, "trainer_logprobs": [-0.4, -1.1]}\n')
    assert error_line(import_cli("jsonl", path, tmp_path / "out")) == (
        "error: d.jsonl:1: misaligned per-token lists: 2 tokens but sampler_logprobs=float"
    )


def test_one_number_per_sequence_is_still_fine_for_advantage_and_reward(tmp_path):
    path = parquet_file(tmp_path, {**GOOD_COLUMNS, "advantages": [0.5], "reward": [1.0]})
    assert import_cli("parquet", path, tmp_path / "out").returncode == 0
    t = imported_tokens(tmp_path / "out")
    assert (t["advantage"], t["reward"]) == ([0.5, 0.5], [1.0, 1.0])


def test_zero_rows_are_not_blamed_on_skip_bad(tmp_path):
    schema = pa.schema([(name, pa.list_(pa.int64() if name == "token_ids" else pa.float64())) for name in GOOD_COLUMNS])
    path = tmp_path / "zero.parquet"
    pq.write_table(pa.table({name: [] for name in GOOD_COLUMNS}, schema=schema), path)
    r = import_cli("parquet", path, tmp_path / "out")
    lines = r.stderr.strip().splitlines()
    assert lines[0] == f"[1/1] {path}"  # progress, then the one error line
    assert error_line(r, after_work=True) == (
        f"error: {path}: no token imported: the parquet files hold no record (point at a .parquet file or a folder of them)"
    )


def test_an_empty_jsonl_file_holds_no_record(tmp_path):
    path = jsonl_file(tmp_path, "\n\n")
    assert error_line(import_cli("jsonl", path, tmp_path / "out"), after_work=True) == (
        f"error: {path}: no token imported: the jsonl files hold no record (point at a .jsonl file or a folder of them)"
    )


def test_only_progress_precedes_an_error_in_a_later_file(tmp_path):
    """Two files with the same sequence id: progress for the first file on stderr, then the error, last and alone."""
    folder = tmp_path / "two"
    folder.mkdir()
    for name in ("a.jsonl", "b.jsonl"):
        (folder / name).write_text(GOOD + ', "sequence_id": 3}\n')
    r = import_cli("jsonl", folder, tmp_path / "out")
    assert r.stderr.splitlines() == [
        "[1/2] a.jsonl",  # relative to the folder given, as the error names its file
        "error: b.jsonl:1: sequence_id 3 appears twice; ids must be unique across the import",
    ]
    assert error_line(r, after_work=True)


def test_a_parquet_page_that_fails_its_checksum_is_refused_on_import(tmp_path):
    path = parquet_file(
        tmp_path,
        {"token_ids": [[5, 6]] * 50, "sampler_logprobs": [[-0.5, -1.0]] * 50, "trainer_logprobs": [[-0.4, -1.1]] * 50},
        compression="none",
        use_dictionary=False,
        write_page_checksum=True,
    )
    chunk = pq.ParquetFile(path).metadata.row_group(0).column(1)  # sampler_logprobs' values
    data = bytearray(path.read_bytes())
    data[chunk.data_page_offset + chunk.total_compressed_size - 1] ^= 0x10
    path.write_bytes(bytes(data))
    assert error_line(import_cli("parquet", path, tmp_path / "out")) == (
        "error: d.parquet: unreadable Parquet data (could not verify page integrity, CRC checksum verification failed "
        "for page_ordinal 0)"
    )


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_a_whole_float_step_imports_as_that_step_in_both_formats(tmp_path, fmt):
    """Loggers write counters as 2.0; JSONL refused what Parquet accepted. A fraction stays refused in both."""
    if fmt == "jsonl":
        good, bad = (
            jsonl_file(tmp_path, GOOD + f', "step": {v}}}\n', f"{n}.jsonl") for n, v in (("a", "2.0"), ("b", "2.5"))
        )
        bad_line = "error: b.jsonl:1: bad value (step is not an integer: 2.5)"
    else:
        good, bad = (
            parquet_file(tmp_path, {**GOOD_COLUMNS, "step": pa.array([v])}, f"{n}.parquet")
            for n, v in (("a", 2.0), ("b", 2.5))
        )
        bad_line = "error: b.parquet: bad values in rows 0..0 (step must be integers, got 2.5 at index 0)"
    assert import_cli(fmt, good, tmp_path / "good").returncode == 0
    assert imported_tokens(tmp_path / "good")["step"] == [2, 2]
    assert error_line(import_cli(fmt, bad, tmp_path / "bad")) == bad_line


def _jsonl(path: Path, *records: dict) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


GOOD_DICT = {"token_ids": [1, 2, 3], "sampler_logprobs": [-0.5, -1.0, -0.1], "trainer_logprobs": [-0.6, -1.1, -0.2]}


@pytest.mark.parametrize(
    "bad, message",
    [
        (
            {"trainer_logprobs": [-0.6, 0.7, -0.2]},
            "dump.jsonl:2: trainer_logprob 0.7 is positive beyond rounding "
            "(> 0.0001): logprobs are natural logs <= 0 at position 1",
        ),
        ({"advantages": float("nan")}, "dump.jsonl:2: advantage is nan (missing?)"),
        ({"mask": [1, "1", 0]}, "dump.jsonl:2: the mask must hold 0/1 or true/false, got '1' at index 1"),
    ],
)
def test_an_import_refuses_at_the_line_what_report_would_refuse(tmp_path, bad, message):
    from mismatchscope.errors import ImportFormatError
    from mismatchscope.importers import import_run

    good = {**GOOD_DICT, "advantages": 0.5, "mask": [1, 1, 1]}
    src = _jsonl(tmp_path / "dump.jsonl", good, {**good, **bad})
    with pytest.raises(ImportFormatError) as e:
        import_run("jsonl", src, tmp_path / "out")
    assert str(e.value).startswith(message), str(e.value)
    assert not (tmp_path / "out").exists()  # nothing written
    r = cli("import", "jsonl", str(src), "--out", str(tmp_path / "out"))
    assert r.returncode == 2 and r.stderr.startswith("error: ") and r.stderr.count("\n") == 1, r.stderr
    assert not (tmp_path / "out").exists()
    skipped = import_run("jsonl", src, tmp_path / "skipped", skip_bad=True)  # --skip-bad: skipped and counted
    assert (skipped.sequences, skipped.bad_records_skipped) == (1, 1)
    assert cli("report", str(tmp_path / "skipped")).returncode == 0


def _records(tmp_path, *records: dict) -> Path:
    path = tmp_path / "d.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


PAIR = {"token_ids": [5, 6, 7], "sampler_logprobs": [-0.5, -0.6, -0.7], "trainer_logprobs": [-0.4, -0.6, -0.8]}


@pytest.mark.parametrize(
    "first, later, message",
    [
        # a mask from record 2 on: its 0 once kept the token it masks
        ({}, {"mask": [1, 0, 1]}, r"d.jsonl:2: holds 'mask' \(mask\), which the import's first record \(d.jsonl:1\)"),
        # a mask on record 1 only: record 2's tokens would all be kept as generated
        ({"mask": [1, 0, 1]}, {}, r"d.jsonl:2: lacks 'mask' \(mask\), which the import's first record \(d.jsonl:1\)"),
        # a sequence_id appearing later was renumbered, a duplicate never reported
        ({}, {"sequence_id": 0}, r"d.jsonl:2: holds 'sequence_id'"),
        # advantages appearing later were dropped
        ({}, {"advantages": 0.5}, r"d.jsonl:2: holds 'advantages' \(advantage\)"),
        ({"mask": None}, {"mask": [1, 1, 1]}, r"d.jsonl:2: holds 'mask'"),
    ],
)
def test_a_field_that_comes_and_goes_is_refused_naming_both_records(tmp_path, first, later, message):
    path = _records(tmp_path, {**PAIR, **first}, {**PAIR, **later})
    for skip_bad in (False, True):  # a property of the file: --skip-bad would skip every record but one
        with pytest.raises(ImportFormatError, match=message):
            import_run("jsonl", path, tmp_path / "out", skip_bad=skip_bad)
    assert not (tmp_path / "out").exists()


def test_a_reward_missing_on_one_record_is_empty_there(tmp_path):
    """reward (and trainer_entropy) may be absent on a record: NaN for its tokens, the others' kept."""
    path = _records(tmp_path, {**PAIR, "reward": 1.0}, PAIR)
    import_run("jsonl", path, tmp_path / "out")
    rewards = read(tmp_path / "out")["reward"]
    assert rewards[:3].tolist() == [1.0] * 3 and np.isnan(rewards[3:]).all()


def test_a_null_mask_list_in_parquet_is_called_null(tmp_path):
    """Row 0's mask is a null list: once 'mask length differs from token_ids'."""
    table = pa.table(
        {
            "token_ids": [[1, 2, 3], [1, 2, 3]],
            "sampler_logprobs": [[-1.0, -1.0, -1.0]] * 2,
            "trainer_logprobs": [[-1.0, -1.0, -1.0]] * 2,
            "mask": pa.array([None, [1, 1, 1]], pa.list_(pa.int64())),
        }
    )
    pq.write_table(table, tmp_path / "d.parquet")
    with pytest.raises(ImportFormatError, match=r"d.parquet \(record 0\): mask is null, not a list"):
        import_run("parquet", tmp_path / "d.parquet", tmp_path / "out")
