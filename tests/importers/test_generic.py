"""Generic one-row-per-sequence dumps (JSONL and Parquet), and the probe round trip.

The round trip pins the promise of the generic layout: a probe's token pairs,
written out one row per sequence and imported back, come back bit for bit.
"""

from __future__ import annotations

import json
import math

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest

from mismatchscope.errors import ImportFormatError, InputError, UsageError
from mismatchscope.importers import import_run
from mismatchscope.schema import write_table
from tests.helpers import (
    cli,
    error_line,
    jsonl_dump,
)

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
