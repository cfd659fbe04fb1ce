"""``certify --full-vocab``: whole rows through their digests; one ULP anywhere in a row fails and is named."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from mismatchscope.probe.full_rows import row_columns, row_digest
from tests.helpers import cli

V = 16


def _rows(n: int, seed: int) -> np.ndarray:
    logits = np.random.default_rng(seed).normal(size=(n, V)).astype(np.float32)
    shifted = logits - logits.max(axis=1, keepdims=True)
    return (shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))).astype(np.float32)


def _write(path, sampler_rows, trainer_rows, tokens):
    """Two sequences of 3 tokens; the sampled logprobs are each side's row at the token (float32, widened)."""
    n = len(tokens)
    cols = {
        "sequence_id": [0, 0, 0, 1, 1, 1],
        "position": pa.array([0, 1, 2, 0, 1, 2], pa.int32()),
        "token_id": tokens,
        "sampler_logprob": sampler_rows[np.arange(n), tokens].astype(np.float64),
        "trainer_logprob": trainer_rows[np.arange(n), tokens].astype(np.float64),
        **row_columns(sampler_rows, trainer_rows),
    }
    (path / "tokens").mkdir(parents=True)
    pq.write_table(pa.table(cols), path / "tokens" / "part-00000.parquet")
    return path


def test_one_ulp_in_one_row_fails_and_names_the_position_and_id(tmp_path):
    trainer = _rows(6, 0)
    sampler = trainer.copy()
    # one float32 ULP at sequence 1, position 2 (row 5), vocabulary id 7: never the sampled token (3)
    sampler[5, 7] = np.nextafter(sampler[5, 7], np.float32(0))
    run = _write(tmp_path / "run", sampler, trainer, [3] * 6)
    assert (row_digest(sampler) != row_digest(trainer)).tolist() == [False] * 5 + [True]
    r = cli("certify", str(run), "--full-vocab")
    assert r.returncode == 1, r.stderr
    out = " ".join(r.stdout.split())
    assert "1 of 6 whole rows differ; first at sequence 1 position 2 (token 3): vocabulary id 7" in out
    assert "the run certifies on sampled tokens but not on full rows" in out
    ok = cli("certify", str(run))  # the sampled tokens alone certify: the gap is elsewhere in the row
    assert ok.returncode == 0


def test_equal_rows_certify_and_a_run_without_rows_is_an_input_error(tmp_path):
    rows = _rows(6, 1)
    run = _write(tmp_path / "run", rows, rows.copy(), [1, 2, 3, 4, 5, 6])
    r = cli("certify", str(run), "--full-vocab", "--format", "json")
    assert r.returncode == 0, r.stderr
    import json

    doc = json.loads(r.stdout)
    assert doc["full_vocab"] == {"rows": 6, "differing": 0, "equal": True, "first": None} and doc["certified"]
    bare = tmp_path / "bare"
    (bare / "tokens").mkdir(parents=True)
    table = pq.read_table(run / "tokens" / "part-00000.parquet").drop(["sampler_row_digest"])
    pq.write_table(table, bare / "tokens" / "part-00000.parquet")
    r = cli("certify", str(bare), "--full-vocab")
    assert r.returncode == 2 and r.stderr.startswith("error:") and "sampler_row_digest" in r.stderr


def test_markdown_and_junit_carry_the_whole_row_verdict(tmp_path):
    """The Markdown and JUnit reports once said "certified" (no full_vocab case) for a run whose rows part."""
    trainer = _rows(6, 0)
    sampler = trainer.copy()
    sampler[5, 7] = np.nextafter(sampler[5, 7], np.float32(0))  # one ULP, off the sampled token: tokens certify
    run = _write(tmp_path / "run", sampler, trainer, [3] * 6)
    md, xml = tmp_path / "v.md", tmp_path / "v.xml"
    r = cli("certify", str(run), "--full-vocab", "--markdown", str(md), "--junit-xml", str(xml))
    assert r.returncode == 1, r.stderr
    text = md.read_text()
    assert text.startswith("### ❌ mismatchscope certify: not certified")
    assert "| ❌ FAIL | `full_vocab` | 1 of 6 whole rows differ; first at sequence 1 position 2" in text
    import xml.etree.ElementTree as ET

    root = ET.parse(xml).getroot()
    assert root.get("failures") == "1"  # the five token checks pass or are not checked; the rows fail
    case = next(c for c in root.iter("testcase") if c.get("name") == "full_vocab")
    assert case.find("failure") is not None
    assert {p.get("name"): p.get("value") for p in root.iter("property")}["verdict"] == "not certified"


def test_a_failing_full_vocab_is_never_printed_under_a_certified_line(tmp_path):
    """The tokens' verdict once read "CERTIFIED: every checked pair is byte-equal" just above "full vocabulary:
    NOT CERTIFIED": the one verdict line now carries the whole rows too."""
    trainer = _rows(6, 0)
    sampler = trainer.copy()
    sampler[5, 7] = np.nextafter(sampler[5, 7], np.float32(0))
    run = _write(tmp_path / "run", sampler, trainer, [3] * 6)
    r = cli("certify", str(run), "--full-vocab", env={"COLUMNS": "200"})
    assert r.returncode == 1
    assert "CERTIFIED: every" not in r.stdout, r.stdout
    out = " ".join(r.stdout.split())
    verdict = out[out.index("NOT CERTIFIED") :]
    assert verdict.startswith("NOT CERTIFIED: full vocabulary: 1 of 6 whole rows differ"), verdict
    assert verdict.endswith(
        "the run certifies on sampled tokens but not on full rows (every checked pair byte-equal: "
        "trainer_vs_sampler_decode)"
    )


def test_equal_digests_with_a_recorded_difference_are_inconsistent(tmp_path):
    """Equal digests say the rows are equal; a row_max_abs_diff of 1e-3 on the same row says they are not. The run
    contradicts itself: it is not certified, and the first such row is named."""
    rows = _rows(6, 1)
    run = _write(tmp_path / "run", rows, rows.copy(), [1, 2, 3, 4, 5, 6])
    shard = run / "tokens" / "part-00000.parquet"
    table = pq.read_table(shard)
    diff = table.column("row_max_abs_diff").to_numpy().copy()
    diff[4] = 1e-3  # sequence 1, position 1
    table = table.set_column(table.schema.get_field_index("row_max_abs_diff"), "row_max_abs_diff", pa.array(diff))
    pq.write_table(table, shard)
    r = cli("certify", str(run), "--full-vocab", "--format", "json")
    assert r.returncode == 1, r.stderr
    import json

    doc = json.loads(r.stdout)
    assert doc["full_vocab"]["equal"] is False and doc["full_vocab"]["inconsistent"] == 1
    assert doc["certified"] is False
    assert (
        "1 of 6 rows have equal digests but a recorded largest difference above 0 (first at sequence 1 position 1: "
        "0.001): the row columns contradict each other" in doc["reasons"][-1]
    )
