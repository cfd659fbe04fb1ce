"""``mismatchscope provenance`` on every bundled run, in each format, and its refusals: the Recorder runs and the
golden probe were recorded before provenance (they read with "not recorded" fields, never an error); the two
multi-turn probe runs carry both sides' record. The probes recorded in the tests are
tests/probe/test_provenance.py's and tests/cli/test_gate.py's."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from tests.helpers import REPO, cli
from tests.inputs import error_line

BUNDLED = sorted((REPO / "sample_data" / "runs").iterdir()) + [REPO / "tests" / "data" / "golden-probe"]
RECORDED = {"multi-turn-messages", "multi-turn-tokens"}
"""the bundled runs probed after provenance was recorded."""
SCHEMA = REPO / "docs" / "schemas" / "provenance.json"


def _json(*args: str) -> dict:
    r = cli("provenance", *args, "--format", "json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    jsonschema.validate(doc, json.loads(SCHEMA.read_text()), cls=jsonschema.Draft202012Validator)
    return doc


@pytest.mark.parametrize("run", BUNDLED, ids=[p.name for p in BUNDLED])
def test_every_bundled_run_reads_in_every_format(run, tmp_path):
    before = sorted((p.relative_to(run), p.stat().st_mtime_ns) for p in run.rglob("*"))
    recorded = run.name in RECORDED
    table = cli("provenance", str(run), env={"COLUMNS": "80"})
    assert table.returncode == 0 and not table.stderr, table.stderr
    before_provenance = "recorded before runs recorded provenance" in " ".join(table.stdout.split())
    assert before_provenance is not recorded and "not recorded" in table.stdout
    assert max(len(line) for line in table.stdout.splitlines()) <= 80
    doc = _json(str(run))
    assert doc["compared"] == "sides" and doc["runs"][0]["recorded"] is recorded
    assert {r["status"] for r in doc["rows"]} >= {"not recorded"}
    if recorded:  # vLLM float16 against the float32 trainer, one checkpoint: the weights are the same
        rows = {r["field"]: r for r in doc["rows"]}
        assert rows["identities.weights"]["status"] == "same"
        assert (rows["used.weights_dtype"]["left"], rows["used.weights_dtype"]["right"]) == ("float16", "float32")
    md = tmp_path / "p.md"
    r = cli("provenance", str(run), "--markdown", str(md))
    assert r.returncode == 0, r.stderr
    assert (
        md.read_text().startswith("### mismatchscope provenance:")
        and "| field | sampler | trainer | |" in md.read_text()
    )
    assert sorted((p.relative_to(run), p.stat().st_mtime_ns) for p in run.rglob("*")) == before  # read only


def test_the_golden_probe_reads_its_configuration_and_compares_its_sides():
    doc = _json(str(BUNDLED[-1]))
    rows = {r["field"]: r for r in doc["rows"]}
    # its manifest held both dtypes, the vLLM version and the checkpoint digest: they are shown
    assert rows["used.weights_dtype"]["left"] == "float16" and rows["used.weights_dtype"]["right"] == "float32"
    assert rows["used.weights_dtype"]["status"] == "changed"
    assert rows["software.vllm"]["left"] == "0.32.0" and rows["software.vllm"]["status"] == "one side"
    assert rows["identities.checkpoint_sha256"]["status"] == "same"
    assert rows["identities.weights"]["status"] == "not recorded"  # the per-file digests came later
    summary = doc["runs"][0]
    assert summary["contract"] is True and summary["sampler_source"] == "manifest"
    assert "tokenizer, chat template not recorded on both" in summary["contract_sentence"]


def test_two_bundled_runs_side_by_side():
    default, zero = BUNDLED[0], BUNDLED[1]
    doc = _json(str(default), str(zero))
    assert doc["compared"] == "runs" and doc["left"] == str(default) and doc["right"] == str(zero)
    assert doc["changed"] == 0  # two Recorder runs that recorded nothing of their sides: nothing known to differ
    assert all(r["field"].startswith(("sampler.", "trainer.")) for r in doc["rows"])
    text = cli("provenance", str(default), str(zero)).stdout
    assert f"baseline {default} vs candidate {zero}" in " ".join(text.split())


def test_a_shard_or_the_tokens_folder_names_its_run():
    run = BUNDLED[-1]
    shard = next((run / "tokens").glob("*.parquet"))
    assert _json(str(shard))["rows"] == _json(str(run))["rows"] == _json(str(run / "tokens"))["rows"]


def test_what_is_no_run_is_one_line_and_exit_2(tmp_path, data):
    error_line(cli("provenance", str(tmp_path / "missing")))
    line = error_line(cli("provenance", str(data)))  # a Parquet file outside any run
    assert "is not a run directory" in line
    error_line(cli("provenance", str(BUNDLED[0]), str(Path(tmp_path))))  # an empty folder as the second run
