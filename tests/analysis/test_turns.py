"""A multi-turn run through the analysis pass: the turns checked, ``report``'s breakdown by turn against numbers
derived by hand, ``compare-masks --by turn`` summing back to the run's counts, and the refusals."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from mismatchscope.analysis.turns import TurnTracker, turn_rows
from mismatchscope.errors import TurnOrderError
from mismatchscope.schema import write_table
from tests.helpers import cli
from tests.inputs import error_line

# Two conversations, logprobs chosen so every number below is a short sum (l = log p - log q):
#   sequence 0: turn 0 = positions 0, 1 with l = 0, 0; turn 1 = positions 2, 3 with l = -0.5, +0.5
#   sequence 1: turn 0 = position 0 with l = 0;        turn 1 = position 1 with l = +1
TURNS = {
    "sequence_id": [0, 0, 0, 0, 1, 1],
    "position": [0, 1, 2, 3, 0, 1],
    "token_id": [5, 6, 7, 8, 5, 9],
    "sampler_logprob": [-1.0, -1.0, -1.0, -1.0, -2.0, -2.0],
    "trainer_logprob": [-1.0, -1.0, -1.5, -0.5, -2.0, -1.0],
    "turn": [0, 0, 1, 1, 0, 1],
    "turn_position": [0, 1, 0, 1, 0, 0],
}


@pytest.fixture
def run(tmp_path):
    return str(write_table(tmp_path / "turns.parquet", TURNS))


def _json(*args) -> dict:
    r = cli(*args, "--format", "json")
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def test_report_breaks_the_gap_down_by_turn_as_derived_by_hand(run):
    rows = _json("report", run)["breakdowns"]["turn"]
    assert [(r["bucket"], r["tokens"]) for r in rows] == [("0", 3), ("1", 3)]
    # turn 0: every l = 0, so every mean is 0 and ESS/n is 1
    assert rows[0]["abs_logprob_diff_mean"] == 0 and rows[0]["k3_mean"] == 0 and rows[0]["ess"] == 1
    # turn 1: l = -0.5, 0.5, 1 -> mean |l| = 2/3; k3 = r - 1 - l = mean(e^-0.5 - 0.5, e^0.5 - 1.5, e - 2) = 0.32451
    assert rows[1]["abs_logprob_diff_mean"] == pytest.approx(2 / 3)
    k3 = (math.exp(-0.5) - 0.5 + math.exp(0.5) - 1.5 + math.e - 2) / 3
    assert rows[1]["k3_mean"] == pytest.approx(k3) and k3 == pytest.approx(0.32451, abs=1e-5)
    # |p - q| per token: |e^-1.5 - e^-1|, |e^-0.5 - e^-1|, |e^-1 - e^-2|
    tv = (abs(math.exp(-1.5) - math.exp(-1)) + abs(math.exp(-0.5) - math.exp(-1)) + math.exp(-1) - math.exp(-2)) / 3
    assert rows[1]["tv_token_mean"] == pytest.approx(tv)


def test_report_names_the_turn_with_the_largest_gap(run):
    r = cli("report", run)
    assert r.returncode == 0, r.stderr
    text = " ".join(r.stdout.split())
    assert "By turn" in text
    assert "Turn 1 has the largest gap: mean |log p - log q| 0.6667 over 3 tokens; the other turns have none." in text


def test_compare_masks_by_turn_sums_back_to_the_whole_run(run):
    # icepop [0.7, 2]: r = e^-0.5 = 0.61 and e^1 = 2.72 leave it (both in turn 1), e^0.5 = 1.65 stays.
    # seq-mis [0.5, 2]: sequence 1's product e^(0 + 1) = 2.72 leaves it, so both its tokens (turn 0 and turn 1).
    d = _json(
        "compare-masks", run, "--by", "turn", "--rule", "icepop:alpha=0.7,beta=2", "--rule", "seq-mis:lo=0.5,hi=2"
    )
    assert d["tokens_by_turn"] == {"0": 3, "1": 3}
    icepop, seq_mis = d["rules"]
    assert icepop["rejected_by_turn"] == {"0": 0, "1": 2} and icepop["tokens_rejected"] == 2
    assert seq_mis["rejected_by_turn"] == {"0": 1, "1": 1} and seq_mis["tokens_rejected"] == 2
    for rule in d["rules"]:
        assert sum(rule["rejected_by_turn"].values()) == rule["tokens_rejected"]
        assert sum(rule["reweighted_by_turn"].values()) == rule["tokens_reweighted"]


def test_compare_masks_by_turn_sums_back_under_every_default_rule(tmp_path):
    rng = np.random.default_rng(3)
    n_seq, turns, per_turn = 40, 4, 6
    cols: dict[str, list] = {k: [] for k in TURNS}
    for s in range(n_seq):
        for k in range(turns):
            for j in range(per_turn):
                cols["sequence_id"].append(s)
                cols["position"].append(k * per_turn + j)
                cols["token_id"].append(int(rng.integers(3, 300)))
                q = float(rng.uniform(-4, -0.01))
                cols["sampler_logprob"].append(q)
                cols["trainer_logprob"].append(min(0.0, q + float(rng.normal(0, 0.3 * (k + 1)))))
                cols["turn"].append(k)
                cols["turn_position"].append(j)
    path = str(write_table(tmp_path / "many.parquet", cols))
    d = _json("compare-masks", path, "--by", "turn")
    assert sum(d["tokens_by_turn"].values()) == d["tokens"] == n_seq * turns * per_turn
    assert any(r["tokens_rejected"] for r in d["rules"])
    for rule in d["rules"]:
        assert sum(rule["rejected_by_turn"].values()) == pytest.approx(rule["tokens_rejected"])
        assert sum(rule["reweighted_by_turn"].values()) == pytest.approx(rule["tokens_reweighted"])


def test_a_single_turn_file_reads_as_before(tmp_path):
    plain = {k: v for k, v in TURNS.items() if not k.startswith("turn")}
    path = str(write_table(tmp_path / "plain.parquet", plain))
    d = _json("report", path)
    assert "turn" not in d["breakdowns"]
    masks = _json("compare-masks", path)
    assert "tokens_by_turn" not in masks and all("rejected_by_turn" not in r for r in masks["rules"])
    assert "By turn" not in cli("report", path).stdout


def test_a_shard_without_turns_among_multi_turn_ones_holds_one_turn_a_sequence(tmp_path):
    folder = tmp_path / "run"
    folder.mkdir()
    write_table(folder / "a.parquet", TURNS)
    single = {k: v for k, v in TURNS.items() if not k.startswith("turn")}
    single["sequence_id"] = [7] * 6
    single["position"] = list(range(6))
    write_table(folder / "b.parquet", single)
    rows = _json("report", str(folder))["breakdowns"]["turn"]
    assert [(r["bucket"], r["tokens"]) for r in rows] == [("0", 9), ("1", 3)]


@pytest.mark.parametrize(
    ("turn", "turn_position", "message"),
    [
        (
            [0, 1, 0, 1, 0, 1],
            [0, 0, 0, 0, 0, 0],
            "turn decreases within sequence 0: position 1 is in turn 1, the later position 2 in turn 0",
        ),
        (
            [0, 0, 1, 1, 0, 1],
            [0, 1, 2, 3, 0, 0],
            "turn_position does not restart where turn 1 of sequence 0 begins (position 2 has turn_position 2)",
        ),
        ([0, 0, 1, 1, 0, 1], [0, 1, 0, 0, 0, 0], "turn_position does not count up with position within turn 1"),
    ],
)
def test_turns_out_of_order_are_one_line_and_exit_2_in_every_command(tmp_path, turn, turn_position, message):
    path = str(write_table(tmp_path / "bad.parquet", {**TURNS, "turn": turn, "turn_position": turn_position}))
    for command in ("report", "compare-masks", "doctor"):
        line = error_line(cli(command, path))
        assert message in line, (command, line)


def test_a_turn_column_without_turn_position_is_refused(tmp_path):
    cols = {k: v for k, v in TURNS.items() if k != "turn_position"}
    path = write_table(tmp_path / "half.parquet", cols)
    line = error_line(cli("report", str(path)))
    assert "has a 'turn' column but no 'turn_position'" in line


def test_by_turn_on_a_single_turn_run_is_refused(tmp_path):
    plain = {k: v for k, v in TURNS.items() if not k.startswith("turn")}
    path = str(write_table(tmp_path / "plain.parquet", plain))
    assert "--by turn:" in error_line(cli("compare-masks", path, "--by", "turn"))


def test_the_check_holds_however_a_sequence_is_split_over_batches():
    seq = np.array([0, 0, 0, 0, 0, 0])
    pos = np.arange(6)
    turn = np.array([0, 0, 1, 1, 2, 2])
    tpos = np.array([0, 1, 0, 1, 0, 1])
    for cut in ([2, 5], [1, 3], [4]):
        tracker = TurnTracker()
        for part in np.split(np.arange(6), cut)[::-1]:  # batches arrive in any order
            tracker.add(turn_rows(seq[part], pos[part], turn[part], tpos[part]))
        rows = tracker.finish()
        assert rows.turn.tolist() == [0, 1, 2] and rows.tokens.tolist() == [2, 2, 2]
    bad = TurnTracker()  # the same rows with turn 1 and 2 swapped, cut between them
    swapped = np.array([0, 0, 2, 2, 1, 1])
    bad.add(turn_rows(seq[:3], pos[:3], swapped[:3], tpos[:3]))
    bad.add(turn_rows(seq[3:], pos[3:], swapped[3:], tpos[3:]))
    with pytest.raises(TurnOrderError, match="turn decreases"):
        bad.finish()
