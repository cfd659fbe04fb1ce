"""Gate configurations that cannot be meant: limits no run can pass, a minimum above its maximum, nesting too deep."""

from __future__ import annotations

import os

import pytest

from mismatchscope.errors import GateConfigError
from mismatchscope.gate.config import STARTER_TOML, default_config, load_config, with_overrides
from tests.helpers import REPO, SAMPLE_PAIRS, cli, pairs
from tests.inputs import ROWS, error_line, one_line_error


@pytest.mark.parametrize(
    "args, message",
    [
        (
            ["--limit", "tv_token_mean>=0.5", "--limit", "k3_mean<=-0.1"],
            "k3_mean: max -0.1 is below 0, the smallest value k3_mean can take, so no run can pass (give a limit >= 0)",
        ),
        (["--limit", "tv_token_mean>=inf"], "tv_token_mean: min inf leaves no value that passes (give a finite limit)"),
        (["--limit", "k1_mean<=-inf"], "k1_mean: max -inf leaves no value that passes (give a finite limit)"),
        (
            ["--limit", "icepop.token_reject_rate>=2"],
            "icepop.token_reject_rate: min 2 is above 1, the largest value icepop.token_reject_rate can take, so no run can pass "
            "(shares, rates and TV are fractions: 0.01 = 1%)",
        ),
        # ESS / n, TV and the ratio tails are at most 1 too; chi2 = mean r^2 - 1 is at least -1
        (
            ["--limit", "ess>=1.5"],
            "ess: min 1.5 is above 1, the largest value ess can take, so no run can pass (shares, rates and TV are fractions: 0.01 = 1%)",
        ),
        (
            ["--limit", "ratio_tail_high.2>=1.5"],
            "ratio_tail_high.2: min 1.5 is above 1, the largest value ratio_tail_high.2 can take, so no run can pass "
            "(shares, rates and TV are fractions: 0.01 = 1%)",
        ),
        (
            ["--limit", "chi2_token<=-2"],
            "chi2_token: max -2 is below -1, the smallest value chi2_token can take, so no run can pass (give a limit >= -1)",
        ),
        # two flags on one metric make one limit: here an impossible one; the same bound twice is refused
        (
            ["--limit", "tv_token_mean>=0.5", "--limit", "tv_token_mean<=0.1"],
            "tv_token_mean: min 0.5 is above max 0.1, so no run can pass (swap them, or drop one)",
        ),
        (
            ["--limit", "tv_token_mean<=0.5", "--limit", "tv_token_mean<=0.1"],
            "--limit 'tv_token_mean<=0.1': tv_token_mean already has a max (0.5) from another --limit (give each bound of a metric once)",
        ),
        (
            ["--bootstrap", "1000000000000", "--limit", "k3_mean<=1"],
            "--bootstrap must be an integer between 0 and 100,000, got 1000000000000",
        ),
        (["--limit", "k3_mean<=1_0"], "--limit k3_mean<=1_0: '1_0' is not a number"),
    ],
)
def test_gate_limits_that_can_never_pass(runs, args, message):
    base, cand = runs
    r = cli("gate", str(cand), "--absolute-only", *(["--bootstrap", "0"] if "--bootstrap" not in args else []), *args)
    assert error_line(r) == f"error: {message}"


def test_gate_config_with_min_above_max(runs, tmp_path):
    base, cand = runs
    cfg = tmp_path / "g.toml"
    cfg.write_text("[absolute]\ntv_token_mean = { min = 0.2, max = 0.1 }\n")
    r = cli("gate", str(cand), "--config", str(cfg), "--absolute-only", "--bootstrap", "0")
    assert (
        error_line(r) == "error: tv_token_mean: min 0.2 is above max 0.1, so no run can pass (swap them, or drop one)"
    )


def test_gate_config_nested_too_deeply(runs, tmp_path):
    base, cand = runs
    cfg = tmp_path / "g.toml"
    cfg.write_text("x = " + "[" * 50_000 + "]" * 50_000 + "\n")
    r = cli("gate", str(cand), "--config", str(cfg), "--absolute-only")
    assert error_line(r) == f"error: {cfg} is nested too deeply to be a gate configuration"


def test_a_limit_at_infinity_is_refused():
    r = cli("gate", str(SAMPLE_PAIRS), "--absolute-only", "--limit", "tv_token_mean<=inf")
    one_line_error(r, "tv_token_mean: max inf is no limit")


def test_absolute_only_with_a_regression_limit(tmp_path, write):
    cand = write(pairs(ROWS), "cand.parquet")
    base = write(pairs(ROWS[:4]), "base.parquet")
    r = cli("gate", str(cand), "--absolute-only", "--baseline", str(base), "--max-increase", "k3_mean=10%")
    assert error_line(r) == (
        "error: --max-increase sets a regression limit against the baseline, which --absolute-only "
        "leaves out (drop --absolute-only to compare with the baseline, or drop --max-increase)"
    )


