"""Metric names a gate limit may name, and what each resolves to."""

from __future__ import annotations

import pytest

from mismatchscope.errors import GateConfigError
from mismatchscope.gate.limits import lookup_metric


def test_metric_names():
    assert lookup_metric("tv_token_mean").bootstrapped
    assert lookup_metric("sequence_metrics.max_tv.mean").bootstrapped
    assert not lookup_metric("ratio_quantiles.0.99").bootstrapped
    assert not lookup_metric("ratio_tail_high.2").bootstrapped
    assert lookup_metric("icepop.token_reject_rate").rule == "icepop"
    with pytest.raises(GateConfigError, match="unknown metric 'tv_mean'.*valid metrics: tv_token_mean"):
        lookup_metric("tv_mean")
    with pytest.raises(GateConfigError, match="token rule"):
        lookup_metric("icepop.sequence_reject_rate")
    with pytest.raises(GateConfigError, match="never rejects"):
        lookup_metric("tis.token_reject_rate")
    with pytest.raises(GateConfigError, match="unknown rule statistic"):
        lookup_metric("icepop.reject_rate")
