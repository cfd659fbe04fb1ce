"""The real console script: output contract, exit codes, one-line errors."""

import json
import re

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.helpers import SAMPLE_PAIRS, pairs
from tests.helpers import cli_process as cli  # this module pins the real console script

ROWS = [(1, 0, 0.5, 0.2), (1, 1, 0.2, 0.6), (1, 2, 0.9, 0.9), (2, 0, 0.5, 1e-5), (2, 1, 0.5, 0.5)]


def test_help_lists_every_registered_rule():
    from mismatchscope.rules import RULES

    r = cli("compare-masks", "--help")
    assert r.returncode == 0
    for name in RULES:
        assert f"{name}:" in r.stdout, name
    assert "A == 0 counts as negative" in r.stdout


def test_an_analysis_command_imports_only_what_it_uses():
    # compare-masks with --format json needs neither the other commands' modules (probe's options, the
    # importers), nor rich (tables), nor pyarrow.compute (its top-k lists are read from their offsets)
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from mismatchscope.cli.main import main\n"
        f"sys.argv = ['mismatchscope', 'compare-masks', {str(SAMPLE_PAIRS)!r}, '--format', 'json']\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'rich' or m == 'pyarrow.compute' or "
        "m.startswith(('mismatchscope.cli.probe', 'mismatchscope.cli.gate', 'mismatchscope.importers'))), "
        "file=sys.stderr)\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(r.stdout)["tokens"] > 10_000
    assert r.stderr.strip().splitlines()[-1] == "[]"


def test_report_json_contract():
    r = cli("report", str(SAMPLE_PAIRS), "--format", "json")
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)  # nothing but JSON on stdout
    assert data["tokens"] > 10_000 and data["sequences"] == 192
    m = data["metrics"]
    for key in (
        "tv_token_mean",
        "tv_token_max",
        "abs_logprob_diff_mean",
        "abs_logprob_diff_max",
        "k1_mean",
        "k2_mean",
        "k3_mean",
        "kl_reverse_k3_mean",
        "chi2_token",
        "ess",
        "ratio_min",
        "ratio_max",
        "seq_log_ratio_mean",
        "geo_ratio_mean",
        "tv_topk_lower_mean",
    ):
        assert isinstance(m[key], float), key
    assert list(m["ratio_quantiles"]) == ["0.001", "0.01", "0.05", "0.5", "0.95", "0.99", "0.999"]
    assert list(m["ratio_tail_high"]) == ["1.25", "2", "5", "10"] == list(m["ratio_tail_low"])
    assert set(data["breakdowns"]) == {"sampler_prob", "position", "entropy"}
    assert data["breakdowns"]["entropy"]  # the sample file records trainer entropy
    assert data["run"]["simulated"] is True


def test_compare_masks_json_contract():
    r = cli(
        "compare-masks", str(SAMPLE_PAIRS), "--format", "json", "--sweep", "icepop.beta=1.5,2,3,5,8", "--examples", "3"
    )
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    row = data["rules"][0]
    for key in (
        "name",
        "params",
        "level",
        "uses_advantage",
        "hypothesis",
        "tokens_rejected",
        "tokens_reweighted",
        "token_reject_rate",
        "sequences_rejected",
        "sequences_with_rejection",
    ):
        assert key in row
    assert {r["name"] for r in data["rules"]} >= {
        "icepop",
        "ipo",
        "dppo-tv",
        "dppo-kl",
        "tis",
        "token-mask",
        "seq-tis",
        "seq-mis",
        "geo-mask",
        "k3-seq",
        "veto",
        "opsm",
        "cispo",
        "ppo-clip",
    }
    assert {"a", "b", "both", "only_a", "only_b", "jaccard"} <= set(data["agreement"][0])
    assert [p["value"] for p in data["sweeps"][0]["points"]] == [1.5, 2, 3, 5, 8]
    assert len(data["examples"]) == 3


def test_tables_render(write):
    r = cli("compare-masks", str(write(pairs(ROWS))), "--rule", "icepop", "--rule", "ipo:delta=0.35", "--examples", "2")
    assert r.returncode == 0, r.stderr
    assert "icepop" in r.stdout and "Jaccard" in r.stdout and "delta=0.35" in r.stdout
    r = cli("report", str(write(pairs(ROWS))))
    assert r.returncode == 0 and "k3 mean" in r.stdout and "verl FAQ" in r.stdout


