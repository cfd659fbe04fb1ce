"""What a gate compares: a baseline that is the candidate, or shares its files, is refused."""

from __future__ import annotations

import os

import pytest

from mismatchscope.errors import IncomparableRunsError, UsageError
from mismatchscope.gate.compare import compare_runs
from mismatchscope.gate.config import default_config
from mismatchscope.gate.run import run_gate
from tests.gate.files import two_sequence_file
from tests.helpers import PROBE_META, cli, pairs, probe_meta
from tests.inputs import ROWS, error_line, gate_cli, gate_config


def test_gate_baseline_that_is_the_candidate(runs, tmp_path):
    base, cand = runs
    for other in (str(cand), str(tmp_path / "." / cand.name)):
        r = gate_cli(str(cand), "--baseline", other)
        assert error_line(r) == (
            f"error: the baseline {other} is the candidate itself (pass as --baseline the run sampled "
            "by the current serving stack)"
        )


def test_gate_baseline_sharing_shards_with_the_candidate(tmp_path, write):
    shard = write(pairs(ROWS), "run/tokens/part-0.parquet")
    write(pairs([(9, 0, 0.5, 0.5)]), "run/tokens/part-1.parquet")
    r = gate_cli(str(tmp_path / "run"), "--baseline", str(shard))
    assert error_line(r) == (
        f"error: the baseline {shard} shares 1 file(s) with the candidate, e.g. {shard} "
        "(pass as --baseline the run sampled by the current serving stack)"
    )


def test_a_baseline_that_is_the_candidate_under_another_name(tmp_path, write):
    cand = write(pairs(ROWS), "cand.parquet")
    link = tmp_path / "base.parquet"
    os.link(cand, link)
    r = cli("gate", str(cand), "--baseline", str(link), "--bootstrap", "0")
    assert error_line(r) == (
        f"error: the baseline {link} is the candidate itself (pass as --baseline the run sampled by "
        "the current serving stack)"
    )


def test_a_byte_identical_baseline_is_warned_about(tmp_path, write):
    cand = write(pairs(ROWS), "cand.parquet")
    copy = tmp_path / "copy.parquet"
    copy.write_bytes(cand.read_bytes())
    cfg = gate_config(tmp_path, "[regression]\nk3_mean = { max_increase = 0.25, floor = 1e-6 }\n")
    r = cli("gate", str(cand), "--baseline", str(copy), "--config", cfg, "--bootstrap", "0", "--format", "json")
    assert r.returncode == 0, r.stderr  # identical data passes every limit: right for a deterministic, unchanged stack
    assert (
        f"warning: the baseline {copy} holds the same data as the candidate (same sizes, identical Parquet footers) "
        "and no run records to tell two runs apart: every regression limit passes by construction; is it a copy?"
    ) in " ".join(r.stderr.split())
    other = write(pairs(ROWS[:4]), "other.parquet")
    r = cli("gate", str(cand), "--baseline", str(other), "--config", cfg, "--bootstrap", "0", "--format", "json")
    assert r.returncode in (0, 1) and "same data" not in r.stderr, r.stderr


def test_comparability():
    ok = compare_runs(probe_meta(), probe_meta(sampler={"dtype": "float16"}))
    assert ok.checked and [d.change() for d in ok.serving] == ["sampler.dtype: 'float32' -> 'float16'"]
    with pytest.raises(IncomparableRunsError) as e:
        compare_runs(
            probe_meta(), probe_meta(checkpoint={"sha256": "c" * 64}, sampling={"seed": 1, "temperature": 0.7})
        )
    text = str(e.value)
    for bit in (
        "checkpoint.sha256 differs",
        "sampling.seed differs (baseline 0, candidate 1)",
        "sampling.temperature differs",
        "--allow-different checkpoint",
        "--allow-different seed",
        "--allow-different sampling.temperature",
    ):
        assert bit in text
    allowed = compare_runs(probe_meta(), probe_meta(sampling={"seed": 1}), ["seed"])
    assert [d.key for d in allowed.differences] == ["sampling.seed"]
    assert compare_runs(probe_meta(), probe_meta(trainer={"dtype": "bfloat16"}), ["trainer"]).checked
    with pytest.raises(IncomparableRunsError, match="trainer.dtype differs"):
        compare_runs(probe_meta(), probe_meta(trainer={"dtype": "bfloat16"}))
    foreign = compare_runs(probe_meta(), None)
    assert not foreign.checked and "comparability could not be checked" in foreign.warning


def test_a_trainer_checkpoint_other_than_the_samplers_must_be_allowed():
    """The trainer's weights are compared as a relation: "the sampler's", or another digest (policy lag)."""
    sampler = PROBE_META["checkpoint"]["sha256"]
    same = {"path": "copy", "sha256": sampler, "same_as_sampler": True}
    later = {"path": "later", "sha256": "d" * 64, "same_as_sampler": False}
    # runs from before the key, and runs whose trainer checkpoint has the sampler's weights, compare equal
    assert compare_runs(probe_meta(), probe_meta(trainer_checkpoint=same)).differences == []
    with pytest.raises(IncomparableRunsError) as e:
        compare_runs(probe_meta(), probe_meta(trainer_checkpoint=later))
    assert str(e.value) == (
        "baseline and candidate are not comparable: trainer.checkpoint differs (baseline the sampler's, "
        "candidate dddddddddddd...) (only the serving stack should differ; if the difference is "
        "intended, pass --allow-different trainer.checkpoint)"
    )
    for allow in (["trainer.checkpoint"], ["trainer"]):
        ok = compare_runs(probe_meta(trainer_checkpoint=same), probe_meta(trainer_checkpoint=later), allow)
        assert [d.change() for d in ok.differences] == ["trainer.checkpoint: the sampler's -> dddddddddddd..."]
    # both lagging on the same later weights: nothing differs
    assert compare_runs(probe_meta(trainer_checkpoint=later), probe_meta(trainer_checkpoint=later)).differences == []
    # another main checkpoint without lag differs in checkpoint alone
    other = probe_meta(
        checkpoint={"sha256": "e" * 64}, trainer_checkpoint={"sha256": "e" * 64, "same_as_sampler": True}
    )
    assert [d.key for d in compare_runs(probe_meta(), other, ["checkpoint"]).differences] == ["checkpoint.sha256"]


def test_regression_without_baseline_is_a_usage_error(write):
    with pytest.raises(UsageError, match="need a baseline"):
        run_gate(str(two_sequence_file(write)), None, default_config())
