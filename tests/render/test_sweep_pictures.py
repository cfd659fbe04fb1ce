"""Drawn sweeps: a bound switched off, and a sweep with no finite value, are refused or drawn as they mean."""

from __future__ import annotations

import pytest

from tests.helpers import SAMPLE_PAIRS, cli


def test_a_drawn_sweep_may_switch_a_bound_off(tmp_path):
    pytest.importorskip("matplotlib", reason="pictures need the plot extra")
    sample = SAMPLE_PAIRS
    r = cli("report", str(sample), "--plots", str(tmp_path / "p"), "--sweep", "veto.hi=off,2,5", "--format", "json")
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "p" / "sweeps.png").stat().st_size > 0


@pytest.mark.parametrize("sweep", ["veto.hi=off", "veto.hi=inf", "veto.hi=off,inf"])
def test_a_drawn_sweep_with_no_finite_value(tmp_path, sweep):
    pytest.importorskip("matplotlib", reason="pictures need the plot extra")
    sample = SAMPLE_PAIRS
    r = cli("report", str(sample), "--plots", str(tmp_path / "p"), "--sweep", sweep, "--format", "json")
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "p" / "sweeps.png").stat().st_size > 0
