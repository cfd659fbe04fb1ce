"""``temperature``: stand-in values, a slope below zero, and the temperature the run declares."""

from __future__ import annotations

import numpy as np
import pytest

from mismatchscope.doctor import doctor
from tests.doctor import runs


def _by(doc) -> dict:
    return {f.cause: f for f in doc.findings}


def test_stand_in_values_invent_no_cause_and_no_temperature(tmp_path):
    # a sampler that wrote -1e300 for 30 tokens it could not score: not logprobs (float64's log floor is -708),
    # left out of every fit and said once; read from the rest, the run is clean
    cols = runs.clean_columns(runs.make(4, noise=1e-3))
    cols["sampler_logprob"] = cols["sampler_logprob"].copy()
    cols["sampler_logprob"][::80] = -1e300
    doc = doctor(runs.write(cols, tmp_path))
    found = [f.cause for f in doc.findings if f.status == "detected" and f.cause != "numerics"]
    assert found == [], [(f.cause, f.sentence) for f in doc.findings if f.status == "detected"]
    assert any("stand-in logprob below -700" in w for w in doc.warnings)
    t = _by(doc)["temperature"]
    assert all(v is None or abs(v) > 1e-6 for v in [t.estimate.get("temperature")])


def test_a_slope_below_zero_is_no_temperature(tmp_path):
    # the sampler's listed values run against the trainer's (a sign error): a slope of -1.2 would be T = -0.83
    cols = runs.clean_columns(runs.make(5, noise=1e-3))
    cols["sampler_topk_logprobs"] = np.minimum(-12.0 - 1.2 * cols["trainer_logprobs_at_sampler_topk"], -1e-3)
    t = _by(doctor(runs.write(cols, tmp_path)))["temperature"]
    assert t.status == "clear" and "1/T > 0" in t.sentence, t.sentence
    assert not t.estimate


def test_the_declared_sampling_temperature_is_read(tmp_path):
    rng = np.random.default_rng(6)
    hot = runs.tempered(runs.make(6, noise=1e-3), 0.7, rng)
    cols = runs.clean_columns(hot)
    # the run says it sampled at 0.7: the sampler returned processed logprobs, named with the declared value
    doc = doctor(runs.write(cols, tmp_path, "declared.parquet", meta={"sampling": {"temperature": 0.7}}))
    t = _by(doc)["temperature"]
    assert t.status == "detected" and t.estimate["declared"] == 0.7 and t.estimate["temperature"] == 0.7
    assert "processed logprobs" in t.sentence
    # the run says it sampled at 1.0, and the values say otherwise: the finding says the two disagree
    doc = doctor(runs.write(cols, tmp_path, "one.parquet", meta={"sampling": {"temperature": 1.0}}))
    t = _by(doc)["temperature"]
    assert t.status == "detected" and "declares sampling at temperature 1.0" in t.sentence
    assert t.estimate["temperature"] == pytest.approx(0.7, rel=0.05) and t.confidence == "medium"
