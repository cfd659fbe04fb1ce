"""The third value: the Recorder keeps the loss's own forward beside the rollout and the recompute; certify pairs all three."""

from __future__ import annotations

import numpy as np

from mismatchscope.certify import certify_run
from mismatchscope.live import Recorder


def _record(path, forward):
    lq = np.array([[-0.5, -1.25, -2.0], [-0.75, -0.125, -3.0]], dtype=np.float32).astype(np.float64)
    with Recorder(path) as rec:
        rec.add(0, lq, lq.copy(), training_forward_logprobs=forward(lq))
    return certify_run(path)


def test_three_equal_values_certify_all_three_pairings(tmp_path):
    v = _record(tmp_path / "run", lambda lq: lq.copy())
    names = {p.pairing.name: p.equal for p in v.pairings}
    assert names == {
        "trainer_vs_sampler_decode": True,
        "trainer_vs_training_forward": True,
        "sampler_vs_training_forward": True,
    }
    assert v.certified


def test_a_one_ulp_training_forward_fails_both_of_its_pairings_at_that_token(tmp_path):
    def nudged(lq):
        out = lq.copy()
        # one float32 ULP away at sequence 1, position 2 (-3.0 -> the next float32 towards 0)
        out[1, 2] = float(np.nextafter(np.float32(-3.0), np.float32(0)))
        return out

    v = _record(tmp_path / "run", nudged)
    by = {p.pairing.name: p for p in v.pairings}
    assert by["trainer_vs_sampler_decode"].equal
    for name in ("trainer_vs_training_forward", "sampler_vs_training_forward"):
        p = by[name]
        assert not p.equal and p.differing == 1 and p.dtype == "float32"
    assert not v.certified and any("training forward" in r for r in v.reasons)
