"""``compare-masks --write``: the audit's counts are the table's, for every default rule and every framework
reading, on the bundled runs; it joins the run on its keys; a failed command leaves nothing behind."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from mismatchscope import schema
from mismatchscope.audit import SEQUENCES_FILE, TOKENS_FILE
from mismatchscope.rules.readings import READINGS
from tests.helpers import REPO, SAMPLE_PAIRS, cli, pairs
from tests.inputs import ROWS, error_line

GOLDEN = REPO / "tests" / "data" / "golden-probe"
RECORDED = REPO / "sample_data" / "runs" / "rl-default"


def _audited(path: Path, out: Path, *args: str) -> dict:
    r = cli("compare-masks", str(path), *args, "--format", "json", "--write", str(out))
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def assert_counts_equal(doc: dict, out: Path) -> int:
    """Every rule row of ``compare-masks --format json`` against the audit's decision column; returns the rows
    compared."""
    tokens = pq.read_table(out / TOKENS_FILE)
    seqs = pq.read_table(out / SEQUENCES_FILE)
    meta = json.loads(tokens.schema.metadata[b"mismatchscope_audit"])["rules"]
    meta += json.loads(seqs.schema.metadata[b"mismatchscope_audit"])["rules"]
    column = {(m["name"], m["hypothesis"]): m["column"] for m in meta}
    n_tok = seqs["tokens"].to_numpy()
    compared = 0
    for row in doc["rules"]:
        if row["hypothesis"] == "mean":  # the average of the A>0 and A<0 rows, each compared on its own
            continue
        col = column[(row["name"], row["hypothesis"])]
        if row["level"] == "token":
            values = tokens[col].to_numpy(zero_copy_only=False)
            assert int((values == "reject").sum()) == row["tokens_rejected"], col
            assert int((values == "reweight").sum()) == row["tokens_reweighted"], col
        else:
            values = seqs[col].to_numpy(zero_copy_only=False)
            assert int(n_tok[values == "reject"].sum()) == row["tokens_rejected"], col
            assert int(n_tok[values == "reweight"].sum()) == row["tokens_reweighted"], col
            assert int((values == "reject").sum()) == row["sequences_rejected"], col
        compared += 1
    assert tokens.num_rows == doc["tokens"] and seqs.num_rows == doc["sequences"]
    return compared


@pytest.mark.parametrize("run", [SAMPLE_PAIRS, GOLDEN, RECORDED], ids=["simulated", "golden-probe", "recorded"])
def test_every_default_rule_counts_what_the_table_counts(run, tmp_path):
    doc = _audited(run, tmp_path / "audit")
    assert assert_counts_equal(doc, tmp_path / "audit") >= 15


@pytest.mark.parametrize("run", [SAMPLE_PAIRS, GOLDEN], ids=["simulated", "golden-probe"])
def test_every_reading_counts_what_the_table_counts(run, tmp_path):
    readings = sorted({f"{rule}@{name}" for name, reading in READINGS.items() for rule in reading.rules})
    doc = _audited(run, tmp_path / "audit", *[a for r in readings for a in ("--rule", r)])
    assert assert_counts_equal(doc, tmp_path / "audit") >= len(readings)


def test_the_golden_run_under_tight_rules_acts_on_every_rule_and_counts_alike(tmp_path):
    """The default thresholds reject nothing of the golden probe: tightened into its gap, every rule acts."""
    from tests.project.test_golden import TIGHT_RULES

    doc = _audited(GOLDEN, tmp_path / "audit", *[a for r in TIGHT_RULES for a in ("--rule", r)])
    assert all(r["tokens_rejected"] or r["tokens_reweighted"] for r in doc["rules"] if r["hypothesis"] != "A>0")
    assert_counts_equal(doc, tmp_path / "audit")


def test_the_readings_view_writes_its_readings(tmp_path):
    out = tmp_path / "audit"
    r = cli("compare-masks", str(SAMPLE_PAIRS), "--readings", "dppo-kl", "--format", "json", "--write", str(out))
    assert r.returncode == 0, r.stderr
    tokens = pq.read_table(out / TOKENS_FILE)
    for row in json.loads(r.stdout)["readings"]:
        col = row["name"] if row["hypothesis"] == "data" else f"{row['name']} [{row['hypothesis']}]"
        assert int((tokens[col].to_numpy(zero_copy_only=False) == "reject").sum()) == row["tokens_acted"], col


def test_the_audit_joins_the_run_on_its_keys(tmp_path):
    _audited(GOLDEN, tmp_path / "audit")
    audit = pq.read_table(tmp_path / "audit" / TOKENS_FILE, columns=["sequence_id", "position", "ratio"])
    run = pq.read_table(GOLDEN / "tokens", columns=["sequence_id", "position", "sampler_logprob", "trainer_logprob"])
    joined = run.join(audit, ["sequence_id", "position"], join_type="inner")
    assert joined.num_rows == run.num_rows == audit.num_rows
    r = np.exp(joined["trainer_logprob"].to_numpy() - joined["sampler_logprob"].to_numpy())
    np.testing.assert_allclose(joined["ratio"].to_numpy(), r, rtol=1e-12)


def test_dropped_tokens_are_not_in_the_audit(tmp_path, write):
    cols = pairs(ROWS)
    cols["sampler_logprob"][2] = float("nan")  # read, counted as dropped, in no number
    r = cli("compare-masks", str(write(cols)), "--write", str(tmp_path / "audit"))
    assert r.returncode == 0, r.stderr
    t = pq.read_table(tmp_path / "audit" / TOKENS_FILE)
    assert list(zip(t["sequence_id"].to_pylist(), t["position"].to_pylist(), strict=True)) == [
        (1, 0),
        (1, 1),
        (2, 0),
        (2, 1),
    ]


def test_a_runs_turns_are_carried(tmp_path, monkeypatch):
    """A multi-turn run's ``turn`` and ``turn_position`` come along; a single-turn run simply has none."""
    for name in ("turn", "turn_position"):
        if name not in schema.COLUMNS:
            monkeypatch.setitem(schema.COLUMNS, name, schema.Column(name, pa.int32(), "multi-turn key"))
    cols = pairs(ROWS) | {"turn": [0, 0, 1, 0, 0], "turn_position": [0, 1, 0, 0, 1]}
    path = tmp_path / "turns.parquet"
    pq.write_table(pa.table(cols).cast(pa.schema([*(schema.arrow_schema(list(cols)))])), path)
    out = tmp_path / "audit"
    assert cli("compare-masks", str(path), "--write", str(out)).returncode == 0
    t = pq.read_table(out / TOKENS_FILE)
    assert t.column_names[:4] == ["sequence_id", "position", "turn", "turn_position"]
    assert t["turn"].to_pylist() == [0, 0, 1, 0, 0] and t["turn_position"].to_pylist() == [0, 1, 0, 0, 1]


