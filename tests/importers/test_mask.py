"""A loss mask holds 0/1 (or true/false) in every importer; any other value is refused with one line.

2 or 0.5 reads as a loss weight, -1 as a padding marker, null as a hole: none has a keep/drop reading, and
read with ``!= 0`` (or ``== 1``) they were once kept (or dropped) without a word. Each format below holds one
sequence of two generated tokens whose mask is ``[1, BAD]``; the refusal names the field, the value, its index
(1: the second response token, or its place in the whole sequence where the dump masks the prompt too) and the fix.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.helpers import cli
from tests.importers.layouts import (
    GOOD,
    GOOD_COLUMNS,
    jsonl_file,
    nemo_sample,
    prime_record,
    slime_train_sample,
    write_nemo_step,
    write_prime_step,
)
from tests.inputs import error_line

BAD = [2, 0.5, -1]
FIX = "a loss mask must be 0 (not trained on) or 1 (trained on)"


def _refused(fmt: str, src, tmp_path) -> str:
    r = cli("import", fmt, str(src), "--out", str(tmp_path / "out"))
    line = error_line(r)
    assert FIX in line, line
    assert not (tmp_path / "out" / "manifest.json").exists()
    return line


@pytest.mark.parametrize("value", BAD + [None], ids=["2", "0.5", "-1", "null"])
def test_jsonl_mask(tmp_path, value):
    shown = "null" if value is None else f"{value:g}"
    path = jsonl_file(tmp_path, GOOD + f', "mask": [1, {"null" if value is None else value}]}}\n')
    assert f"d.jsonl:1: the mask must hold 0/1 or true/false, got {shown} at index 1" in _refused(
        "jsonl", path, tmp_path
    )


@pytest.mark.parametrize("value", BAD + [None], ids=["2", "0.5", "-1", "null"])
def test_parquet_mask(tmp_path, value):
    path = tmp_path / "d.parquet"
    pq.write_table(pa.table({**GOOD_COLUMNS, "mask": pa.array([[1.0, value]], pa.list_(pa.float64()))}), path)
    shown = "null" if value is None else f"{value:g}"
    assert f"d.parquet (record 0): the mask must hold 0/1 or true/false, got {shown} at index 1" in _refused(
        "parquet", path, tmp_path
    )


def test_parquet_skip_bad_skips_only_the_bad_row(tmp_path):
    # row 0: mask [1, 2] (refused and counted); row 1: mask [1, 0] keeps token 5 only
    path = tmp_path / "d.parquet"
    cols = {k: v * 2 for k, v in GOOD_COLUMNS.items()}
    pq.write_table(pa.table({**cols, "mask": [[1, 2], [1, 0]]}), path)
    r = cli("import", "parquet", str(path), "--out", str(tmp_path / "out"), "--skip-bad", "--format", "json")
    assert r.returncode == 0, r.stderr
    assert '"bad_records_skipped": 1' in r.stdout and '"tokens_written": 1' in r.stdout


@pytest.mark.parametrize("value", BAD, ids=["2", "0.5", "-1"])
def test_prime_rl_mask(tmp_path, value):
    rec = prime_record([1, 2], [5, 6], [-0.5, -1.0], [-0.4, -1.1], 1.0, 1.0, step=0, rank=0, idx=0, mask=[True, value])
    write_prime_step(tmp_path / "src", 0, 0, [rec])
    # the exported loss_mask covers the 2 prompt tokens too: the bad value is the sequence's index 3
    assert f"loss_mask must hold 0/1 or true/false, got {value:g} at index 3" in _refused(
        "prime-rl", tmp_path / "src", tmp_path
    )


@pytest.mark.parametrize("value", BAD, ids=["2", "0.5", "-1"])
def test_nemo_rl_mask(tmp_path, value):
    s = nemo_sample([1, 2], [5, 6], [-0.5, -1.0], [-0.4, -1.1], 1.0, 1.0, mask=[1, value])
    write_nemo_step(tmp_path / "src", 1, [s])
    assert f"token_loss_mask must hold 0/1 or true/false, got {value:g} at index 3" in _refused(
        "nemo-rl", tmp_path / "src", tmp_path
    )


@pytest.mark.parametrize("value", [2, -1], ids=["2", "-1"])
def test_slime_mask(tmp_path, value):
    from tests.importers.layouts import write_slime

    s = slime_train_sample(
        [1, 2], [5, 6], [-0.5, -1.0], [-0.4, -1.1], 1.0, loss_mask=[1, value], position=0, sample_index=0
    )
    write_slime(tmp_path / "src", 0, [s], None)
    assert f"loss_masks must hold 0/1 or true/false, got {value:g} at index 1" in _refused(
        "slime", tmp_path / "src", tmp_path
    )
