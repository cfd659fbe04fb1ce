"""Docs that cannot drift: the CLI reference is generated from ``--help``, the
format doc names exactly the schema's columns, and the README's example
commands run on the bundled data."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

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
    calls = readme_calls(lines, REPO)
    return cwd, list(zip(lines, cli_calls(calls, cwd.parent / f"{cwd.name}-calls", cwd=cwd), strict=True))


def readme_calls(lines: list[str], repo: Path) -> list[list[str]]:
    """The examples' arguments, run from a scratch folder: a bundled input (``sample_data/...``) is taken from the
    checkout, and everything the examples write (each ``--out``, and what later lines read of it) stays relative,
    in the scratch folder. An output is never the checkout's: a user who followed the README there has a
    ``runs/numerics`` of their own, which a probe into it would refuse."""
    args = [shlex.split(line)[1:] for line in lines]
    written = {a[i + 1] for a in args for i, x in enumerate(a[:-1]) if x == "--out"}

    def placed(a: str) -> str:
        ours = any(a == w or a.startswith(w.rstrip("/") + "/") for w in written)
        return str(repo / a) if "/" in a and not ours and (repo / a).exists() else a

    return [[placed(a) for a in call] for call in args]


def test_the_readme_examples_write_only_into_their_scratch_folder(tmp_path):
    """The test command failed after the README was followed: its probe went to the checkout's runs/numerics,
    which the README's own example had created."""
    repo = tmp_path / "checkout"
    (repo / "runs" / "numerics").mkdir(parents=True)  # what following the README leaves in a checkout
    (repo / "sample_data" / "tiny-qwen3-later").mkdir(parents=True)
    lines = [
        "mismatchscope probe --out runs/numerics",
        "mismatchscope rescore runs/numerics --out runs/lag --trainer-checkpoint sample_data/tiny-qwen3-later",
        "mismatchscope compare-masks runs/lag --rule icepop",
    ]
    assert readme_calls(lines, repo) == [
        ["probe", "--out", "runs/numerics"],
        [
            "rescore",
            "runs/numerics",
            "--out",
            "runs/lag",
            "--trainer-checkpoint",
            f"{repo}/sample_data/tiny-qwen3-later",
        ],
        ["compare-masks", "runs/lag", "--rule", "icepop"],
    ]
    assert all(a != str(repo / "runs" / "numerics") for call in readme_calls(_readme_examples(), repo) for a in call)


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


MOE_RUNS = {
    "no replay": "moe",
    "`--replay-routes` (ids)": "moe-replay",
    "`--replay-routes --replay-weights`": "moe-replay-weights",
}
"""the README's MoE table rows and the runs its commands write."""


def moe_table_mismatches(readme: str, docs: dict[str, dict]) -> list[str]:
    """Where the README's MoE table and its token count part from the report of the runs its commands make
    (``docs``: run name -> ``report --format json``). Within what another CPU moves them (the README says which
    figures vary): the token count by 1%, a flip rate by 0.2 percentage points, a mean by 5%."""

    def close(quoted: str, value: float | None, rel: float = 0.05, absolute: float = 0.0) -> bool:
        if quoted in ("-", "0"):
            return not value
        number = float(quoted.rstrip("%").replace(",", "")) / (100 if quoted.endswith("%") else 1)
        return value is not None and abs(number - value) <= max(rel * abs(value), absolute)

    out = []
    tokens = int(re.search(r"experts; ([\d,]+) completion\s+tokens", readme)[1].replace(",", ""))
    if not close(str(tokens), docs["moe"]["tokens"], rel=0.01):
        out.append(f"tokens {tokens} vs {docs['moe']['tokens']}")
    for row, run in MOE_RUNS.items():
        cells = re.search(rf"^\| {re.escape(row)} \|(.+)\|$", readme, re.M)[1].split("|")
        rates, anyl, means, share = (c.strip() for c in cells)
        ro = docs[run]["routing"]
        gap = ro["abs_logprob_diff"] or {
            "flipped_mean": None,
            "unflipped_mean": docs[run]["metrics"]["abs_logprob_diff_mean"],
        }
        pairs = [
            *zip(rates.split(" / "), [x["flip_rate"] for x in ro["route_flip_rate_by_layer"]], strict=True),
            (anyl.split(" ")[0], ro["route_flip_rate"]),
            *zip(means.split(" / "), [gap["flipped_mean"], gap["unflipped_mean"]], strict=True),
            (share, ro["routing_share_of_gap"]),
        ]
        for quoted, value in pairs:
            rate = quoted.endswith("%") or quoted == "0"
            if not close(quoted, value, rel=0.0 if rate else 0.05, absolute=0.002 if rate else 0.0):
                out.append(f"{row}: {quoted} vs {value}")
    return out


@pytest.mark.vllm
@pytest.mark.slow
def test_the_readme_moe_numbers_come_from_its_commands(readme_run):
    """The README's MoE table once quoted another run (6,871 tokens, flipped 0.00357 against unflipped 0.00320,
    where its own commands gave 6,869 and 0.00311 / 0.00313, the other order)."""
    cwd, _ = readme_run
    docs = {
        run: json.loads(cli("report", str(cwd / "runs" / run), "--format", "json").stdout) for run in MOE_RUNS.values()
    }
    assert moe_table_mismatches((REPO / "README.md").read_text(), docs) == []


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
