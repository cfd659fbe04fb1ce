"""The gate end to end on real probes: real vLLM on the CPU sampling the
bundled tiny Qwen3, the real transformers trainer, the real console script's entry point.

Three probe runs for the session, all float32 trainer, the first 16 prompts x 4 samples:

* ``fp32_s0``: float32 sampler, seed 0 (the baseline);
* ``fp16_s0``: float16 sampler, seed 0 (must fail on the divergence metrics);
* ``fp32_s1``: float32 sampler, seed 1 (a float32 candidate with other
  samples: sampling noise alone must not fail the gate). A rerun with the
  same seed would be a weaker check: float32 vLLM on the CPU samples the
  same tokens again.

Measured on the tiny model: float32 against the float32 trainer gives
|log p - log q| ~ 4e-7 and k3 ~ 2e-13; float16 gives |log p - log q| ~ 6e-4,
TV ~ 6e-5 and k3 ~ 9e-7. With the default floors (1e-4 for TV and
|log p - log q|, 1e-6 for k3) the float16 candidate fails on
abs_logprob_diff_mean, while its TV and k3 rises are too small in absolute
terms to fail; with floors scaled to this model (``TIGHT``) all three
divergence metrics fail, and the float32 runs still pass.

``MISMATCHSCOPE_SAMPLE_DATA`` points at another folder built by
``sample_data/build_sample_models.py`` (default: the repository's own).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.helpers import REPO, cli, cli_calls

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

DIVERGENCE = ("tv_token_mean", "abs_logprob_diff_mean", "k3_mean")
TIGHT = """\
# floors scaled to the tiny sample model, whose float16 mismatch is ~1e-4 of a real model's
[regression]
tv_token_mean = { max_increase = 0.25, floor = 1e-7 }
abs_logprob_diff_mean = { max_increase = 0.25, floor = 1e-7 }
k3_mean = { max_increase = 0.25, floor = 1e-11 }
"icepop.token_reject_rate" = { max_increase = 0.25, floor = 1e-4 }
"ipo.token_reject_rate" = { max_increase = 0.25, floor = 1e-4 }
"""


def _sample_data() -> Path:
    return Path(os.environ.get("MISMATCHSCOPE_SAMPLE_DATA", REPO / "sample_data"))


@pytest.fixture(scope="session")
def probes(tmp_path_factory) -> dict[str, Path]:
    data = _sample_data()
    checkpoint, prompts = data / "tiny-qwen3", data / "prompts.jsonl"
    if not (checkpoint / "config.json").is_file() or not prompts.is_file():
        pytest.skip(
            f"{checkpoint} or {prompts} is missing: build them with `python sample_data/build_sample_models.py`"
        )
    pytest.importorskip("vllm", reason="needs real vLLM (install the cpu or vllm extra)")
    root = tmp_path_factory.mktemp("gate_probes")
    half = root / "prompts.jsonl"  # 64 completions a run: the float16 gap is far beyond doubt, and the probes cost half
    half.write_text("".join(prompts.read_text().splitlines(keepends=True)[:16]))
    prompts = half
    runs = {"fp32_s0": ("float32", 0), "fp16_s0": ("float16", 0), "fp32_s1": ("float32", 1)}
    calls = [
        ["probe", str(checkpoint), "--prompts", str(prompts), "--out", str(root / name), "--sampler-dtype", dtype]
        + ["--trainer-dtype", "float32", "--seed", str(seed), "-n", "4"]
        for name, (dtype, seed) in runs.items()
    ]
    # the probes are the gate's input, not its subject: one process imports vLLM once for the three
    for r in cli_calls(calls, root / "calls", env={"VLLM_CPU_KVCACHE_SPACE": "1"}):
        assert r.returncode == 0, r.stderr[-3000:]
    return {name: root / name for name in runs}


def _gate(probes, candidate: str, *args: str) -> tuple[int, dict]:
    r = cli("gate", str(probes[candidate]), "--baseline", str(probes["fp32_s0"]), "--format", "json", *args)
    assert r.returncode in (0, 1), r.stderr
    return r.returncode, json.loads(r.stdout)


def _by_metric(data: dict) -> dict[str, dict]:
    return {c["metric"]: c for c in data["checks"] if c["kind"] == "regression"}


def test_fp16_candidate_fails_on_the_divergence_metrics(probes, tmp_path):
    code, data = _gate(probes, "fp16_s0")
    assert code == 1 and data["verdict"] == "fail"
    assert [d["key"] for d in data["comparability"]["serving"]] == ["sampler.dtype"]
    checks = _by_metric(data)
    assert checks["abs_logprob_diff_mean"]["status"] == "fail"
    for m in DIVERGENCE:  # every divergence metric rose far beyond +25%, beyond doubt
        assert checks[m]["interval"][0] > 10, (m, checks[m])
    tight = tmp_path / "gate.toml"
    tight.write_text(TIGHT)
    code, data = _gate(probes, "fp16_s0", "--config", str(tight))
    assert code == 1
    checks = _by_metric(data)
    assert {m: checks[m]["status"] for m in DIVERGENCE} == dict.fromkeys(DIVERGENCE, "fail")


def test_fp32_runs_with_different_seeds_do_not_fail(probes, tmp_path):
    r = cli("gate", str(probes["fp32_s1"]), "--baseline", str(probes["fp32_s0"]))
    assert r.returncode == 2 and "sampling.seed differs (baseline 0, candidate 1)" in r.stderr  # refused unless allowed
    code, data = _gate(probes, "fp32_s1", "--allow-different", "seed")
    assert code == 0 and data["verdict"] == "pass", data["checks"]
    assert data["comparability"]["checked"] and data["comparability"]["serving"] == []  # the seed is sampling's
    tight = tmp_path / "gate.toml"
    tight.write_text(TIGHT)
    code, data = _gate(probes, "fp32_s1", "--allow-different", "seed", "--config", str(tight))
    assert code == 0, [
        c for c in data["checks"] if c["status"] == "fail"
    ]  # no false alarm from sampling noise, even with tiny floors


def test_the_gate_lists_what_changed_in_the_stack(probes, tmp_path):
    """The float16 candidate against the float32 baseline: the sampler's dtype is listed as changed, in the JSON, the
    table and the Markdown, beside the verdict; only the sampler's side moved. Two runs of one stack (float32, the
    seeds apart: the gate's comparability judges seeds) list nothing."""
    md = tmp_path / "g.md"
    _, data = _gate(probes, "fp16_s0", "--markdown", str(md))
    stack = data["stack"]
    assert stack["baseline_recorded"] and stack["candidate_recorded"] and stack["notes"] == []
    by = {c["field"]: c for c in stack["changes"]}
    assert by["used.weights_dtype"]["baseline"] == "float32" and by["used.weights_dtype"]["candidate"] == "float16"
    assert by["requested.weights_dtype"]["text"] == "sampler weights dtype (requested): float32 -> float16"
    assert {c["side"] for c in stack["changes"]} == {"sampler"}
    # what else a float16 engine changes: its KV cache and lm_head follow the weights; oneDNN may fall back
    assert set(by) <= {
        "requested.weights_dtype",
        "used.weights_dtype",
        "used.kv_cache_dtype",
        "used.lm_head_dtype",
        "fallbacks",
    }
    assert "| sampler | weights dtype (used) | float32 | float16 |" in md.read_text()
    summary = tmp_path / "summary.md"  # a GitHub job's step summary gets the same Markdown
    r = cli(
        "gate", str(probes["fp16_s0"]), "--baseline", str(probes["fp32_s0"]), env={"GITHUB_STEP_SUMMARY": str(summary)}
    )
    assert r.returncode == 1 and "| sampler | weights dtype (used) | float32 | float16 |" in summary.read_text()
    table = cli("gate", str(probes["fp16_s0"]), "--baseline", str(probes["fp32_s0"]), env={"COLUMNS": "80"})
    assert table.returncode == 1, table.stderr
    text = table.stdout
    assert "What changed in the stack (provenance)" in text and "weights dtype (used)" in text
    assert text.index("What changed in the stack") < text.index("FAIL")  # before the verdict's checks
    _, same = _gate(probes, "fp32_s1", "--allow-different", "seed")
    assert same["stack"]["changes"] == [] and same["stack"]["candidate_recorded"]
    _the_page_and_the_junit_list_it(probes, tmp_path, by["used.weights_dtype"]["text"])
    plain = cli("gate", str(probes["fp32_s1"]), "--baseline", str(probes["fp32_s0"]), "--allow-different", "seed")
    assert "stack changes (provenance): nothing" in plain.stdout