def test_column_mapping(write):
    cols = pairs(ROWS)
    cols["rollout_log_probs"] = cols.pop("sampler_logprob")
    p = write(pairs(ROWS)).with_name("foreign.parquet")  # a framework's own names, written without our schema
    pq.write_table(pa.table(cols), p)
    r = cli("report", str(p), "--format", "json")
    assert r.returncode == 2
    assert "missing required column(s) sampler_logprob" in r.stderr and "--column" in r.stderr
    assert "Traceback" not in r.stderr
    r = cli("report", str(p), "--column", "sampler_logprob=rollout_log_probs", "--format", "json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["tokens"] == 5


@pytest.mark.parametrize(
    "args, message",
    [
        (["--rule", "nope"], "unknown rule 'nope'"),
        (["--rule", "icepop:gamma=2"], "valid parameters of icepop: alpha, beta"),
        (["--sweep", "icepop=2"], "cannot parse sweep"),
        (["--column", "bogus=x"], "not a mismatchscope column"),
    ],
)
def test_usage_errors_exit_2(write, args, message):
    r = cli("compare-masks", str(write(pairs(ROWS))), *args)
    assert r.returncode == 2
    assert message in r.stderr and "Traceback" not in r.stderr


def test_input_errors_exit_2(tmp_path, write):
    bad = tmp_path / "not.parquet"
    bad.write_text("hello")
    good = write(pairs(ROWS))
    truncated = tmp_path / "trunc.parquet"
    truncated.write_bytes(good.read_bytes()[:200])
    cols = pairs(ROWS)
    cols["sampler_logprob"][0] = 0.5
    positive = write(cols, "positive.parquet")
    for path, message in (
        (bad, "not a Parquet file"),
        (truncated, "not a Parquet file, or truncated"),
        (positive, "positive logprob"),
        (tmp_path / "missing.parquet", "no such file"),
    ):
        r = cli("report", str(path))
        assert r.returncode == 2, (path, r.stderr)
        assert message in r.stderr and "Traceback" not in r.stderr
        assert len(r.stderr.strip().splitlines()) == 1


def test_debug_variable_shows_traceback(tmp_path):
    r = cli("report", str(tmp_path / "missing.parquet"), env={"MISMATCHSCOPE_DEBUG": "1"})
    assert r.returncode != 0 and "Traceback" in r.stderr


def test_nonfinite_warning_on_stderr(write):
    cols = pairs(ROWS)
    cols["sampler_logprob"][0] = -9999.0
    r = cli("report", str(write(cols)), "--format", "json")
    assert r.returncode == 0
    assert json.loads(r.stdout)["tokens"] == 4
    assert "non-finite" in r.stderr and "-9999" in r.stderr


def test_a_terminal_gets_errors_and_warnings_broken_between_words(tmp_path, write):
    # On a 40-column terminal the terminal's own wrap would cut words and numbers; the tool breaks its
    # error and warning lines between words instead. (To a pipe each stays one line: the tests above.)
    import os
    import pty
    import re
    import subprocess
    import sys
    from pathlib import Path

    cols = pairs(ROWS)
    cols["sampler_logprob"][0] = -9999.0
    exe = Path(sys.executable).with_name("mismatchscope")
    for args in (("report", str(tmp_path / "missing.parquet")), ("report", str(write(cols)), "--format", "json")):
        leader, follower = pty.openpty()
        env = {k: v for k, v in os.environ.items() if k != "MISMATCHSCOPE_DEBUG"} | {"COLUMNS": "40"}
        r = subprocess.run([str(exe), *args], stdout=subprocess.DEVNULL, stderr=follower, env=env, timeout=120)
        os.close(follower)
        text = b""
        while True:
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # the follower closed: all read
                break
            if not chunk:
                break
            text += chunk
        os.close(leader)
        lines = re.sub(r"\x1b\[[0-9;]*m", "", text.decode()).replace("\r", "").splitlines()  # no colours
        assert r.returncode in (0, 2) and len(lines) > 1, lines
        assert all(len(line) <= 40 for line in lines if "/" not in line), lines  # a path is never split
        joined = " ".join(line.strip() for line in lines)
        assert "no such file" in joined or "1 of them -9999 sentinels" in joined, joined


@pytest.mark.parametrize(
    "args, message",
    [
        (("--rule", "ipo:delta=-0.1"), "error: rule 'ipo': delta=-0.1 is outside its range [0, 1]\n"),
        (
            ("--rule", "verl-rs:option=seq_mean_k3"),
            "error: rule 'verl-rs' needs threshold (e.g. --rule verl-rs:option=seq_mean_k3,threshold=0.01)\n",
        ),
        (("--rule", "tis:C=off"), "error: rule 'tis': C cannot be off (it must be a number in [1, inf])\n"),
    ],
)
def test_bad_rule_parameters_are_one_line_exit_2(write, args, message):
    r = cli("compare-masks", str(write(pairs(ROWS))), *args)
    assert (r.returncode, r.stdout, r.stderr) == (2, "", message)


def test_new_rules_in_compare_masks_json(write):
    # A q=.5 p=.2 (l = -0.916291), B q=.2 p=.6 (l = 1.098612), C, E p = q, D q=.5 p=1e-5 (l = -10.819778)
    r = cli(
        "compare-masks",
        str(write(pairs(ROWS))),
        "--format",
        "json",
        "--rule",
        "kpop",
        "--rule",
        "verl-rs:option=token_k1,threshold=0.5_2.0",
    )
    assert r.returncode == 0, r.stderr
    rows = {row["name"]: row for row in json.loads(r.stdout)["rules"]}
    # kpop: A (0.223), B (0.382), D (5.06) exceed phi 0.1; verl token_k1 keeps |l| <= ln 2: A, B, D out
    assert rows["kpop"]["tokens_rejected"] == 3 and rows["kpop"]["level"] == "token"
    assert rows["verl-rs"]["tokens_rejected"] == 3 and rows["verl-rs"]["params"] == {
        "option": "token_k1",
        "threshold": "0.5_2.0",
    }


def test_calls_in_one_process_keep_their_own_output_exit_code_environment_and_folder(tmp_path):
    """tests.helpers.cli_calls, which the engine tests rely on: a report (exit 0, JSON on its stdout), a missing
    file (exit 2, its one line on its own stderr only), then a report again: the failure left nothing behind."""
    from tests.helpers import cli_calls

    missing = tmp_path / "missing.parquet"
    ok = ["report", str(SAMPLE_PAIRS), "--format", "json"]
    done = cli_calls([ok, ["report", str(missing)], ok], tmp_path / "calls", cwd=tmp_path)
    assert [r.returncode for r in done] == [0, 2, 0]
    assert json.loads(done[0].stdout)["tokens"] == json.loads(done[2].stdout)["tokens"] > 0
    assert done[1].stdout == "" and done[1].stderr.strip() == f"error: {missing}: no such file or directory"
    assert "error" not in done[0].stderr + done[2].stderr


@pytest.mark.parametrize("command", ["probe", "rescore", "diagnose", "import", "gate", "certify", "report", "timeline"])
def test_help_at_80_columns_cuts_no_option_name(command):
    """At 80 columns --help once cut 22 option names of probe's (21 of diagnose's, 8 of rescore's) with an
    ellipsis: ``--trainer-checkp...``. Every name and metavar is printed whole, and no line is wider than 80."""
    import typer

    from mismatchscope.cli.main import build_app
    from tests.helpers import cli_no_engine

    r = cli_no_engine(command, "--help", env={"COLUMNS": "80"})  # in this process: no command starts for --help
    assert r.returncode == 0, r.stderr
    assert "…" not in r.stdout and max(len(line) for line in r.stdout.splitlines()) <= 80
    group = typer.main.get_command(build_app((command,)))
    cmd = group.commands[command]  # pyright: ignore[reportAttributeAccessIssue] - the app is a group of commands
    for param in cmd.params:
        for name in (*param.opts, *param.secondary_opts):
            if name.startswith("--"):
                assert re.search(rf"(^|[\s,/]){re.escape(name)}($|[\s,/])", r.stdout, re.M), (command, name)