def test_absolute_only_with_a_baseline_on_the_command_line_is_refused(tmp_path, write):
    """--baseline X with --absolute-only once ran the absolute limits and never looked at X, without a word."""
    cand = write(pairs(ROWS), "cand.parquet")
    base = write(pairs(ROWS[:4]), "base.parquet")
    r = cli("gate", str(cand), "--absolute-only", "--baseline", str(base), "--bootstrap", "0")
    assert error_line(r) == (
        f"error: --baseline {base} names a run to compare with, which --absolute-only leaves out (drop "
        "--absolute-only to compare with the baseline, or drop --baseline)"
    )
    # a baseline named in the limits file is the file's default: --absolute-only sets it aside, as it says
    cfg = tmp_path / "gate.toml"
    cfg.write_text(f'[gate]\nbaseline = "{base}"\n[absolute]\nk3_mean = {{ max = 10 }}\n')
    assert cli("gate", str(cand), "--config", str(cfg), "--absolute-only", "--bootstrap", "0").returncode == 0


def test_starter_file_is_the_default(tmp_path):
    (tmp_path / "gate.toml").write_text(STARTER_TOML)
    from_file = load_config(None, cwd=tmp_path)
    defaults = default_config()
    assert from_file.absolute == defaults.absolute and from_file.regression == defaults.regression
    assert (defaults.bootstrap, defaults.confidence, defaults.seed) == (1000, 0.95, 0)
    assert {r.metric for r in defaults.regression} == {
        "tv_token_mean",
        "abs_logprob_diff_mean",
        "k3_mean",
        "icepop.token_reject_rate",
        "ipo.token_reject_rate",
    }
    assert dict((a.metric, a.max) for a in defaults.absolute)["tv_token_mean"] == 0.01  # verl's yardstick
    assert load_config(None, cwd=tmp_path / "nowhere").source == "built-in defaults"


def test_flags_override_the_file():
    cfg = default_config()
    out = with_overrides(
        cfg,
        limits=["tv_token_mean<=0.005", "ess>=0.9"],
        increases=["k3_mean=50%"],
        bootstrap=10,
        allow_different=["seed"],
    )
    ab = {a.metric: a for a in out.absolute}
    assert ab["tv_token_mean"].max == 0.005 and ab["ess"].min == 0.9 and len(out.absolute) == len(cfg.absolute) + 1
    k3 = next(r for r in out.regression if r.metric == "k3_mean")
    assert k3.max_increase == 0.5 and k3.floor == 1e-6  # the file's floor is kept
    assert out.bootstrap == 10 and out.allow_different == ("seed",)
    assert with_overrides(cfg, absolute_only=True).regression == ()
    with pytest.raises(GateConfigError, match="cannot parse --limit"):
        with_overrides(cfg, limits=["tv_token_mean=0.1"])
    with pytest.raises(GateConfigError, match="lower is worse"):
        with_overrides(cfg, increases=["ess=10%"])
    with pytest.raises(GateConfigError, match="confidence"):
        with_overrides(cfg, confidence=1.5)


@pytest.mark.parametrize(
    "text, message",
    [
        ("[gate\n", "is not valid TOML"),
        ("[regresion]\n", "unknown table 'regresion'"),
        ("[gate]\nbootstrap = -1\n", "bootstrap must be an integer between 0 and 100,000, got -1"),
        (
            "[gate]\nbootstrap = 1000000000000\n",
            "bootstrap must be an integer between 0 and 100,000, got 1000000000000",
        ),
        ("[absolute]\nbogus = 1\n", "unknown metric 'bogus'"),
        ("[absolute]\ntv_token_mean = { maximum = 1 }\n", "unknown key 'maximum'"),
        ("[regression]\nk3_mean = { floor = 1e-6 }\n", "max_increase is missing"),
        ("[regression]\nk1_mean = 0.25\n", "no 'worse' direction"),
        ("[rules]\nicepop = { gamma = 2 }\n", "valid parameters of icepop"),
        (
            "[rules]\nipo = { delta = -0.1 }\n",
            r"gate.toml \[rules\]: rule 'ipo': delta=-0.1 is outside its range \[0, 1\]",
        ),
        ('[gate]\nallow_different = ["colour"]\n', "not a comparability key"),
    ],
)
def test_bad_config_files(tmp_path, text, message):
    path = tmp_path / "gate.toml"
    path.write_text(text)
    with pytest.raises(GateConfigError, match=message):
        load_config(path)


def test_readme_documents_the_starter_keys():
    readme = (REPO / "docs" / "gate.md").read_text()
    for key in (
        "bootstrap",
        "confidence",
        "seed",
        "allow_different",
        "max_increase",
        "floor",
        "[absolute]",
        "[regression]",
        "[rules]",
        "--allow-different",
        "--junit-xml",
        "--markdown",
        "GITHUB_STEP_SUMMARY",
        "examples/gate-workflow.yml",
    ):
        assert key in readme, key
    assert (REPO / "examples" / "gate-workflow.yml").is_file()
    assert os.path.getsize(REPO / "examples" / "gate-workflow.yml") > 500
