"""certify: byte equality of logprob pairs (and MoE routes), never a threshold.

Runs are built by hand so every expected number is known: float32 values
widened to float64 (what probe, import and the Recorder write), one bit
flipped, a 1e-9 gap, an expert id changed in one layer of one token.
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import numpy as np
import pyarrow.parquet as pq
import pytest

from mismatchscope.certify import bit_equal, certify_run
from mismatchscope.schema import write_table
from tests.certify.runs import LP, POS, SEQ, flip_low_bit, make_run, run_json
from tests.helpers import cli

# -- the float primitives ---------------------------------------------------------------


# -- verdicts -----------------------------------------------------------------------------


def test_bit_equal_pairs_certify(tmp_path):
    run = make_run(tmp_path / "run", prefill=LP)
    r, out = run_json(run)
    assert r.returncode == 0, r.stderr
    assert out["certified"] is True and out["reasons"] == []
    assert [p["name"] for p in out["pairings"]] == [
        "trainer_vs_sampler_decode",
        "trainer_vs_sampler_prefill",
        "prefill_vs_decode",
    ]
    assert all(p["equal"] and p["dtype"] == "float32" and p["k3_stable_mean"] == 0.0 for p in out["pairings"])
    assert out["coverage"] == {"tokens": 12, "sequences": 3, "longest_position": 3, "share_past_512": 0.0}
    assert out["policy_version"]["passed"] is None  # no steps, no checkpoint record: said, not assumed
    assert out["scope"]["model"] == "unknown"
    assert bit_equal(run)


def test_one_flipped_bit_fails_and_names_the_token(tmp_path):
    i = 6  # sequence 1, position 2 (value -7.5)
    run = make_run(tmp_path / "run", trainer=flip_low_bit(LP, i))
    r, out = run_json(run)
    assert r.returncode == 1, r.stderr
    p = out["pairings"][0]
    assert p["differing"] == 1 and p["share_differing"] == pytest.approx(1 / 12)
    assert p["ulp_histogram"] == [{"ulp": "1", "tokens": 1}] and p["ulp_max"] == 1
    first = p["first_differences"][0]
    assert (first["sequence_id"], first["position"], first["token_id"]) == (1, 2, 17)
    # -7.5 = -1.875 * 2^2: sign 1, exponent 129 (0x81), mantissa 0x700000 -> 0xc0f00000; one bit flipped -> ...01
    assert first["right_hex"] == "0xc0f00000" and first["left_hex"] == "0xc0f00001"
    assert first["right_decimal"] == "-7.5"
    assert p["earliest_by_sequence"] == [{"sequence_id": 1, "position": 2}]
    assert out["certified"] is False and "1 of 12 pairs differ" in out["reasons"][0]
    assert not bit_equal(run)


def test_terminal_output_names_the_first_token(tmp_path):
    run = make_run(tmp_path / "run", sampler=flip_low_bit(LP, 6))
    r = cli("certify", str(run))
    assert r.returncode == 1
    assert "0xc0f00001" in r.stdout and "NOT CERTIFIED" in r.stdout


def test_a_gap_of_1e9_everywhere_fails(tmp_path):
    run = make_run(tmp_path / "run", sampler=LP + 1e-9)
    r, out = run_json(run)
    assert r.returncode == 1
    p = out["pairings"][0]
    assert p["dtype"] == "float64" and p["differing"] == 12
    # d = trainer - sampler = -1e-9 (up to rounding of LP + 1e-9): K3 = d^2/2 ~ 5e-19, reported, not a criterion
    assert p["k3_stable_mean"] == pytest.approx(5e-19, rel=0.05)


def test_prefill_pairings_place_the_gap(tmp_path):
    # prefill equals the trainer, decode differs: the gap is in the sampler's decode path
    run = make_run(tmp_path / "run", sampler=flip_low_bit(LP, 0), prefill=LP)
    _, out = run_json(run)
    equal = {p["name"]: p["equal"] for p in out["pairings"]}
    assert equal == {"trainer_vs_sampler_decode": False, "trainer_vs_sampler_prefill": True, "prefill_vs_decode": False}
    r, out = run_json(run, "--pairing", "trainer_vs_sampler_prefill")
    assert r.returncode == 0 and [p["name"] for p in out["pairings"]] == ["trainer_vs_sampler_prefill"]


def test_policy_steps_must_agree(tmp_path):
    steps = [3] * 12
    other = [3] * 11 + [2]
    run = make_run(tmp_path / "run", sampler_step=other, trainer_step=steps)
    r, out = run_json(run)
    assert r.returncode == 1
    assert out["policy_version"]["passed"] is False
    assert "sequence 2 position 3" in out["policy_version"]["status"]
    # one token of the 12 differs: counted against the whole ("1 of 12", not "1 tokens")
    assert out["policy_version"]["status"].startswith("1 of 12 tokens were sampled and scored at different steps")


@pytest.mark.parametrize(
    "case, needle",
    [
        ("empty", "no token"),
        ("nan", "not finite"),
        ("missing", "missing required column(s) trainer_logprob"),
    ],
)
def test_bad_runs_are_one_line_and_exit_2(tmp_path, case, needle):
    run = tmp_path / "run"
    if case == "empty":
        write_table(
            run / "tokens" / "part-00000.parquet",
            {c: [] for c in ("sequence_id", "position", "token_id", "sampler_logprob", "trainer_logprob")},
        )
    elif case == "nan":
        make_run(run, sampler=np.where(np.arange(12) == 5, np.nan, LP))
    else:
        write_table(
            run / "tokens" / "part-00000.parquet",
            {"sequence_id": SEQ, "position": POS, "token_id": SEQ, "sampler_logprob": list(LP)},
        )
    r = cli("certify", str(run))
    assert r.returncode == 2, r.stdout + r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and needle in lines[0], r.stderr
    if case == "nan":
        assert "sequence 1 position 1" in lines[0]


def test_markdown_and_junit(tmp_path):
    run = make_run(tmp_path / "run", sampler=flip_low_bit(LP, 6))
    md, xml = tmp_path / "v.md", tmp_path / "v.xml"
    r = cli("certify", str(run), "--markdown", str(md), "--junit-xml", str(xml))
    assert r.returncode == 1
    assert "❌ mismatchscope certify: not certified" in md.read_text() and "`0xc0f00001`" in md.read_text()
    suite = ET.parse(xml).getroot().find("testsuite")
    cases = {c.get("name"): c for c in suite.findall("testcase")}
    assert cases["trainer_vs_sampler_decode"].find("failure") is not None
    assert cases["routes"].find("skipped") is not None
    assert suite.get("failures") == "1"


# -- MoE routes ------------------------------------------------------------------------------


def test_certified_or_false_marks_a_run_that_cannot_be_certified(tmp_path):
    """diagnose marks each configuration with this: a NaN run is "not certified", not an error that stops the table."""
    from mismatchscope.certify import certified_or_false

    assert certified_or_false(make_run(tmp_path / "good")) is True
    assert certified_or_false(make_run(tmp_path / "nan", sampler=np.where(np.arange(12) == 5, np.nan, LP))) is False
    assert certified_or_false(make_run(tmp_path / "flip", sampler=flip_low_bit(LP, 0))) is False


# -- probe --sampler-prefill --------------------------------------------------------------------


def test_sampler_prefill_is_refused_where_prefill_logprobs_cannot_match(tmp_path):
    r = cli("probe", "--sampler", "hf", "--sampler-prefill", "-T", "0.7", "--out", str(tmp_path / "run"))
    assert r.returncode == 2 and "--sampler-prefill records raw prefill logprobs" in r.stderr
    assert not (tmp_path / "run").exists()


@pytest.mark.slow
def test_probe_records_the_samplers_prefill_and_certify_pairs_it(tmp_path):
    from tests.helpers import REPO

    prompts = tmp_path / "p.jsonl"
    prompts.write_text("".join((REPO / "sample_data" / "prompts.jsonl").read_text().splitlines(True)[:3]))
    run = tmp_path / "run"
    r = cli(
        "probe",
        "--sampler",
        "hf",
        "--sampler-dtype",
        "float32",
        "--sampler-prefill",
        "--prompts",
        str(prompts),
        "-n",
        "1",
        "--max-tokens",
        "6",
        "--out",
        str(run),
        "--format",
        "json",
    )
    assert r.returncode == 0, r.stderr
    table = pq.read_table(run / "tokens")
    assert "sampler_prefill_logprob" in table.column_names
    prefill = table.column("sampler_prefill_logprob").to_numpy()
    assert np.isfinite(prefill).all() and np.array_equal(prefill.astype(np.float32), prefill)  # float32, widened
    # same model, dtype and formula: the prefill is the decode's distribution, so close, whatever the bits say
    assert np.abs(prefill - table.column("sampler_logprob").to_numpy()).max() < 1e-4
    _, out = run_json(run)
    assert [p["name"] for p in out["pairings"]] == [
        "trainer_vs_sampler_decode",
        "trainer_vs_sampler_prefill",
        "prefill_vs_decode",
    ]
    assert out["scope"]["sampler"] == "transformers-generate" and out["scope"]["sampler_dtype"] == "float32"


def test_samples_keep_the_prefill_logprobs_for_resume_and_rescore(tmp_path):
    """A resumed or rescored probe reads its completions back from samples/: the prefill must come back with them."""
    from mismatchscope.probe.columns import token_columns
    from mismatchscope.probe.types import Completion, Scored
    from mismatchscope.probe.writer import RunDir

    run = RunDir(tmp_path / "run")
    with_prefill = Completion(0, 0, [5, 6], [-0.5, -0.25], [[5], [6]], [[-0.5], [-0.25]], "length", [-0.5, -0.125])
    run.write_samples(0, [with_prefill])
    back = run.read_samples(0)
    assert back[0].sampler_prefill_logprobs == [-0.5, -0.125]
    run.write_samples(1, [Completion(0, 1, [5], [-0.5], [[5]], [[-0.5]], "length")])
    assert run.read_samples(1)[0].sampler_prefill_logprobs is None  # runs without the option keep their old layout
    scored = Scored([-0.5, -0.25], [[-0.5], [-0.25]], [[5], [6]], [[-0.5], [-0.25]], [0.1, 0.2])
    cols = token_columns(back, [scored], {}, n=1)
    assert cols["sampler_prefill_logprob"] == [-0.5, -0.125]
    assert "sampler_prefill_logprob" not in token_columns(
        run.read_samples(1), [Scored([-0.5], [[-0.5]], [[5]], [[-0.5]], [0.1])], {}, n=1
    )


def test_an_unknown_pairing_is_a_usage_error(tmp_path):
    r = cli("certify", str(make_run(tmp_path / "run")), "--pairing", "decode")
    assert r.returncode == 2 and "unknown pairing 'decode'" in r.stderr
    r = cli("certify", str(make_run(tmp_path / "run2")), "--pairing", "prefill_vs_decode")
    assert r.returncode == 2 and "none of the pairings asked for is in this run" in r.stderr


def test_recorder_sampler_steps_feed_the_policy_version_check(tmp_path):
    from mismatchscope import Recorder

    lq = np.array([[-0.5, -1.25], [-2.0, -0.25]])
    with Recorder(tmp_path / "run", rank=0, world_size=1) as rec:
        rec.add(7, lq, lq, sampler_steps=[7, 7])
    v = certify_run(tmp_path / "run")
    assert v.certified and v.policy.passed is True
    with Recorder(tmp_path / "lag", rank=0, world_size=1) as rec:
        rec.add(7, lq, lq, sampler_steps=[7, 6])  # the second rollout came from the previous policy
    v = certify_run(tmp_path / "lag")
    assert not v.certified and "sequence" in v.policy.status and "sampler step 6, trainer step 7" in v.policy.status


@pytest.mark.parametrize(
    "manifest",
    [
        {"source": {"format": "prime-rl", "semantics": {"policy_lag": True, "policy_lag_note": "async trainer"}}},
        {"config": {"imported": {"format": "prime-rl", "semantics": {"policy_lag": True}}}},
        {"config": {"semantics": {"policy_lag": True, "policy_lag_note": "a later checkpoint"}}},
    ],
    ids=["import", "rescored-import", "probe"],
)
def test_a_run_recording_policy_lag_is_not_certified(tmp_path, manifest):
    # byte-equal pairs (sampler = trainer = LP): the bytes pass, the policy check fails with the run's own reason
    run = make_run(tmp_path / "run", manifest=manifest)
    r = cli("certify", str(run), "--format", "json")
    assert r.returncode == 1, r.stderr
    doc = json.loads(r.stdout)
    assert doc["certified"] is False and doc["pairings"][0]["equal"] is True
    assert doc["policy_version"]["passed"] is False
    assert doc["reasons"][-1].startswith("policy version: the run records policy lag: ")


def test_a_synchronous_import_still_certifies(tmp_path):
    # slime's semantics describe policy lag in words (a string, not true): nothing to refuse
    run = make_run(tmp_path / "run", manifest={"source": {"format": "slime", "semantics": {"policy_lag": "none"}}})
    assert cli("certify", str(run)).returncode == 0


@pytest.mark.parametrize("damage", ["truncated", "not an object", "not UTF-8"])
def test_a_run_whose_manifest_cannot_be_read_is_refused(tmp_path, damage):
    """A certificate states the stack it holds for, read from the manifest: a run whose manifest is cut short once
    certified with a warning, its scope all "unknown". Refused, naming the file."""
    run = make_run(tmp_path / "run")
    manifest = run / "manifest.json"
    text = manifest.read_bytes()
    manifest.write_bytes({"truncated": text[: len(text) // 2], "not an object": b"[1]", "not UTF-8": b"\xff{}"}[damage])
    r = cli("certify", str(run))
    assert r.returncode == 2, r.stdout + r.stderr
    assert r.stderr.strip().splitlines() == [
        f"error: {manifest}: the run's manifest cannot be read (truncated or damaged): a certificate holds for the "
        "stack the manifest records (restore the run from a copy)"
    ]


def test_the_help_lists_every_pairing_certify_accepts():
    """--help once listed 3 pairings while 5 were accepted."""
    from mismatchscope.certify import PAIRING_NAMES

    text = " ".join(cli("certify", "--help", env={"COLUMNS": "200"}).stdout.split())
    assert all(name in text for name in PAIRING_NAMES), text


def _recorded(path, forward_on_even_steps: bool = False, stale_on_odd_steps: bool = False):
    """A Recorder run of 4 steps, one shard each, sampler = trainer on every token. ``forward_on_even_steps``: the
    loss's forward recorded on steps 0 and 2 only, 0.5 nats off; ``stale_on_odd_steps``: sampler_steps given on
    every step, one behind the trainer's on steps 1 and 3; else given on the even steps only."""
    from mismatchscope import Recorder

    lq = np.array([[-0.5, -1.25], [-2.0, -0.25]])
    with Recorder(path, rank=0, world_size=1) as rec:
        for s in range(4):
            kw: dict = {}
            if forward_on_even_steps and s % 2 == 0:
                kw["training_forward_logprobs"] = lq - 0.5
            if stale_on_odd_steps:
                kw["sampler_steps"] = [s, s - 1 if s % 2 else s]
            elif s % 2 == 0:
                kw["sampler_steps"] = [s, s]
            rec.add(s, lq, lq, **kw)
    return path


