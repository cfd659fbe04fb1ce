"""``mismatchscope probe`` and ``rescore`` end to end through the real console
script: a real vLLM engine (CPU build) against a real transformers trainer on
the bundled sample checkpoint. One probe costs about a minute on 2 cores, so
runs are shared through module-scoped fixtures."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from mismatchscope.probe.engine_log import LOG_NAME
from tests.helpers import REPO, cli, cli_calls, cli_no_engine

SAMPLE = REPO / "sample_data"
DENSE = SAMPLE / "tiny-qwen3"
PROMPTS = SAMPLE / "prompts.jsonl"

pytestmark = [
    pytest.mark.vllm,
    pytest.mark.slow,
    pytest.mark.skipif(not DENSE.is_dir(), reason="sample checkpoint missing: run sample_data/build_sample_models.py"),
]

# --max-tokens 80: the sample task's worked solutions are about 55 tokens (at most
# about 75) and only a finished one reaches its "####" answer, so the rewards
# (and the advantage signs checked below) rest on completions this long.
BASE = ["--prompts", str(PROMPTS), "-n", "4", "--max-tokens", "80", "--seed", "3", "--round-prompts", "8"]


def tokens(run: Path):
    return pq.read_table(run / "tokens").sort_by([("sequence_id", "ascending"), ("position", "ascending")])


ENGINE_PROCESS = {"VLLM_ENABLE_V1_MULTIPROCESSING": "1"}


@pytest.fixture(scope="module")
def full_run(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("probe") / "run"
    # vLLM's default engine process, as a user's shell has it (the in-process engine tests switch it off here)
    r = cli("probe", str(DENSE), *BASE, "--out", str(out), "--format", "json", env=ENGINE_PROCESS)
    assert r.returncode == 0, r.stderr[-3000:]
    (out.parent / "summary.json").write_text(r.stdout)  # the printed JSON, for the tests below
    (out.parent / "stderr.txt").write_text(r.stderr)
    return out


ENGINE_LINE_MARKS = ("WARNING", "Triton", "LD_PRELOAD", "pid=", "Warning", "Loading safetensors", "Loading weights")
"""What vLLM, its processes, torch and transformers print while they start."""


def test_the_screen_shows_the_tool_and_the_run_log_holds_the_engines(full_run):
    err = (full_run.parent / "stderr.txt").read_text()
    assert not [ln for ln in err.splitlines() if any(m in ln for m in ENGINE_LINE_MARKS)], err
    assert f"{full_run / LOG_NAME} (--verbose shows it live)" in err
    log = (full_run / LOG_NAME).read_text()
    # the fp16 sampler's worker process casts the checkpoint's fp32 weights, one line per weight
    assert "Attempted to load weight" in log and "pid=" in log


def test_run_directory_and_summary(full_run):
    s = json.loads((full_run.parent / "summary.json").read_text())
    manifest = json.loads((full_run / "manifest.json").read_text())
    assert manifest["status"] == "complete"
    cfg = manifest["config"]
    assert cfg["sampler"]["dtype"] == "float16" and cfg["trainer"]["dtype"] == "float32"
    assert cfg["checkpoint"]["sha256"] and cfg["prompts"]["sha256"] and cfg["sampling"]["seed"] == 3
    assert manifest["sampler_info"] and manifest["trainer_info"] and manifest["timings"]["tokens"] > 0
    # 32 prompts x 4 samples, in 4 sampling rounds of 8 prompts
    assert len(list((full_run / "samples").glob("round-*.parquet"))) == 4
    t = tokens(full_run)
    assert len(set(t.column("sequence_id").to_pylist())) == 128
    meta = json.loads(pq.read_schema(next((full_run / "tokens").glob("*.parquet"))).metadata[b"mismatchscope"])
    assert meta["schema_version"] == 1 and meta["sampler"]["dtype"] == "float16"
    prompts = pq.read_table(full_run / "prompts.parquet")
    assert prompts.num_rows == 32 and prompts.column("answer")[0].as_py()
    # fp16 sampler vs fp32 trainer: a clearly nonzero, still small mismatch, visible in the report
    m = s["report"]["metrics"]
    assert 1e-4 < m["abs_logprob_diff_max"] < 0.1
    assert s["report"]["tokens"] == t.num_rows and s["compare_masks"]["rules"]
    # rewards and GRPO advantages exist, with both signs somewhere
    adv = t.column("advantage").to_pylist()
    assert min(adv) < 0 < max(adv)


def test_report_and_compare_masks_accept_the_run_directory(full_run):
    r = cli("report", str(full_run), "--format", "json")
    assert r.returncode == 0 and json.loads(r.stdout)["run"]["sampler"]["dtype"] == "float16"
    r = cli("compare-masks", str(full_run), "--format", "json")
    rows = {x["name"]: x for x in json.loads(r.stdout)["rules"]}
    assert rows["dppo-tv"]["hypothesis"] == "data"  # real advantages, no hypotheses


def test_killed_probe_resumes_to_the_same_sequences(full_run, tmp_path):
    out = tmp_path / "run"
    exe = Path(sys.executable).with_name("mismatchscope")
    env = {k: v for k, v in os.environ.items() if k != "MISMATCHSCOPE_DEBUG"}
    proc = subprocess.Popen(
        [str(exe), "probe", str(DENSE), *BASE, "--out", str(out)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=env,
        start_new_session=True,
    )
    deadline = time.time() + 300
    while time.time() < deadline and not list((out / "tokens").glob("part-*.parquet")):
        time.sleep(0.2)
    os.killpg(proc.pid, signal.SIGKILL)  # the engine's worker processes too
    proc.wait()
    written = list((out / "tokens").glob("part-*.parquet"))
    assert written, "the probe was not killed mid-run"
    assert json.loads((out / "manifest.json").read_text())["status"] == "running"
    r = cli("probe", str(DENSE), *BASE, "--out", str(out))
    assert r.returncode == 2 and "--resume" in r.stderr  # never silently appends
    log = out / LOG_NAME
    killed_log = log.read_bytes() if log.exists() else None
    r = cli("probe", str(DENSE), *BASE, "--out", str(out), "--resume", "--format", "json", "--verbose")
    assert r.returncode == 0, r.stderr[-3000:]
    # --verbose: the engine's own lines on screen (the float16 sampler casting the float32 weights),
    # none added to the run's log
    assert "Attempted to load weight" in r.stderr
    assert (log.read_bytes() if log.exists() else None) == killed_log
    a, b = tokens(full_run), tokens(out)
    assert a.column("sequence_id").to_pylist() == b.column("sequence_id").to_pylist()  # none lost, none duplicated
    assert a.column("token_id").to_pylist() == b.column("token_id").to_pylist()  # same seeded samples
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["status"] == "complete"
    # provenance survives the resume: engine records and every session's timings, summed
    assert manifest["sampler_info"]["engine"] == "vllm" and manifest["sampler_info"]["version"]
    assert manifest["sampler_info"].get("dtype") and manifest["trainer_info"]
    first, second = manifest["sessions"]
    assert not first["resumed"] and second["resumed"] and first["started_at"] <= second["started_at"]
    t = manifest["timings"]
    assert t["sessions"] == 2 and t["tokens"] == b.num_rows
    assert (
        t["sampling_seconds"] == first["sampling_seconds"] + second["sampling_seconds"]
        and first["sampling_seconds"] > 0
    )
    assert t["scoring_seconds"] == first["scoring_seconds"] + second["scoring_seconds"] > 0


def test_resume_refuses_other_settings(full_run, tmp_path):
    out = tmp_path / "copy"
    shutil.copytree(full_run, out)
    r = cli_no_engine(  # refused before any engine starts
        "probe", str(DENSE), *BASE[:-2], "--round-prompts", "8", "--temperature", "0.7", "--out", str(out), "--resume"
    )
    assert r.returncode == 2 and "differs in sampling" in r.stderr


def test_rescore_reproduces_and_then_changes_the_trainer_side(full_run, tmp_path):
    same, half = tmp_path / "same", tmp_path / "half"
    calls = [
        ["rescore", str(full_run), "--out", str(out), "--trainer-dtype", dtype, "--format", "json"]
        for out, dtype in ((same, "float32"), (half, "float16"))
    ]
    for r in cli_calls(calls, tmp_path / "calls"):  # one process: torch and transformers imported once
        assert r.returncode == 0, r.stderr[-3000:]
    a, b = tokens(full_run), tokens(same)
    assert a.column("sampler_logprob").to_pylist() == b.column("sampler_logprob").to_pylist()  # no resampling
    diffs = [
        abs(x - y)
        for x, y in zip(a.column("trainer_logprob").to_pylist(), b.column("trainer_logprob").to_pylist(), strict=True)
    ]
    assert max(diffs) < 1e-5
    c = tokens(half)
    assert (
        max(
            abs(x - y)
            for x, y in zip(
                a.column("trainer_logprob").to_pylist(), c.column("trainer_logprob").to_pylist(), strict=True
            )
        )
        > 1e-4
    )
    assert json.loads((half / "manifest.json").read_text())["config"]["rescored_from"] == str(full_run)


def test_a_probe_run_without_tokens_says_so_in_probe_terms(tmp_path):
    """All completions empty: the run is written, then the summary said only "the input has no token rows"."""
    import pyarrow as pa

    from mismatchscope.cli.probe import _parsed_rules, _show
    from mismatchscope.errors import NoTokensError
    from mismatchscope.schema import arrow_schema

    run = tmp_path / "run"
    (run / "tokens").mkdir(parents=True)
    schema = arrow_schema(["sequence_id", "position", "token_id", "sampler_logprob", "trainer_logprob"])
    pq.write_table(pa.Table.from_pylist([], schema=schema), run / "tokens" / "part-00000.parquet")
    (run / "manifest.json").write_text(json.dumps({"status": "complete"}))
    with pytest.raises(NoTokensError) as e:
        _show(run, _parsed_rules(None), "table")
    assert str(e.value) == (
        f"the run in {run} holds no generated token with finite logprobs: every completion was empty (the model "
        "ended each one at once) or dropped (check the prompts, --max-tokens and the stop settings; the run's "
        "samples/ folder holds what was sampled)"
    )
