"""Regression lock on a small real probe output (``tests/data/golden-probe``).

The run: the bundled ``tiny-qwen3``, the 4 prompts of
``tests/data/golden-prompts.jsonl``, n = 2, up to 64 tokens, vLLM float16
(processed logprobs, T = 1, seed 0, top-k 5) against transformers float32.

What this module pins, so that a change to any of it is a decision, not a fix:

* the file format a probe writes: the token columns and the metadata keys a
  reader relies on (schema_version 1);
* the analysis of those bytes: token and sequence counts, headline metrics,
  ratio quantiles, top-k bound, every default rule's reject and reweight
  counts (all zero but opsm's at this tiny float16 gap);
* every headline rule at work: the same run under thresholds tightened to
  its gap (``TIGHT_RULES``), where each rule rejects or reweights some of it
  and keeps the rest, pinned byte for byte in ``tests/data/golden-tight-rules.json``;
* the trainer's semantics: rescoring the recorded samples with today's
  trainer (float32) reproduces the recorded trainer logprobs (same scaling
  of the bound as tests/probe/test_trainer.py: fp32 logits on another
  CPU's kernels).

The sampler side is data here (a vLLM run is not bit-reproducible across
machines); ``tests/probe`` checks the live sampler.
"""

from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest

from mismatchscope.rules import default_rules
from tests.helpers import REPO, cli

GOLDEN = REPO / "tests" / "data" / "golden-probe"
TIGHT_EXPECTED = REPO / "tests" / "data" / "golden-tight-rules.json"

TIGHT_RULES = (
    "icepop:alpha=0.995,beta=1.005",
    "ipo:delta=0.002",
    "kpop:phi=1e-5",
    "dppo-tv:delta_low=0.001,delta_high=0.001",
    "dppo-kl:delta=2e-6",
    "tis:C=1.005",
    "token-mask:lo=0.997,hi=1.004",
    "cispo:eps_low=0.003,eps_high=0.004",
    "ppo-clip:eps_low=0.002,eps_high=0.003",
    "seq-tis:C=1.02",
    "seq-mis:lo=0.995,hi=1.016",
    "geo-mask:lo=0.9999,hi=1.0004",
    "k3-seq:delta=1e-6",
    "veto:lo=0.995",
    "opsm:delta=4e-5",
)
"""Every headline rule, its thresholds set inside the golden run's gap (ratios 0.9905-1.0094, |p - q| up to
0.0027) so that each one acts on part of the run and keeps the rest. No token or sequence lies within a relative
1e-6 of any threshold here (each moved by that much, up and down, gives the same counts), so the lock does not
hang on the last bit of an exp or a sum."""


def _json(*args: str) -> dict:
    r = cli(*args, "--format", "json")
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def test_the_format_a_probe_writes():
    (shard,) = (GOLDEN / "tokens").glob("*.parquet")
    schema = pq.read_schema(shard)
    assert schema.names == [
        "sequence_id",
        "position",
        "token_id",
        "sampler_logprob",
        "trainer_logprob",
        "prompt_id",
        "sample_index",
        "advantage",
        "reward",
        "sampler_topk_ids",
        "sampler_topk_logprobs",
        "trainer_logprobs_at_sampler_topk",
        "trainer_topk_ids",
        "trainer_topk_logprobs",
        "trainer_entropy",
    ]
    meta = json.loads(schema.metadata[b"mismatchscope"])
    assert meta["schema_version"] == 1
    assert {"checkpoint", "prompts", "sampler", "sampling", "semantics", "trainer", "trainer_checkpoint"} <= set(meta)
    assert meta["sampling"] == {
        "logprobs_mode": "processed_logprobs",
        "max_tokens": 64,
        "n": 2,
        "seed": 0,
        "temperature": 1.0,
        "top_k": -1,
        "top_k_logprobs": 5,
        "top_p": 1.0,
    }
    assert json.loads((GOLDEN / "manifest.json").read_text())["status"] == "complete"


def test_the_analysis_of_the_golden_run():
    rep = _json("report", str(GOLDEN))
    assert (rep["tokens"], rep["sequences"]) == (434, 8)
    m = rep["metrics"]
    pinned = {
        "tv_token_mean": 0.00018836821755247572,
        "k3_mean": 8.314611781811264e-07,
        "abs_logprob_diff_max": 0.009589314460754395,
        "ratio_min": 0.9904565164026478,
        "ratio_max": 1.0094239925269854,
        "tv_topk_lower_mean": 0.0002528528965968131,
    }
    for key, value in pinned.items():
        assert m[key] == pytest.approx(value, rel=1e-9), key
    assert m["ratio_quantiles"] == pytest.approx(
        {
            "0.001": 0.9925804298687485,
            "0.01": 0.9969604319400542,
            "0.05": 0.9983469613155256,
            "0.5": 1.0,
            "0.95": 1.0022914875708413,
            "0.99": 1.0046949270676522,
            "0.999": 1.0085603362595272,
        },
        rel=1e-12,
    )


