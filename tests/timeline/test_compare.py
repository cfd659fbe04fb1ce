"""``timeline RUN_A RUN_B --x step|wall``: runs side by side, against steps or the Recorder's wall clock."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from mismatchscope.errors import RecorderInputError, UsageError
from mismatchscope.live import Recorder
from mismatchscope.render.timeline_comparison_table import time_unit
from mismatchscope.timeline.compare import RunLine, SkippedStep, StepPoint, TimelineComparison, compare
from tests.helpers import cli


def _run(path, seconds: float, diff: float, steps: int = 3):
    """A Recorder run: 2 sequences x 4 tokens per step, rewards 1 and 0, |log p - log q| = diff on every token."""
    with Recorder(path) as rec:
        for s in range(steps):
            lq = np.full((2, 4), -0.5)
            rec.add(s, lq, lq - diff, rewards=[1.0, 0.0], sampling_seconds=seconds / 2, training_seconds=seconds / 2)
    return str(path)


def test_the_slower_runs_cost_per_step_and_hours_from_its_own_clock(tmp_path):
    fast, slow = _run(tmp_path / "fast", 2.0, 0.25), _run(tmp_path / "slow", 6.0, 0.0)
    c = compare([fast, slow], "wall")
    # recorded seconds: 1 + 1 = 2 s and 3 + 3 = 6 s per step, so the slow run costs 6 / 2 = 3x
    assert c.fastest == fast and c.cost_per_step == {fast: 1.0, slow: 3.0}
    assert c.statement.startswith(f"{slow} costs 3.00x per step: a median 6 s against 2 s")
    first = c.runs[1].steps[0]
    # the run starts its first step's own 6 s before that step's stamp
    assert first.hours == pytest.approx(6.0 / 3600)
    # reward: sequences 1 and 0 count once each (not once per token): 0.5
    assert first.reward_mean == 0.5 and first.abs_logprob_diff_mean == 0.0 and first.unequal_share == 0.0
    assert c.runs[0].steps[2].abs_logprob_diff_mean == pytest.approx(0.25) and c.runs[0].steps[2].unequal_share == 1
    hours = [p.hours or 0.0 for p in c.runs[1].steps]
    assert hours == sorted(hours) and hours[0] > 0


def test_wall_without_wall_times_names_the_runs_that_lack_them(tmp_path):
    timed = _run(tmp_path / "timed", 2.0, 0.1)
    bare = tmp_path / "bare.parquet"
    pq.write_table(
        pa.table(
            {
                "sequence_id": [0, 0],
                "position": pa.array([0, 1], pa.int32()),
                "token_id": [5, 6],
                "sampler_logprob": [-0.5, -0.4],
                "trainer_logprob": [-0.5, -0.3],
                "step": [0, 1],
            }
        ),
        bare,
    )
    with pytest.raises(UsageError, match=f"{bare} has none"):
        compare([timed, str(bare)], "wall")
    assert compare([timed, str(bare)], "step").runs[1].seconds_source == "none"
    r = cli("timeline", timed, str(bare), "--x", "wall")
    assert r.returncode == 2 and r.stderr.startswith("error: --x wall needs wall times") and "Traceback" not in r.stderr


def test_the_json_document_has_its_version_and_the_table_reads_at_80_columns(tmp_path):
    a, b = _run(tmp_path / "a", 2.0, 0.1), _run(tmp_path / "b", 4.0, 0.0)
    doc = json.loads(cli("timeline", a, b, "--x", "wall", "--format", "json").stdout)
    assert doc["schema_version"] == 1 and doc["x"] == "wall" and len(doc["runs"]) == 2
    assert doc["cost_per_step"][b] == 2.0
    out = cli("timeline", a, b, "--x", "step", env={"COLUMNS": "80"}).stdout
    assert all(len(line) <= 80 for line in out.splitlines() if line.startswith(("┃", "│")))
    assert "costs 2.00x per step" in " ".join(out.split())  # the statement wraps at 80 columns


def test_step_timings_must_be_non_negative_numbers(tmp_path):
    with Recorder(tmp_path / "r") as rec, pytest.raises(RecorderInputError, match="sampling_seconds"):
        rec.add(0, np.zeros((1, 2)) - 1, np.zeros((1, 2)) - 1, sampling_seconds=-1.0)


def test_one_run_options_are_refused_in_a_comparison(tmp_path):
    a, b = _run(tmp_path / "a", 2.0, 0.1), _run(tmp_path / "b", 2.0, 0.1)
    r = cli("timeline", a, b, "--by", "rank")
    assert r.returncode == 2 and r.stderr.startswith("error: --by applies to one run's timeline")
    r = cli("timeline", a, "--x", "hours")
    assert r.returncode == 2 and "--x 'hours'" in r.stderr


def test_the_bundled_runs_compare_against_wall_clock_and_only_the_zero_run_certifies():
    from mismatchscope.bundled import sample_dir
    from mismatchscope.certify import certify_run

    runs = sample_dir() / "runs"
    default, zero = str(runs / "rl-default"), str(runs / "rl-zero")
    c = compare([default, zero], "wall")
    assert [len(line.steps) for line in c.runs] == [8, 8] and all(line.seconds_source == "recorded" for line in c.runs)
    assert c.fastest == default and c.cost_per_step[zero] > 1  # recomputing every step costs time
    assert all(p.abs_logprob_diff_mean == 0 and p.unequal_share == 0 for p in c.runs[1].steps)
    assert all(p.unequal_share > 0 for p in c.runs[0].steps)
    verdict = certify_run(zero)
    assert verdict.certified and len(verdict.pairings) == 3  # rollout, recompute and the loss's forward: all equal
    assert not certify_run(default).certified
    assert cli("report", default).returncode == 0


def _spanning(hours: float) -> TimelineComparison:
    line = RunLine("r", [StepPoint(0, 0.0, None, 0.0, 0.0, 1), StepPoint(1, hours, None, 0.0, 0.0, 1)], True, 1.0, "")
    return TimelineComparison("wall", [line], None, {}, "")


def test_the_table_shows_time_in_the_unit_its_span_reads_in(tmp_path):
    # a span of 119 s reads in seconds, 3600 s = 60 min in minutes, 3 h in hours (hours' factors 3600, 60, 1)
    assert time_unit(_spanning(119 / 3600)) == ("seconds", 3600.0)
    assert time_unit(_spanning(1.0)) == ("minutes", 60.0)
    assert time_unit(_spanning(3.0)) == ("hours", 1.0)
    a, b = _run(tmp_path / "a", 2.0, 0.1), _run(tmp_path / "b", 4.0, 0.0)
    out = cli("timeline", a, b, "--x", "wall", env={"COLUMNS": "80"}).stdout
    header = next(line for line in out.splitlines() if "step" in line and line.startswith("┃"))
    assert "seconds" in header and "hours" not in header
    # run b: its first step's own 2 + 2 s before its stamp, so step 0 sits at 4 s (not 0.00111 h)
    row = next(line for line in out.splitlines() if line.startswith("│ 2: b"))
    assert row.split("│")[3].strip() == "4"
    doc = json.loads(cli("timeline", a, b, "--x", "wall", "--format", "json").stdout)
    assert doc["runs"][1]["steps"][0]["hours"] == pytest.approx(4 / 3600)  # the JSON keeps hours


def test_a_run_given_twice_is_refused_however_spelled(tmp_path):
    a = _run(tmp_path / "a", 2.0, 0.1)
    for other in (a + "/", a + "/tokens"):  # the run's tokens folder holds the same shards
        r = cli("timeline", a, other, "--x", "step")
        assert r.returncode == 2 and r.stderr.startswith(
            f"error: {a} and {other} are one run (they share its shards)"
        ), r.stderr


def _stamped(path, stamps: list[float], seconds: list[float] | None = None):
    """A run of len(stamps) steps, 2 tokens each, stamped by hand (``wall_time``); ``seconds``: each step's
    recorded sampling seconds (its training seconds 0)."""
    n = len(stamps)
    cols = {
        "sequence_id": np.repeat(np.arange(n), 2),
        "position": np.tile(np.array([0, 1], np.int32), n),
        "token_id": np.zeros(2 * n, np.int64),
        "sampler_logprob": np.full(2 * n, -0.5),
        "trainer_logprob": np.full(2 * n, -0.6),
        "step": np.repeat(np.arange(n), 2),
        "wall_time": np.repeat(np.array(stamps, float), 2),
    }
    if seconds is not None:
        cols["step_sampling_seconds"] = np.repeat(np.array(seconds, float), 2)
        cols["step_training_seconds"] = np.zeros(2 * n)
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table(cols), path)
    return str(path)


def _valid(doc: dict) -> None:
    import jsonschema

    from tests.helpers import REPO

    schema = json.loads((REPO / "docs" / "schemas" / "timeline-compare.json").read_text())
    jsonschema.validate(doc, schema, cls=jsonschema.Draft202012Validator)


def test_a_nan_stamp_is_left_out_and_said_and_the_json_stays_valid(tmp_path):
    """One step's wall_time NaN once made both runs' costs "nan" and the JSON fail its own schema."""
    good = _stamped(tmp_path / "good.parquet", [10.0, 20.0, 30.0, 40.0])
    bad = _stamped(tmp_path / "bad.parquet", [100.0, float("nan"), 140.0, 160.0])
    c = compare([good, bad], "wall")
    # the bad run's stamps that remain: 100, 140, 160 at steps 0, 2, 3: gaps of 40 s over 2 steps and 20 s over 1,
    # 20 s per step each, so its median is 20 s against 10 s: 2x
    assert c.cost_per_step == {good: 1.0, bad: 2.0}
    assert [p.hours for p in c.runs[1].steps][1] is None
    assert c.runs[1].skipped == [SkippedStep(1, "wall clock", "wall_time is NaN")]
    r = cli("timeline", good, bad, "--x", "wall", "--format", "json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout, parse_constant=lambda c: pytest.fail(f"{c} in the JSON"))
    _valid(doc)
    assert doc["runs"][1]["skipped"] == [{"step": 1, "left_out_of": "wall clock", "reason": "wall_time is NaN"}]
    assert "skipped" not in doc["runs"][0]  # a run with nothing left out reads as before
    assert f"warning: {bad}: step 1 left out of the wall clock: wall_time is NaN" in " ".join(r.stderr.split())


def test_a_clock_that_runs_backwards_leaves_the_step_out_and_says_so(tmp_path):
    """A stamp 100 s before the previous step's once showed that step at -100 s without a word."""
    a = _stamped(tmp_path / "a.parquet", [1000.0, 1010.0, 900.0, 1030.0], seconds=[10.0, 10.0, 10.0, float("nan")])
    b = _stamped(tmp_path / "b.parquet", [0.0, 10.0, 20.0, 30.0], seconds=[10.0] * 4)
    c = compare([a, b], "wall")
    hours = [p.hours for p in c.runs[0].steps]
    assert hours[2] is None and all(h is not None and h >= 0 for i, h in enumerate(hours) if i != 2), hours
    assert c.runs[0].skipped == [
        SkippedStep(2, "wall clock", "wall_time 900 is 110 s before step 1's"),
        SkippedStep(3, "cost per step", "its recorded seconds are NaN"),
    ]
    assert c.cost_per_step == {a: 1.0, b: 1.0}  # the finite recorded seconds: 10 s per step on both
    out = cli("timeline", a, b, "--x", "wall", env={"COLUMNS": "200"})
    assert out.returncode == 0
    err = " ".join(out.stderr.split())
    assert f"{a}: step 2 left out of the wall clock: wall_time 900 is 110 s before step 1's" in err
    assert f"{a}: step 3 left out of the cost per step: its recorded seconds are NaN" in err
    _valid(json.loads(cli("timeline", a, b, "--x", "wall", "--format", "json").stdout))
