"""Docs that cannot drift: the CLI reference is generated from ``--help``, the
format doc names exactly the schema's columns, and the README's example
commands run on the bundled data."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys

import pyarrow as pa
import pytest

from mismatchscope import schema
from tests.helpers import REPO, cli, cli_calls


def test_cli_reference_is_generated_from_help():
    r = subprocess.run(
        [sys.executable, str(REPO / "docs" / "generate_cli.py"), "--check"], capture_output=True, text=True
    )
    assert r.returncode == 0, r.stderr


_NAMES = {
    pa.float64(): "float64",
    pa.float32(): "float32",
    pa.int64(): "int64",
    pa.int32(): "int32",
    pa.string(): "string",
}


def _type_name(t: pa.DataType) -> str:
    return f"list<{_type_name(t.value_type)}>" if pa.types.is_list(t) else _NAMES.get(t, str(t))


def test_format_doc_lists_exactly_the_schema_columns():
    text = (REPO / "docs" / "format.md").read_text()
    text = text.split("\n## MoE routes")[0]  # the routes/ files have their own columns (mismatchscope.routing.layout)
    rows = dict(re.findall(r"^\| `(\w+)` \| ([^|]+) \|", text, re.M))
    assert set(rows) == set(schema.COLUMNS), set(rows) ^ set(schema.COLUMNS)
    for name, col in schema.COLUMNS.items():
        if name in schema.REQUIRED_NAMES and pa.types.is_floating(col.type):
            assert rows[name].strip() == "float32/float64", name  # readers accept both widths
        else:
            assert rows[name].strip() == _type_name(col.type), name


def _readme_examples() -> list[str]:
    text = (REPO / "README.md").read_text()
    blocks = re.findall(r"<!-- example -->\s*```bash\n(.+?)\n```", text, re.S)
    return [line.split("  #")[0].strip() for block in blocks for line in block.splitlines() if line.strip()]


def test_readme_has_examples():
    lines = _readme_examples()
    assert len(lines) >= 5 and all(line.startswith("mismatchscope ") for line in lines)


@pytest.fixture(scope="module")
def readme_run(tmp_path_factory):
    """Every README example, in order, in one scratch folder (later lines read what earlier ones wrote).

    Each line is split as a shell splits it and run through the console script's entry point, all in one
    process: the probes and rescores would otherwise import torch, transformers and vLLM once a line.
    """
    pytest.importorskip("vllm", reason="the policy-lag example probes with real vLLM")
    cwd = tmp_path_factory.mktemp("readme")
    lines = _readme_examples()
    calls = [
        [str(REPO / a) if "/" in a and (REPO / a).exists() else a for a in shlex.split(line)[1:]] for line in lines
    ]
    return cwd, list(zip(lines, cli_calls(calls, cwd.parent / f"{cwd.name}-calls", cwd=cwd), strict=True))


@pytest.mark.vllm
@pytest.mark.slow
def test_readme_examples_run(readme_run):
    _, results = readme_run
    for line, r in results:
        assert r.returncode == 0, (line, r.stderr[-2000:])
        assert r.stdout.strip(), f"{line}: printed nothing"


@pytest.mark.vllm
@pytest.mark.slow
def test_readme_policy_lag_claims_hold(readme_run):
    """The README says: no token rule rejects on the same-weights probe; on the lag
    run IcePop, IPO, DPPO-TV and KPop each reject tokens, and not the same ones."""
    cwd, _ = readme_run
    rules = ["--rule", "icepop", "--rule", "ipo", "--rule", "dppo-tv", "--rule", "kpop"]
    for run, nonzero in (("numerics", False), ("lag", True)):
        r = cli("compare-masks", str(cwd / "runs" / run), *rules, "--format", "json")
        assert r.returncode == 0, r.stderr
        data = json.loads(r.stdout)
        rejected = {row["name"]: row["tokens_rejected"] for row in data["rules"]}
        assert set(rejected) == {"icepop", "ipo", "dppo-tv", "kpop"}
        assert all(v > 0 for v in rejected.values()) if nonzero else all(v == 0 for v in rejected.values()), (
            run,
            rejected,
        )
        if nonzero:
            assert all(pair["jaccard"] < 0.9 for pair in data["agreement"]), data["agreement"]


@pytest.mark.vllm
@pytest.mark.slow
def test_readme_token_view_of_the_lag_run_opens_in_chromium(readme_run):
    """The README's ``view runs/lag``: a fresh probe of the bundled model, its text from the checkpoint the probe
    recorded, IcePop's cuts marked, and no console error in a real browser."""
    from tests.browser import CHROMIUM, NO_CHROMIUM, Browser

    if CHROMIUM is None:
        pytest.skip(NO_CHROMIUM)
    cwd, _ = readme_run
    b = Browser()
    try:
        b.open(cwd / "lag.html")
        data = b.js("JSON.parse(document.getElementById('tv-data').textContent)")
        assert data["text"]["tokenizer"] is not None and len(data["sequences"]) == 20
        icepop = next(r for r in data["rules"] if r["name"] == "icepop")
        assert b.js(f"document.querySelectorAll('.t .k.{icepop['key']}').length") == icepop["acted"] > 0
        assert b.errors == [], b.errors
    finally:
        b.close()