def test_every_default_rule_on_the_golden_run():
    rows = {r["name"]: r for r in _json("compare-masks", str(GOLDEN))["rules"]}
    assert set(rows) == {
        "icepop",
        "ipo",
        "kpop",
        "dppo-tv",
        "dppo-kl",
        "tis",
        "token-mask",
        "cispo",
        "ppo-clip",
        "seq-tis",
        "seq-mis",
        "geo-mask",
        "k3-seq",
        "veto",
        "opsm",
    }
    counts = {name: (r["tokens_rejected"], r["tokens_reweighted"]) for name, r in rows.items()}
    # opsm (delta 1e-4, A < 0) rejects the one negative-advantage sequence whose mean lq - lp exceeds 1e-4: 57 tokens
    assert counts == {**dict.fromkeys(rows, (0, 0)), "opsm": (57, 0)}
    assert rows["opsm"]["sequences_rejected"] == 1


def test_every_headline_rule_at_work_on_the_golden_run():
    args = [arg for rule in TIGHT_RULES for arg in ("--rule", rule)]
    # a path relative to the repository: the run's warning names it, and the pinned bytes hold no machine's path
    r = cli("compare-masks", "tests/data/golden-probe", *args, "--format", "json", cwd=REPO)
    assert r.returncode == 0, r.stderr
    rows = {row["name"]: row for row in json.loads(r.stdout)["rules"]}
    assert set(rows) == {rule.spec.name for rule in default_rules()}, "TIGHT_RULES must name every headline rule"
    for name, row in rows.items():
        acted, total = (
            (row["tokens_rejected"] + row["tokens_reweighted"], 434)
            if row["level"] == "token"
            else (row["sequences_rejected"] + row["sequences_reweighted"], 8)
        )
        assert 0 < acted < total, f"{name} acts on {acted} of {total}: the lock would not see it stop acting"
    # By hand from the recorded pairs (r = exp(lp - lq)):
    # * icepop [0.995, 1.005]: the run's three ratios outside it are 0.99046 (below) and 1.00743, 1.00942 (above);
    #   the nearest inside are 0.99536 and 1.00499: 3 tokens.
    # * opsm delta 4e-5: of the four A < 0 sequences (0, 2, 4, 7), mean lq - lp is -3.2e-5, 1.47e-4, -4.13e-4,
    #   4.69e-5: sequences 2 (57 tokens) and 7 (55 tokens) exceed 4e-5, 112 tokens in 2 sequences.
    assert (rows["icepop"]["tokens_rejected"], rows["icepop"]["rejected_by_pq_sign"]["p>q"]) == (3, 2)
    assert (rows["opsm"]["tokens_rejected"], rows["opsm"]["sequences_rejected"]) == (112, 2)
    assert r.stdout == TIGHT_EXPECTED.read_text(), "compare-masks output changed: a decision, not a fix"


@pytest.mark.slow
def test_todays_trainer_reproduces_the_recorded_trainer_logprobs(tmp_path):
    pytest.importorskip("torch", reason="rescoring needs the trainer (the hf extra)")
    r = cli("rescore", str(GOLDEN), "--out", str(tmp_path / "again"))
    assert r.returncode == 0, r.stderr
    cols = ["sequence_id", "position", "trainer_logprob"]
    old = pq.read_table(GOLDEN / "tokens", columns=cols).sort_by(
        [("sequence_id", "ascending"), ("position", "ascending")]
    )
    new = pq.read_table(tmp_path / "again" / "tokens", columns=cols).sort_by(
        [("sequence_id", "ascending"), ("position", "ascending")]
    )
    assert old.column("sequence_id").equals(new.column("sequence_id")) and old.column("position").equals(
        new.column("position")
    )
    worst = max(
        abs(a - b) / max(1.0, abs(a) / 8)
        for a, b in zip(
            old.column("trainer_logprob").to_pylist(), new.column("trainer_logprob").to_pylist(), strict=True
        )
    )
    assert worst < 1e-5, worst
