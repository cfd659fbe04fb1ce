"""``sharpening``: a gap that grows while the entropy falls, flat within each entropy bucket, is no regression."""

from __future__ import annotations

import numpy as np

from mismatchscope.doctor import doctor
from tests.doctor import runs


def _steps(tmp_path, flat: bool) -> object:
    # ten steps; the policy's logits grow over them (the entropy falls). The sampler's error on a token depends
    # on its position's entropy alone (flat within a bucket: larger where the model is confident), or, for the
    # regression, grows with the step too
    rng = np.random.default_rng(9)
    base = runs.make(9, sequences=100, noise=0.0, peaked=0.1)
    step = (base.seq - 100) // 10
    sharp = base.zt * (1 + 0.3 * step)[:, None]
    run = runs.sample(runs.replace(base, zt=sharp, zs=sharp), rng)
    lt = runs.log_softmax(sharp)
    h = -(np.exp(lt) * lt).sum(1)
    sigma = 0.005 * (1 + 3 * np.exp(-h)) * (1 if flat else (1 + 0.5 * step))
    cols = runs.clean_columns(run)
    cols["sampler_logprob"] = np.minimum(cols["sampler_logprob"] + rng.normal(0, 1, h.size) * sigma, 0.0)
    cols.pop("sampler_topk_ids"), cols.pop("sampler_topk_logprobs"), cols.pop("trainer_logprobs_at_sampler_topk")
    cols.update(step=step.astype(np.int64), trainer_entropy=h)
    return doctor(runs.write(cols, tmp_path, f"flat{flat}.parquet"))


def test_a_sharpening_policy_is_expected_and_a_regression_is_not_sharpening(tmp_path):
    doc = _steps(tmp_path, flat=True)
    f = next(x for x in doc.findings if x.cause == "sharpening")
    assert f.status == "detected" and not f.pipeline and doc.verdict == "expected", f.sentence
    assert f.explained_share is not None and f.explained_share.of == "the gap's growth over the steps"
    doc = _steps(tmp_path, flat=False)
    f = next(x for x in doc.findings if x.cause == "sharpening")
    assert f.status == "clear" and "within the entropy buckets too" in f.sentence, f.sentence