def _the_page_and_the_junit_list_it(probes, tmp_path: Path, change: str) -> None:
    """The same changes on the gate's page, read in a real browser (a table under its heading, before the checks),
    and in its JUnit report: one ``stack_change`` property per change, so a CI's test view shows them."""
    import xml.etree.ElementTree as ET

    from tests.browser import CHROMIUM, NO_CHROMIUM, Browser

    page, junit = tmp_path / "gate.html", tmp_path / "gate.xml"
    args = ("--baseline", str(probes["fp32_s0"]), "--html", str(page), "--junit-xml", str(junit))
    r = cli("gate", str(probes["fp16_s0"]), *args)
    assert r.returncode == 1, r.stderr
    props = [(p.get("name"), p.get("value")) for p in ET.parse(junit).iter("property")]
    assert ("stack_change", change) in props
    assert str(dict(props)["stack_changes"]).startswith("sampler ")
    if CHROMIUM is None:
        pytest.skip(NO_CHROMIUM)
    b = Browser()
    try:
        b.open(page)
        heads = b.js("[...document.querySelectorAll('h2')].map(h => h.textContent)")
        assert "What changed in the stack (provenance)" in heads
        rows = b.js(
            "[...[...document.querySelectorAll('h2')].find(h => h.textContent.startsWith('What changed'))"
            ".nextElementSibling.querySelectorAll('tbody tr')].map(r => [...r.cells].map(c => c.textContent))"
        )
        assert ["sampler", "weights dtype (used)", "float32", "float16"] in rows
        order = b.js("document.body.innerHTML.indexOf('What changed') < document.body.innerHTML.indexOf('<table')")
        assert order  # the changes come before the checks' table
        assert b.errors == [], b.errors
    finally:
        b.close()


