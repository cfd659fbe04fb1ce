"""The Recorder's multi-turn rows: ``turn_ids`` given, or the turns of the response mask's runs; the run reads as
turns in every view, and a step of single turns writes no turn column."""

from __future__ import annotations

import json

import numpy as np
import pyarrow.parquet as pq
import pytest

from mismatchscope.errors import RecorderInputError
from mismatchscope.live import Recorder
from tests.helpers import cli

# Two rows of T = 8: row 0 is prompt-free turn 0 (t = 0..2), a tool span (t = 3, 4), turn 1 (t = 5, 6), padding;
# row 1 is one turn (t = 0..3).
MASK = np.array([[1, 1, 1, 0, 0, 1, 1, 0], [1, 1, 1, 1, 0, 0, 0, 0]])
LQ = np.full((2, 8), -1.0)
LP = np.full((2, 8), -1.0)
LP[0, 5:7] = -1.5  # the gap sits in row 0's second turn: l = -0.5 on its two tokens


def _rows(run) -> dict:
    return pq.read_table(run / "tokens").sort_by([("sequence_id", "ascending"), ("position", "ascending")]).to_pydict()


def test_the_mask_s_runs_are_the_turns(tmp_path):
    with Recorder(tmp_path / "run") as rec:
        rec.add(0, LQ, LP, MASK)
    t = _rows(tmp_path / "run")
    # positions are the index along T, so turn 1 starts at position 5 with turn_position 0
    assert t["position"] == [0, 1, 2, 5, 6, 0, 1, 2, 3]
    assert t["turn"] == [0, 0, 0, 1, 1, 0, 0, 0, 0]
    assert t["turn_position"] == [0, 1, 2, 0, 1, 0, 1, 2, 3]
    r = cli("report", str(tmp_path / "run"), "--format", "json")
    assert r.returncode == 0, r.stderr
    report = json.loads(r.stdout)
    rows = report["breakdowns"]["turn"]
    assert [(x["bucket"], x["tokens"], x["abs_logprob_diff_mean"]) for x in rows] == [("0", 7, 0.0), ("1", 2, 0.5)]
    assert not any("gaps in their positions" in w for w in report["warnings"])  # a tool span is not a gap


def test_turn_ids_name_the_turns(tmp_path):
    turn_ids = np.array([[0, 0, 0, 0, 0, 1, 1, 0], [0, 0, 1, 1, 0, 0, 0, 0]])
    with Recorder(tmp_path / "run") as rec:
        rec.add(0, LQ, LP, MASK, turn_ids=turn_ids)
    t = _rows(tmp_path / "run")
    assert t["turn"] == [0, 0, 0, 1, 1, 0, 0, 1, 1]
    assert t["turn_position"] == [0, 1, 2, 0, 1, 0, 1, 0, 1]


def test_a_step_of_single_turns_writes_no_turn_column_and_the_run_still_reads_its_turns(tmp_path):
    with Recorder(tmp_path / "run") as rec:
        rec.add(0, LQ, LP)  # no mask: one turn a row
        rec.add(1, LQ, LP, MASK)
    shards = sorted((tmp_path / "run" / "tokens").glob("*.parquet"))
    assert ["turn" in pq.read_schema(s).names for s in shards] == [False, True]
    report = json.loads(cli("report", str(tmp_path / "run"), "--format", "json").stdout)
    assert [(x["bucket"], x["tokens"]) for x in report["breakdowns"]["turn"]] == [("0", 16 + 7), ("1", 2)]


@pytest.mark.parametrize(
    ("turn_ids", "message"),
    [
        (
            np.array([[0, 0, 1, 0, 0, 0, 0, 0], [0] * 8]),
            "step 0: turn_ids: turn decreases along row 0: 1 at position 2, then 0 at position 5",
        ),
        (np.array([[0.5] * 8, [0] * 8]), "turn_ids must hold integers"),
        (np.zeros((2, 7), int), "turn_ids has shape (2, 7), expected (2, 8)"),
    ],
)
def test_bad_turn_ids_are_one_clear_error(tmp_path, turn_ids, message):
    with (
        Recorder(tmp_path / "run") as rec,
        pytest.raises(RecorderInputError, match=message.replace("(", r"\(").replace(")", r"\)")),
    ):
        rec.add(0, LQ, LP, MASK, turn_ids=turn_ids)


def test_timeline_by_turn_follows_each_turn_per_step(tmp_path):
    with Recorder(tmp_path / "run") as rec:
        for step in range(3):
            rec.add(step, LQ, LP, MASK)
    r = cli("timeline", str(tmp_path / "run"), "--by", "turn", "--format", "json")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["by"] == "turn" and d["groups"] == [0, 1]
    # every step: turn 0 holds 7 tokens with l = 0, turn 1 two tokens with |l| = 0.5
    got = {(row["group"], row["step"]): (row["tokens"], row["abs_logprob_diff_mean"]) for row in d["rows"]}
    assert got == {(g, s): ((7, 0.0) if g == 0 else (2, 0.5)) for g in (0, 1) for s in range(3)}


def test_timeline_by_turn_on_single_turns_is_one_short_line(tmp_path):
    with Recorder(tmp_path / "run") as rec:
        rec.add(0, LQ[1:], LP[1:], MASK[1:])  # one turn: the step writes no turn column
    r = cli("timeline", str(tmp_path / "run"), "--by", "turn")
    assert r.returncode == 2 and not r.stdout
    # the sentence and its hint, not the file's column list
    assert r.stderr.strip() == (
        "error: --by turn: the input has no turn column (its sequences are one turn each) (multi-turn runs carry "
        "turn and turn_position (docs/multi-turn.md))"
    )
