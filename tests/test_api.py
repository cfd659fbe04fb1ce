"""The public API: ``mismatchscope.__all__`` names the entry points, each loads on first use (so
``import mismatchscope`` stays light), the library calls give the commands' numbers, and docs/api.md runs."""

from __future__ import annotations

import contextlib
import io
import json
import re
import subprocess
import sys

import pytest

import mismatchscope
from mismatchscope.documents import to_json
from tests.helpers import REPO, SAMPLE_PAIRS, cli, pairs

ENTRY_POINTS = {
    "report",
    "compare_masks",
    "analyse",
    "run_gate",
    "import_run",
    "Recorder",
    "Monitor",
    "AnalysisResult",
    "GateResult",
    "ImportResult",
    "TimelineResult",
    "StepReport",
    "MismatchscopeError",
}


def test_all_holds_the_entry_points_and_each_resolves():
    assert ENTRY_POINTS <= set(mismatchscope.__all__)
    assert set(mismatchscope.__all__) == {"__version__", *mismatchscope._EXPORTS}
    for name in mismatchscope.__all__:
        assert getattr(mismatchscope, name) is not None, name
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        _ = mismatchscope.nope


def test_importing_the_package_loads_no_entry_point():
    """The CLI imports the package on every call: numpy (and the engines) wait until a name is used."""
    code = (
        "import sys, mismatchscope; assert 'numpy' not in sys.modules, 'numpy'; "
        "from mismatchscope import Recorder; assert 'numpy' in sys.modules"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def test_report_and_compare_masks_by_hand(write):
    # Two tokens: (q, p) = (0.5, 0.2) and (0.8, 0.8).
    # token 1: l = log(0.2/0.5) = log 0.4 = -0.916291; TV = |p - q| = 0.3; k1 = -l = 0.916291;
    #          k3 = (r - 1) - l = -0.6 + 0.916291 = 0.316291; r = 0.4 < alpha = 0.5: icepop rejects it.
    # token 2: l = 0, every term 0, r = 1 is kept.
    # means over 2 tokens: TV 0.15, k1 0.458145, k3 0.158145; icepop rejects 1 of 2 tokens.
    path = write(pairs([(1, 0, 0.5, 0.2), (1, 1, 0.8, 0.8)]))
    m = mismatchscope.report(path).report.metrics
    assert m.tv_token_mean == pytest.approx(0.15)
    assert m.k1_mean == pytest.approx(0.458145, abs=1e-6)
    assert m.k3_mean == pytest.approx(0.158145, abs=1e-6)
    masks = mismatchscope.compare_masks(path, ["icepop"]).masks
    (icepop,) = masks.rules
    assert (icepop.name, icepop.tokens_rejected, icepop.token_reject_rate) == ("icepop", 1, 0.5)


def test_library_numbers_are_the_commands_numbers():
    def as_json(x):
        return json.loads(json.dumps(x))

    r = cli("report", str(SAMPLE_PAIRS), "--format", "json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["metrics"] == as_json(to_json(mismatchscope.report(SAMPLE_PAIRS).report.metrics))
    rule, sweep = "ipo:delta=0.2", "ipo.delta=0.1,0.4"
    r = cli("compare-masks", str(SAMPLE_PAIRS), "--rule", rule, "--sweep", sweep, "--format", "json")
    assert r.returncode == 0, r.stderr
    lib = mismatchscope.compare_masks(SAMPLE_PAIRS, [rule], sweeps=[sweep]).masks
    cmd = json.loads(r.stdout)
    assert cmd["rules"] == as_json(to_json(lib.rules)) and cmd["sweeps"] == as_json(to_json(lib.sweeps))


def test_a_bad_rule_is_the_commands_error():
    with pytest.raises(mismatchscope.UsageError, match="unknown rule"):
        mismatchscope.compare_masks(SAMPLE_PAIRS, ["no-such-rule"])


def _api_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", (REPO / "docs" / "api.md").read_text(), re.S)


def test_docs_api_runs(tmp_path, monkeypatch):
    """Every python block of docs/api.md, in order, in one namespace, in a scratch folder holding the sample."""
    blocks = _api_blocks()
    assert len(blocks) >= 3
    (tmp_path / "sample_data").symlink_to(REPO / "sample_data")
    monkeypatch.chdir(tmp_path)
    namespace: dict = {}
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        for i, block in enumerate(blocks):
            exec(compile(block, f"docs/api.md block {i + 1}", "exec"), namespace)
    text = out.getvalue()
    assert "10478 tokens in 192 sequences" in text, text
    assert "gate: pass" in text and "imported 12 tokens from 1 file(s)" in text and "refused:" in text, text
