"""Token pairs whose ratio overflows float64: read as inf, said why once, no number silently wrong."""

from __future__ import annotations

import json
import math

import pytest

from tests.helpers import cli
from tests.inputs import one_sequence, raw_parquet, report_json


def _overflow_warning(sequences: int, largest: float) -> str:
    return (
        f"warning: {sequences} sequence(s) hold a token with log p - log q above 354.9 (largest {largest}: the sampler "
        "gave it almost no probability); r^2 overflows float64 there, so chi2 reads inf and ESS is not reported\n"
    )


def test_huge_log_ratios_print_inf_and_no_numpy_warning(tmp_path):
    """Two tokens with log q = -1000, log p = -0.6: l = 999.4 and r = exp(l) overflows to inf.

    Sorted ratios: r, r, r, inf, inf with r = exp(-0.1). numpy's linear quantile sits at 4q:
    0.5 -> rank 2 exactly, r (r + (inf - r) * 0 was NaN, printed null); 0.95 and 0.99 -> between ranks
    3 and 4, two infinities, inf (inf - inf was NaN). No RuntimeWarning reaches stderr: only the line saying
    why chi2 is inf and ESS is missing.
    """
    path = raw_parquet(tmp_path / "big.parquet", one_sequence(sampler_logprob=[-0.5, -1000.0, -0.5, -1000.0, -0.5]))
    for command in ("report", "compare-masks"):
        r = cli(command, str(path), "--format", "json")
        assert r.returncode == 0 and r.stderr == _overflow_warning(1, 999.4), r.stderr
    quantiles = report_json(path)["metrics"]["ratio_quantiles"]
    assert quantiles["0.5"] == pytest.approx(math.exp(-0.1))
    assert quantiles["0.95"] == "inf" and quantiles["0.99"] == "inf"


def test_infinite_geometric_ratios_have_infinite_quantiles(tmp_path):
    """Three sequences: seq 1 is the table above (mean l = (2 * 999.4 - 3 * 0.1) / 5 = 399.7, geo = exp(399.7),
    finite); seqs 2 and 3 are one token with l = 999.4 each (geo = inf). Sorted geo: g, inf, inf; the
    quantiles sit at 2q: 0.5 -> rank 1 (inf), 0.95 -> between ranks 1 and 2 (inf and inf): inf, not NaN."""
    cols = one_sequence(sampler_logprob=[-0.5, -1000.0, -0.5, -1000.0, -0.5])
    cols = {
        k: v + extra
        for (k, v), extra in zip(cols.items(), ([2, 3], [0, 0], [1, 2], [-1000.0] * 2, [-0.6] * 2), strict=True)
    }
    r = cli("report", str(raw_parquet(tmp_path / "geo.parquet", cols)), "--format", "json")
    assert r.returncode == 0 and r.stderr == _overflow_warning(3, 999.4), r.stderr
    geo = json.loads(r.stdout)["sequence_metrics"]["geo_ratio"]["quantiles"]
    assert geo["0.5"] == "inf" and geo["0.95"] == "inf" and geo["0.99"] == "inf"
    assert geo["0.001"] == "inf"  # g + (inf - g) * 0.002: interpolating toward inf


def test_a_ratio_beyond_float64_reads_inf_and_says_why(tmp_path, monkeypatch):
    """One token has log q = -800, log p = -0.1: l = 799.9, r = e^799.9 overflows float64.

    Hand-derived, 4 tokens with l = (799.9, 0, 0, 0):
    - k3 = (r - 1) - l and reverse k3 = r l - (r - 1) are +inf for that token (the reverse one was inf - inf = NaN,
      printed null), so both means are inf; chi2 = mean r^2 - 1 = inf;
    - ESS / n = (sum r)^2 / (n sum r^2) is inf / inf: not reported (was NaN), with a warning naming the cause;
    - ratio max is inf (was exp(709) = 8.2e307, a number the data does not hold);
    - quantiles, numpy's linear method over r = (1, 1, 1, inf): q0.5 at virtual rank 1.5 is 1; q0.99 at 2.97 lies
      between 1 and inf, so inf (was NaN, from inf - inf * 0.03).
    """
    path = raw_parquet(
        tmp_path / "o.parquet",
        one_sequence(
            4,
            sequence_id=[1, 1, 2, 2],
            position=[0, 1, 0, 1],
            sampler_logprob=[-800.0, -1.0, -0.5, -0.5],
            trainer_logprob=[-0.1, -1.0, -0.5, -0.5],
        ),
    )
    out = report_json(path)
    m = out["metrics"]
    assert (m["k3_mean"], m["kl_reverse_k3_mean"], m["chi2_token"], m["ess"], m["ratio_max"]) == (
        "inf",
        "inf",
        "inf",
        None,
        "inf",
    )
    assert m["ratio_min"] == 1.0
    assert m["ratio_quantiles"]["0.5"] == 1.0 and m["ratio_quantiles"]["0.99"] == "inf"
    assert m["k1_mean"] == pytest.approx(-799.9 / 4)
    assert out["warnings"] == [
        "1 sequence(s) hold a token with log p - log q above 354.9 (largest 799.9: the sampler gave it almost no "
        "probability); r^2 overflows float64 there, so chi2 reads inf and ESS is not reported"
    ]


def test_a_ratio_whose_square_overflows_leaves_ess_unreported(tmp_path):
    """l = 400: r = e^400 is finite but r^2 = e^800 is not; ESS = (e^400 + 3)^2 / (4 * inf) would read 0, a wrong
    number (the true ESS / n is about 1/4: one token carries all the weight). It is not reported."""
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
    m = report_json(path)["metrics"]
    assert m["ess"] is None and m["chi2_token"] == "inf"
    assert m["ratio_max"] == pytest.approx(math.exp(400.0))