def test_a_write_folder_that_is_a_file_is_refused_before_any_work(tmp_path, data):
    spot = tmp_path / "taken"
    spot.write_text("x")
    line = error_line(cli("compare-masks", str(data), "--write", str(spot)))
    assert "--write" in line and "not a directory" in line


def test_an_audit_among_the_shards_it_reads_is_refused(tmp_path, write):
    shards = tmp_path / "shards"
    shards.mkdir()
    write(pairs(ROWS), "shards/a.parquet")
    line = error_line(cli("compare-masks", str(shards), "--write", str(shards / "audit")))
    assert "is inside the input folder" in line
    assert [p.name for p in shards.iterdir()] == ["a.parquet"]
    # beside a run directory's tokens/, it is read by nobody: allowed
    r = cli("compare-masks", str(GOLDEN), "--write", str(tmp_path / "out"))
    assert r.returncode == 0, r.stderr


def test_a_failed_pass_leaves_no_audit_behind(tmp_path, write):
    cols = pairs(ROWS)
    cols["trainer_logprob"][4] = 0.5  # a positive logprob: refused when its batch is read
    out = tmp_path / "new" / "audit"
    line = error_line(cli("compare-masks", str(write(cols)), "--write", str(out)), after_work=True)
    assert "positive logprob" in line
    assert not (tmp_path / "new").exists()


def test_an_audit_replaces_the_last_one_whole(tmp_path, write):
    out = tmp_path / "audit"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    assert cli("compare-masks", str(write(pairs(ROWS))), "--write", str(out)).returncode == 0
    assert cli("compare-masks", str(write(pairs(ROWS[:3]), "b.parquet")), "--write", str(out)).returncode == 0
    assert pq.read_table(out / TOKENS_FILE).num_rows == 3
    assert sorted(p.name for p in out.iterdir()) == ["notes.txt", SEQUENCES_FILE, TOKENS_FILE]


def test_writing_an_audit_imports_no_pandas(tmp_path, data):
    """pyarrow's ``pa.array`` imports pandas on its first call (seconds of a small command's start-up where its
    bytecode is not compiled): the audit builds its arrays from their buffers (``arrow.from_numpy``)."""
    import subprocess
    import sys

    code = (
        "import sys; from mismatchscope.cli.main import main\n"
        f"try: main(['compare-masks', {str(data)!r}, '--write', {str(tmp_path / 'a')!r}, '--format', 'json'])\n"
        "except SystemExit as e: assert not e.code, e.code\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'pandas'), file=sys.stderr)"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stderr.strip().splitlines()[-1] == "[]", r.stderr
