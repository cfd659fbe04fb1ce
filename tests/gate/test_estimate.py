"""The gate's estimates where a ratio overflows: an ESS that cannot be computed is not read as zero."""

from __future__ import annotations

from tests.helpers import cli
from tests.inputs import error_line, one_sequence, raw_parquet


def test_gate_does_not_read_an_overflowed_ess_as_zero(tmp_path):
    """With r = e^400, (sum r)^2 / (n * inf) was an ESS of 0, failing an ess limit on a number the data does not hold."""
    path = raw_parquet(
        tmp_path / "o.parquet",
        one_sequence(
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