def test_a_column_some_shards_hold_is_checked_on_every_row_that_has_it(tmp_path):
    """The loss's forward on even steps only, 0.5 nats off: the run once CERTIFIED with that pairing "not in this
    run" (the column was read only when every shard held it). Its 8 rows are compared, the 8 without it said."""
    run = _recorded(tmp_path / "run", forward_on_even_steps=True)
    r, doc = run_json(run)
    assert r.returncode == 1, r.stderr
    forward = {p["name"]: p for p in doc["pairings"]}["trainer_vs_training_forward"]
    assert (forward["tokens"], forward["differing"], forward["tokens_without"]) == (8, 8, 8)
    assert "trainer_vs_training_forward" not in doc["absent_pairings"]
    assert doc["reasons"][0] == "trainer vs training forward: 8 of 8 pairs differ in their float32 bytes"
    detail = {c["name"]: c["detail"] for c in doc["checks"]}["trainer_vs_training_forward"]
    assert detail.endswith("; 8 tokens without trainer_forward_logprob (in 2 of 4 shards) not checked"), detail
    out = cli("certify", str(run), env={"COLUMNS": "300"}).stdout
    assert "8 tokens without trainer_forward_logprob (in 2 of 4 shards) not checked" in out


def test_policy_steps_some_shards_hold_are_checked_where_recorded(tmp_path):
    """sampler_step on every step, stale on the odd ones: once "not checked" when shards differed in their columns;
    and steps on half the shards check those rows and say the rest."""
    v = certify_run(_recorded(tmp_path / "stale", stale_on_odd_steps=True))
    assert v.policy.passed is False and v.policy.status.startswith("4 of 16 tokens were sampled and scored at")
    v = certify_run(_recorded(tmp_path / "half"))
    assert v.policy.passed is True and v.certified
    assert v.policy.status == (
        "every token's sampler_step equals its trainer_step where the run records them (8 tokens without "
        "sampler_step and trainer_step (in 2 of 4 shards) not checked)"
    )
