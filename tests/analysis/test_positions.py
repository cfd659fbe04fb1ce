"""Duplicate (sequence, position) rows: refused exactly, wherever they hide; gaps only warn."""

from __future__ import annotations

import json
import math

import pytest

from tests.helpers import cli, pairs
from tests.inputs import DUP_HINT, error_line, one_sequence, raw_parquet, report_json, sequence_rows


@pytest.mark.parametrize(
    "rows, where",
    [
        # 0..8 with 1, 5, 6 replaced by 2, 3, 7: count, span, sum (36) and sum of squares (204) all as for 0..8
        (sequence_rows(1, [0, 2, 2, 3, 3, 4, 7, 7, 8]), "sequence 1 position 2"),
        # with a gap no count can tell: 4 rows over the span 0..9 look like a sequence with gaps
        (sequence_rows(5, [0, 3, 3, 9]), "sequence 5 position 3"),
        # the duplicate in another sequence than the first, rows out of order
        (sequence_rows(1, [0, 1, 2]) + sequence_rows(2, [4, 0, 4, 1]), "sequence 2 position 4"),
    ],
)
def test_duplicate_positions_are_refused_exactly(write, rows, where):
    path = write(pairs(rows))
    for command in ("report", "compare-masks"):
        assert (
            error_line(cli(command, str(path)))
            == f"error: duplicate (sequence_id, position) rows: {where} appears more than once {DUP_HINT}"
        )


def test_a_duplicate_across_two_shards_is_refused(tmp_path, write):
    write(pairs(sequence_rows(3, [0, 1, 2, 3])), "a.parquet")
    write(pairs(sequence_rows(3, [4, 5, 2])), "b.parquet")
    assert error_line(cli("report", str(tmp_path))) == (
        f"error: duplicate (sequence_id, position) rows: sequence 3 position 2 appears more than once {DUP_HINT}"
    )


def test_a_shard_copied_twice_is_refused_by_timeline(tmp_path, write):
    rows = pairs(sequence_rows(3, [0, 1, 2]), step=[0, 0, 0])
    write(rows, "a.parquet")
    write(rows, "copy.parquet")
    assert error_line(cli("timeline", str(tmp_path))) == (
        f"error: duplicate (sequence_id, position) rows: sequence 3 position 0 appears more than once {DUP_HINT}"
    )


def test_gaps_without_duplicates_only_warn(write):
    path = write(pairs(sequence_rows(1, [0, 2, 4]) + sequence_rows(2, [1, 2])))
    r = cli("report", str(path), "--format", "json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["warnings"] == [
        "1 sequence(s) have gaps in their positions (tokens missing or masked out)",
        "1 sequence(s) do not start at position 0",
    ]


def test_duplicate_tracker_is_exact_on_random_layouts():
    """Against a set-based reference, over shuffled batches with and without one planted duplicate."""
    import numpy as np

    from mismatchscope.analysis.positions import PositionTracker
    from mismatchscope.errors import DuplicatePositionError

    rng = np.random.default_rng(0)
    for trial in range(200):
        n_seq = int(rng.integers(1, 6))
        keys = [(s, int(p)) for s in range(n_seq) for p in rng.choice(40, size=int(rng.integers(1, 20)), replace=False)]
        planted = trial % 2 == 1
        if planted:
            keys.append(keys[int(rng.integers(len(keys)))])
        order = rng.permutation(len(keys))
        seq = np.array([keys[i][0] for i in order])
        pos = np.array([keys[i][1] for i in order])
        tracker = PositionTracker()
        cuts = sorted(set(rng.integers(0, len(keys), size=3).tolist()) | {0, len(keys)})
        try:
            for a, b in zip(cuts, cuts[1:], strict=False):
                tracker.add(seq[a:b], pos[a:b])
            tracker.finish()
            found = None
        except DuplicatePositionError as e:
            found = (e.sequence_id, e.position)
        if planted:
            assert found == keys[-1], trial
        else:
            assert found is None, trial


@pytest.mark.parametrize("command", ["report", "compare-masks", "timeline"])
def test_a_duplicate_hidden_behind_a_non_finite_logprob_is_refused(tmp_path, command):
    """Position 2 twice, one copy with a NaN: the NaN row is dropped from the numbers but still names the token."""
    path = raw_parquet(
        tmp_path / "d.parquet",
        one_sequence(4, position=[0, 1, 2, 2], sampler_logprob=[-0.5, -0.5, -0.5, math.nan], step=[0, 0, 0, 0]),
    )
    assert error_line(cli(command, str(path))) == (
        f"error: duplicate (sequence_id, position) rows: sequence 1 position 2 appears more than once {DUP_HINT}"
    )


def test_a_duplicate_hidden_behind_a_sentinel_is_refused(tmp_path):
    path = raw_parquet(
        tmp_path / "d.parquet", one_sequence(4, position=[0, 1, 2, 2], trainer_logprob=[-0.6, -0.6, -0.6, -9999.0])
    )
    assert error_line(cli("compare-masks", str(path))) == (
        f"error: duplicate (sequence_id, position) rows: sequence 1 position 2 appears more than once {DUP_HINT}"
    )


def test_a_dropped_token_is_not_a_gap(tmp_path):
    """Positions 0..4 with a NaN at 2: one warning for the NaN; the position is there, so no gap warning."""
    path = raw_parquet(tmp_path / "g.parquet", one_sequence(sampler_logprob=[-0.5, -0.5, math.nan, -0.5, -0.5]))
    payload = report_json(path)
    assert payload["tokens"] == 4
    assert payload["warnings"] == [
        "1 of 5 tokens have a non-finite logprob (NaN or inf) and were excluded from every number below"
    ]