def test_each_run_recorded_the_engine_it_ran_and_its_fallbacks(probes):
    """The probes' sampler sides, read off their live engines, and the fallbacks each engine logged: three engines
    in one process log theirs each (an engine's once-only warnings are not lost to the one before it)."""
    from tests.execution.test_record import validate

    records = {name: json.loads((run / "manifest.json").read_text())["provenance"] for name, run in probes.items()}
    for name, dtype in (("fp32_s0", "float32"), ("fp16_s0", "float16"), ("fp32_s1", "float32")):
        validate(records[name])
        sampler = records[name]["sampler"]
        assert sampler["engine"] == "vllm" and sampler["used"]["weights_dtype"] == dtype
        assert isinstance(sampler["fallbacks"], list)  # the engine's output was captured and read
    assert records["fp32_s0"]["sampler"]["fallbacks"] == records["fp32_s1"]["sampler"]["fallbacks"]
    doctor = json.loads(cli("doctor", str(probes["fp16_s0"]), "--format", "json").stdout)
    fallback = next(f for f in doctor["findings"] if f["cause"] == "fallback")
    assert fallback["status"] == ("detected" if records["fp16_s0"]["sampler"]["fallbacks"] else "clear")
    assert doctor["verdict"] == "numerics" and doctor["top"]["cause"] != "fallback"
