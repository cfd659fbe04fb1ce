"""Change detection: a shift and a spike are flagged, a flat noisy run flags nothing, by the numbers written."""

from __future__ import annotations

import numpy as np

from mismatchscope.timeline import timeline
from mismatchscope.timeline.changes import ChangeConfig, detect
from mismatchscope.timeline.json_document import Shift, Spike
from tests.timeline.runs import H, needs_ruptures, synthetic


@needs_ruptures
def test_shift_and_spike_are_flagged(write):
    r = timeline(write(synthetic(0, shift_at=40, spike_at=15)))
    for m in H:
        assert {f.step for f in r.flags if isinstance(f, Spike) and f.metric == m and f.kind == "spike"} == {15}, m
        assert {f.step for f in r.flags if isinstance(f, Shift) and f.metric == m} == {40}, m
    assert {getattr(f, "step", None) for f in r.flags} <= {15, 40}
    shift = next(f for f in r.flags if isinstance(f, Shift) and f.metric == "tv_token_mean")
    assert shift.after > 1.4 * shift.before and shift.size_sd > 5  # noise x1.6 from step 40
    spike = next(f for f in r.flags if isinstance(f, Spike) and f.metric == "k3_mean" and f.kind == "spike")
    assert spike.value > 5 * spike.baseline and spike.score > 3.5


@needs_ruptures
def test_flat_noisy_run_flags_nothing(write):
    r = timeline(write(synthetic(0)))
    assert r.flags == []
    # ipo (delta 0.3) rejects at most a few tokens a step here: too few to test, and said so
    assert any("ipo_reject_rate" in sk.metrics for sk in r.skipped)


@needs_ruptures
def test_detect_on_plain_series():
    rng = np.random.default_rng(3)
    steps = np.arange(100, 700, 10)  # logged every 10 steps
    x = np.exp(rng.normal(0, 0.05, 60)) * 1e-3
    x[0] *= 3  # a spike on the first step, right after a resume
    x[30:] *= 1.5  # a sustained shift
    ch = detect(steps, x, ChangeConfig(), "log")
    assert [s["step"] for s in ch.spikes] == [100]
    assert [s["step"] for s in ch.shifts] == [400]
    ramp = 1e-3 * (1 + np.clip(np.arange(60) - 20, 0, None) * 0.05) * np.exp(rng.normal(0, 0.02, 60))
    ch = detect(np.arange(60), ramp, ChangeConfig(), "log")
    assert ch.drifts and ch.drifts[0]["after"] > 2 * ch.drifts[0]["before"]  # a creep, in stages
    assert all(s["size_sd"] > 0 for s in ch.shifts)
    zeros = np.zeros(60)
    zeros[[5, 33]] = 0.002
    ch = detect(np.arange(60), zeros, ChangeConfig(), "asin-sqrt", count_N=zeros * 1000)
    assert ch.spikes == [] and ch.skipped and "fewer than 5" in ch.skipped[0][1]


@needs_ruptures
def test_a_change_must_stand_out_from_the_steps_own_noise_and_a_dip_is_a_dip():
    # a series steady to 1e-9 with a dip of 1e-6 at step 20: on the log scale a huge outlier, yet each step's value
    # has a standard error of 1e-4 from its own tokens, so the dip is nothing
    rng = np.random.default_rng(5)
    x = 1e-3 + rng.normal(0, 1e-9, 60)
    x[20] -= 1e-6
    ch = detect(np.arange(60), x, ChangeConfig(), "log")
    assert [s["step"] for s in ch.spikes] == [20]  # without the errors: flagged, as before
    ch = detect(np.arange(60), x, ChangeConfig(), "log", error_N=np.full(60, 1e-4))
    assert ch.spikes == [] and ch.shifts == []
    # a drop of 5e-4 (5 standard errors) stands out, and is called what it is
    x[20] = 5e-4
    ch = detect(np.arange(60), x, ChangeConfig(), "log", error_N=np.full(60, 1e-4))
    assert [(s["kind"], s["step"]) for s in ch.spikes] == [("dip", 20)]
