"""A whole gate on hand-built files through the console script: exit codes and the table, the errors that
exit 2, foreign files, gate.toml from the current directory, reproducible JSON, JUnit, Markdown and the step
summary, a deterministic rerun.

The bootstrap, the checks, the limits, the configuration and the comparability each have their module's test
file beside this one; the real-vLLM end-to-end checks live in ``tests/cli/test_gate.py``.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from mismatchscope.gate.config import STARTER_TOML
from tests.helpers import REPO, cli, probe_meta
from tests.inputs import validate_junit

meta = probe_meta


# ---- bootstrap ------------------------------------------------------------------------


# ---- checks on files, by hand ----------------------------------------------------------


# ---- metric names and configuration -------------------------------------------------------


# ---- comparability ---------------------------------------------------------------------------


# ---- the console script ------------------------------------------------------------------------


@pytest.fixture
def pair(write):
    """A comparable baseline/candidate pair (fp32 vs fp16 sampler metadata) plus a worse candidate."""
    rng = np.random.default_rng(0)

    def cols(sigma, seed):
        r = np.random.default_rng(seed)
        n_seq, length = 60, 20
        lq = -r.exponential(0.8, n_seq * length)
        lp = np.minimum(lq + r.normal(0, sigma, lq.size), 0.0)
        return {
            "sequence_id": np.repeat(np.arange(n_seq), length),
            "position": np.tile(np.arange(length), n_seq),
            "token_id": rng.integers(0, 100, lq.size),
            "sampler_logprob": lq,
            "trainer_logprob": lp,
        }

    base = write(cols(0.002, 1), "base.parquet", meta())
    same = write(cols(0.002, 2), "same.parquet", meta())
    worse = write(cols(0.02, 3), "worse.parquet", meta(sampler={"dtype": "float16"}))
    return base, same, worse


def test_cli_exit_codes_and_table(pair, tmp_path):
    base, same, worse = pair
    r = cli("gate", str(same), "--baseline", str(base), env={"COLUMNS": "200"})  # wide: one table, one row a check
    assert r.returncode == 0, r.stderr
    assert "PASS: all 8 checks hold" in r.stdout
    # each bootstrapped check prints its interval around the estimate: a real interval of nonzero width
    est, lo, hi = map(
        float, re.search(r"tv_token_mean <= 0\.01 .*?│ +([\d.e-]+) │ +\[([\d.e-]+), ([\d.e-]+)\]", r.stdout).groups()
    )
    assert lo < est < hi
    r = cli("gate", str(worse), "--baseline", str(base))
    assert r.returncode == 1, r.stderr
    assert "FAIL" in r.stdout and "k3_mean rise <= +25%" in r.stdout
    assert "sampler.dtype: 'float32' -> 'float16'" in r.stdout


@pytest.mark.parametrize(
    "args, message",
    [
        (["--limit", "nope<=1"], "unknown metric 'nope'"),
        (["--config", "{bad}"], "is not valid TOML"),
        (["--config", "{missing}"], "not found"),
        (["--baseline", "{incomparable}"], "not comparable: sampling.seed differs"),
        (["--baseline", "{nofile}"], "no such file"),
        ([], "need a baseline"),
        (["--allow-different", "colour", "--baseline", "{base}"], "not a comparability key"),
    ],
)
def test_cli_errors_exit_2(pair, tmp_path, write, args, message):
    base, same, worse = pair
    bad = tmp_path / "bad.toml"
    bad.write_text("[gate\nseed = 1\n")
    incomparable = write(pq.read_table(same).to_pydict(), "other_seed.parquet", meta(sampling={"seed": 1}))
    subs = {
        "{bad}": str(bad),
        "{missing}": str(tmp_path / "missing.toml"),
        "{incomparable}": str(incomparable),
        "{nofile}": str(tmp_path / "nofile.parquet"),
        "{base}": str(base),
    }
    r = cli("gate", str(same), *[subs.get(a, a) for a in args])
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert message in r.stderr and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def test_cli_allow_different_and_foreign_files(pair, write, tmp_path):
    base, same, _ = pair
    other_seed = write(pq.read_table(same).to_pydict(), "seed1.parquet", meta(sampling={"seed": 1}))
    r = cli("gate", str(other_seed), "--baseline", str(base), "--allow-different", "seed")
    assert r.returncode == 0, r.stderr
    assert "allowed to differ: sampling.seed differs (baseline 0, candidate 1)" in r.stdout
    foreign = tmp_path / "foreign.parquet"
    pq.write_table(pa.table(pq.read_table(same).to_pydict()), foreign)  # no mismatchscope metadata
    r = cli("gate", str(foreign), "--baseline", str(base))
    assert r.returncode == 0, r.stderr
    assert "comparability could not be checked" in r.stderr


def test_cli_reads_gate_toml_from_the_current_directory(pair, tmp_path):
    base, same, _ = pair
    work = tmp_path / "work"
    work.mkdir()
    r = subprocess.run(
        [str(Path(sys.executable).with_name("mismatchscope")), "gate", "--init"],
        cwd=work,
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0 and (work / "gate.toml").read_text() == STARTER_TOML
    r = subprocess.run(
        [str(Path(sys.executable).with_name("mismatchscope")), "gate", "--init"],
        cwd=work,
        capture_output=True,
        text=True,
    )
    assert r.returncode == 2 and "already exists" in r.stderr
    (work / "gate.toml").write_text("[absolute]\ntv_token_mean = 1e-9\n")  # certain to fail
    r = subprocess.run(
        [str(Path(sys.executable).with_name("mismatchscope")), "gate", str(same), "--format", "json"],
        cwd=work,
        capture_output=True,
        text=True,
    )
    assert r.returncode == 1, r.stderr
    data = json.loads(r.stdout)
    assert data["config"]["source"].endswith("gate.toml") and [c["name"] for c in data["checks"]] == [
        "tv_token_mean <= 1e-09"
    ]


def test_cli_json_is_reproducible(pair):
    base, same, _ = pair
    runs = [cli("gate", str(same), "--baseline", str(base), "--format", "json", "--bootstrap", "300") for _ in range(2)]
    assert all(r.returncode == 0 for r in runs)
    a, b = (json.loads(r.stdout) for r in runs)
    assert a["checks"] == b["checks"]
    check = a["checks"][0]
    for key in (
        "name",
        "metric",
        "kind",
        "method",
        "status",
        "limit",
        "op",
        "estimate",
        "interval",
        "candidate",
        "baseline",
        "difference",
        "difference_interval",
        "floor",
        "inconclusive",
        "explanation",
    ):
        assert key in check
    assert a["verdict"] == "pass" and a["comparability"]["checked"] is True
    assert a["candidate"]["run"]["sampling"]["seed"] == 0
    other = json.loads(
        cli("gate", str(same), "--baseline", str(base), "--format", "json", "--bootstrap", "300", "--seed", "5").stdout
    )
    assert other["checks"][0]["estimate"] == check["estimate"]  # the point estimate does not depend on the seed


def test_junit_markdown_and_step_summary(pair, tmp_path):
    base, _, worse = pair
    junit, md, summary = tmp_path / "out" / "gate.xml", tmp_path / "out" / "gate.md", tmp_path / "summary.md"
    summary.write_text("# earlier step\n")
    r = cli(
        "gate",
        str(worse),
        "--baseline",
        str(base),
        "--junit-xml",
        str(junit),
        "--markdown",
        str(md),
        env={"GITHUB_STEP_SUMMARY": str(summary)},
    )
    assert r.returncode == 1, r.stderr
    validate_junit(junit)
    root = ET.parse(junit).getroot()
    cases = root.findall("./testsuite/testcase")
    assert len(cases) == 8 == int(root.get("tests"))
    failed = [c.get("name") for c in cases if c.find("failure") is not None]
    assert int(root.get("failures")) == len(failed) and "k3_mean rise <= +25%" in failed
    assert "tv_token_mean <= 0.01" not in failed

    text = md.read_text()
    _assert_markdown_table(text, rows=8)
    assert "❌ mismatchscope gate: fail" in text and "`sampler.dtype: 'float32' -> 'float16'`" in text
    assert summary.read_text() == "# earlier step\n" + text + "\n"  # appended, not overwritten


def _assert_markdown_table(text: str, rows: int) -> None:
    from markdown_it import MarkdownIt

    tokens = MarkdownIt("commonmark").enable("table").parse(text)
    types = [t.type for t in tokens]
    assert "table_open" in types, "the summary does not render as a table"
    assert types.count("tr_open") == rows + 1  # header + one row per check


def test_help_stays_light():
    code = "import sys, mismatchscope.cli.main; bad = [m for m in sys.modules if m.split('.')[0] in ('matplotlib', 'scipy', 'torch', 'vllm')]; print(bad)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
    r = cli("gate", "--help")
    assert r.returncode == 0 and "--baseline" in r.stdout and "--allow-different" in r.stdout


def test_same_data_is_a_deterministic_rerun_unless_the_run_records_are_the_same(tmp_path):
    """Two probes of one stack at one seed write the same bytes: the expected case of a determinism check.

    The golden probe copied twice is a copy (the same manifest, start time and timings); the same data with
    the second run's own manifest (another session start, other measured seconds) is two runs that agree to
    the bit, which the gate says in a note, not a warning."""
    golden = REPO / "tests" / "data" / "golden-probe"
    base = shutil.copytree(golden, tmp_path / "base")
    copy = shutil.copytree(golden, tmp_path / "copy")
    rerun = shutil.copytree(golden, tmp_path / "rerun")
    manifest = json.loads((rerun / "manifest.json").read_text())
    manifest["sessions"] = [{"started_at": "2030-01-01T00:00:00+00:00", "resumed": False, "sampling_seconds": 4.9}]
    (rerun / "manifest.json").write_text(json.dumps(manifest))
    lenient = ["--format", "json", "--bootstrap", "50", "--limit", "tv_token_mean<=1"]

    r = cli("gate", str(copy), "--baseline", str(base), *lenient)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["notes"] == [] and any(w.endswith("is it a copy?") for w in doc["warnings"]), doc["warnings"]
    assert "the same run records" in r.stderr

    r = cli("gate", str(rerun), "--baseline", str(base), *lenient)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert not any("copy" in w for w in doc["warnings"]) and "warning: the baseline" not in r.stderr
    assert doc["notes"] == [
        f"the baseline {base} holds the same data as the candidate (same sizes, identical Parquet footers), from "
        "two runs (their run records differ): the two runs are bit-identical: the stack is deterministic at seed 0"
    ]
    assert "deterministic at seed 0" in r.stderr
