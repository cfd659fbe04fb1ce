"""What a gate compares: a baseline that is the candidate, or shares its files, is refused."""

from __future__ import annotations

import os

from tests.helpers import (
    ROWS,
    cli,
    error_line,
    gate_cli,
    gate_config,
    pairs,
)


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
