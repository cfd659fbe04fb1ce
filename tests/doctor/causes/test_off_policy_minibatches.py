"""``off_policy_minibatches``: a gap that grows with the minibatch index; expected when the run declares it."""

from __future__ import annotations

import numpy as np

from mismatchscope.doctor import doctor
from tests.doctor import runs


def _run(tmp_path, meta: dict | None, name: str) -> object:
    # four minibatches per rollout step: minibatch i is scored after i updates, its trainer logits moved by 0.2 i
    rng = np.random.default_rng(8)
    base = runs.make(8, sequences=80, noise=1e-3)
    seq_index = base.seq - 100
    mb = seq_index % 4
    moved = runs.replace(base, zt=base.zt + rng.normal(0, 1, base.zt.shape) * (0.2 * mb)[:, None])
    cols = runs.clean_columns(runs.sample(moved, rng, base.cols["_token"]))
    cols.update(step=(seq_index // 20).astype(np.int64), minibatch=mb.astype(np.int32))
    return doctor(runs.write(cols, tmp_path, name, meta=meta))


def test_a_gap_that_grows_with_the_minibatch_index_is_off_policy_and_expected(tmp_path):
    doc = _run(tmp_path, None, "mb.parquet")
    f = next(x for x in doc.findings if x.cause == "off_policy_minibatches")
    assert doc.top.cause == "off_policy_minibatches" and f.status == "detected" and not f.pipeline
    assert doc.verdict == "expected" and f.estimate["minibatches"] == 4
    # its correction keeps each rollout's first minibatch, scored before any update: most of the gap goes
    assert f.explained_share is not None and (f.explained_share.abs_logprob_diff or 0) > 0.5


def test_a_run_that_declares_one_optimizer_step_per_rollout_makes_it_a_pipeline_problem(tmp_path):
    doc = _run(tmp_path, {"semantics": {"minibatches_per_rollout": 1}}, "one.parquet")
    f = next(x for x in doc.findings if x.cause == "off_policy_minibatches")
    assert f.status == "detected" and f.pipeline and doc.verdict == "pipeline"
