"""Turns from every stack's multi-turn mask: each import carries ``turn``/``turn_position`` matching the runs of 1s
in the source's mask, and an import of single turns is written exactly as before (no turn column anywhere).

The SkyRL, verl and ROLL dumps are the ones their own code wrote (``tests/data/stack_dumps/build.py``): their
second sequence's loss mask over the completion is ``[1, 1, 0, 1, 1]``, a tool token between two turns. NeMo-RL,
prime-rl and slime dumps are written in their exact layouts (``layouts.py``) with a tool span in the response.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from mismatchscope.schema import TURN_COLUMNS
from tests.helpers import cli
from tests.importers.layouts import (
    import_cli,
    jsonl_file,
    nemo_sample,
    parquet_file,
    prime_record,
    slime_train_sample,
    write_nemo_step,
    write_prime_step,
    write_slime,
)
from tests.inputs import error_line

DUMPS = Path(__file__).resolve().parents[1] / "data" / "stack_dumps"


def _turns(out: Path) -> dict[int, tuple[list[int], list[int]]]:
    """sequence -> (turn, turn_position) in position order, from every shard of the import."""
    t = pq.read_table(out / "tokens").sort_by([("sequence_id", "ascending"), ("position", "ascending")]).to_pydict()
    by: dict[int, tuple[list[int], list[int]]] = {}
    for s, k, j in zip(t["sequence_id"], t["turn"], t["turn_position"], strict=True):
        by.setdefault(s, ([], []))
        by[s][0].append(k)
        by[s][1].append(j)
    return by


def _imported(fmt: str, src, out: Path, *args: str) -> Path:
    r = import_cli(fmt, src, out, *args)
    assert r.returncode == 0, r.stderr
    return out


@pytest.mark.parametrize("fmt", ["skyrl", "verl", "roll"])
def test_a_stack_dump_s_tool_token_splits_its_sequence_into_two_turns(fmt, tmp_path):
    out = _imported(fmt, DUMPS / fmt, tmp_path / "out")
    # masks [1]*6, [1, 1, 0, 1, 1], [1]*3: only the second sequence has two runs of kept tokens
    assert _turns(out) == {
        0: ([0] * 6, list(range(6))),
        1: ([0, 0, 1, 1], [0, 1, 0, 1]),
        2: ([0] * 3, [0, 1, 2]),
    }
    assert set(TURN_COLUMNS) <= set(json.loads((out / "manifest.json").read_text())["columns"])


def test_nemo_rl_token_loss_mask_runs_are_turns(tmp_path):
    # response: turn 0 (3 tokens), a tool span of 2, turn 1 (2 tokens); then one more sample of one turn
    tool = nemo_sample(
        [1, 2], [10, 11, 12, 90, 91, 13, 14], [-0.5] * 7, [-0.4] * 7, 1.0, 1.0, mask=[1, 1, 1, 0, 0, 1, 1]
    )
    plain = nemo_sample([1, 2], [20, 21], [-0.5] * 2, [-0.4] * 2, 1.0, 1.0)
    write_nemo_step(tmp_path / "logs", 1, [tool, plain])
    out = _imported("nemo-rl", tmp_path / "logs", tmp_path / "out")
    assert _turns(out) == {0: ([0, 0, 0, 1, 1], [0, 1, 2, 0, 1]), 1: ([0, 0], [0, 1])}


def test_prime_rl_loss_mask_runs_are_turns(tmp_path):
    mask = [True, True, False, True, False, False, True]
    rec = prime_record(
        [1, 2, 3], [10, 11, 90, 12, 91, 92, 13], [-0.5] * 7, [-0.4] * 7, 1.0, 1.0, step=0, rank=0, idx=0, mask=mask
    )
    write_prime_step(tmp_path / "run", 0, 0, [rec])
    out = _imported("prime-rl", tmp_path / "run", tmp_path / "out")
    assert _turns(out) == {0: ([0, 0, 1, 2], [0, 1, 0, 0])}


def test_slime_loss_masks_runs_are_turns(tmp_path):
    sample = slime_train_sample(
        [1, 2], [10, 11, 90, 12, 13], [-0.5] * 5, [-0.4] * 5, 1.0, loss_mask=[1, 1, 0, 1, 1], position=0, sample_index=0
    )
    write_slime(tmp_path / "dump", 0, [sample], None)
    out = _imported("slime", tmp_path / "dump", tmp_path / "out")
    assert _turns(out) == {0: ([0, 0, 1, 1], [0, 1, 0, 1])}


GOOD = '"sampler_logprobs": [-0.5, -1.0, -0.2, -0.3], "trainer_logprobs": [-0.4, -1.1, -0.2, -0.3]'


def test_jsonl_takes_an_explicit_turn_else_the_mask(tmp_path):
    text = '{"token_ids": [5, 6, 7, 8], ' + GOOD + ', "turn": [0, 0, 1, 1], "mask": [1, 1, 1, 1]}\n'
    out = _imported("jsonl", jsonl_file(tmp_path, text), tmp_path / "out")
    assert _turns(out) == {0: ([0, 0, 1, 1], [0, 1, 0, 1])}
    text = '{"token_ids": [5, 6, 7, 8], ' + GOOD + ', "mask": [1, 0, 1, 1]}\n'
    out = _imported("jsonl", jsonl_file(tmp_path, text, "m.jsonl"), tmp_path / "out2")
    assert _turns(out) == {0: ([0, 1, 1], [0, 0, 1])}


def test_parquet_takes_an_explicit_turn_else_the_mask(tmp_path):
    cols = {
        "token_ids": [[5, 6, 7, 8], [5, 6, 7, 8], [5, 6]],
        "sampler_logprobs": [[-0.5, -1.0, -0.2, -0.3]] * 2 + [[-0.5, -1.0]],
        "trainer_logprobs": [[-0.4, -1.1, -0.2, -0.3]] * 2 + [[-0.4, -1.1]],
        "turn": [[0, 0, 1, 2], [0, 0, 0, 0], [0, 0]],
        "mask": [[1, 1, 1, 1], [1, 1, 0, 1], [1, 1]],
    }
    out = _imported("parquet", parquet_file(tmp_path, cols), tmp_path / "out")
    # the explicit turn wins over the mask: the second row is one turn (its mask only drops a token)
    assert _turns(out) == {0: ([0, 0, 1, 2], [0, 1, 0, 0]), 1: ([0, 0, 0], [0, 1, 2]), 2: ([0, 0], [0, 1])}
    del cols["turn"]
    out = _imported("parquet", parquet_file(tmp_path, cols, "m.parquet"), tmp_path / "out2")
    assert _turns(out) == {0: ([0] * 4, [0, 1, 2, 3]), 1: ([0, 0, 1], [0, 1, 0]), 2: ([0, 0], [0, 1])}


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_a_turn_that_decreases_is_a_bad_record_one_line_exit_2(fmt, tmp_path):
    if fmt == "jsonl":
        src = jsonl_file(tmp_path, '{"token_ids": [5, 6, 7, 8], ' + GOOD + ', "turn": [0, 1, 0, 1]}\n')
    else:
        cols = {
            "token_ids": [[5, 6, 7, 8]],
            "sampler_logprobs": [[-0.5, -1.0, -0.2, -0.3]],
            "trainer_logprobs": [[-0.4, -1.1, -0.2, -0.3]],
            "turn": [[0, 1, 0, 1]],
        }
        src = parquet_file(tmp_path, cols)
    line = error_line(import_cli(fmt, src, tmp_path / "out"))
    assert "turn: turn decreases within a sequence: 1 then 0 at kept token 2" in line
    assert not (tmp_path / "out").exists()


def test_a_bad_turn_is_skipped_with_skip_bad(tmp_path):
    text = (
        '{"token_ids": [5, 6, 7, 8], ' + GOOD + ', "turn": [0, 1, 0, 1]}\n'
        '{"token_ids": [5, 6, 7, 8], ' + GOOD + ', "turn": [0, 1, 1, 2]}\n'
    )
    out = _imported("jsonl", jsonl_file(tmp_path, text), tmp_path / "out", "--skip-bad")
    assert _turns(out) == {0: ([0, 1, 1, 2], [0, 0, 1, 0])}


def test_a_single_turn_import_writes_no_turn_column_and_reads_as_before(tmp_path):
    plain = nemo_sample([1, 2], [20, 21, 22], [-0.5] * 3, [-0.4] * 3, 1.0, 1.0)
    write_nemo_step(tmp_path / "logs", 1, [plain, plain])
    out = _imported("nemo-rl", tmp_path / "logs", tmp_path / "out")
    for shard in (out / "tokens").glob("*.parquet"):
        assert not set(TURN_COLUMNS) & set(pq.read_schema(shard).names)
    assert "turn" not in json.loads((out / "manifest.json").read_text())["columns"]
    report = json.loads(cli("report", str(out), "--format", "json").stdout)
    assert "turn" not in report["breakdowns"]


def test_a_turn_is_whole_across_the_shards_a_long_import_splits_it_over(tmp_path):
    """Shards of single turns (no columns) among shards with turns read as one run with every turn in place."""
    samples = [nemo_sample([1, 2], [20 + i, 21, 22], [-0.5] * 3, [-0.4] * 3, 1.0, 1.0) for i in range(4)]
    samples.append(nemo_sample([1], [30, 31, 90, 32], [-0.5] * 4, [-0.4] * 4, 1.0, 1.0, mask=[1, 1, 0, 1]))
    write_nemo_step(tmp_path / "logs", 1, samples)
    from mismatchscope.importers import import_run

    import_run("nemo-rl", tmp_path / "logs", tmp_path / "out", flush_tokens=5)
    shards = sorted((tmp_path / "out" / "tokens").glob("*.parquet"))
    with_turns = [bool(set(TURN_COLUMNS) & set(pq.read_schema(s).names)) for s in shards]
    assert with_turns[0] is False and with_turns[-1] is True
    rows = json.loads(cli("report", str(tmp_path / "out"), "--format", "json").stdout)["breakdowns"]["turn"]
    assert [(r["bucket"], r["tokens"]) for r in rows] == [("0", 14), ("1", 1)]
    assert np.all([r["tokens"] for r in rows])
