"""What a gate compares: a baseline that is the candidate, or shares its files, is refused."""

from __future__ import annotations

from tests.helpers import (
    ROWS,
    error_line,
    gate_cli,
    pairs,
)


def test_gate_baseline_that_is_the_candidate(runs, tmp_path):
    base, cand = runs
    for other in (str(cand), str(tmp_path / "." / cand.name)):
        r = gate_cli(str(cand), "--baseline", other)
        assert error_line(r) == (
            f"error: the baseline {other} is the candidate itself (pass as --baseline the run sampled "
            "by the current serving stack)"
        )


def test_gate_baseline_sharing_shards_with_the_candidate(tmp_path, write):
    shard = write(pairs(ROWS), "run/tokens/part-0.parquet")
    write(pairs([(9, 0, 0.5, 0.5)]), "run/tokens/part-1.parquet")
    r = gate_cli(str(tmp_path / "run"), "--baseline", str(shard))
    assert error_line(r) == (
        f"error: the baseline {shard} shares 1 file(s) with the candidate, e.g. {shard} "
        "(pass as --baseline the run sampled by the current serving stack)"
    )
