"""The verdict and its headline: what the findings add up to, and what would settle an open question."""

from __future__ import annotations

import numpy as np

from mismatchscope.doctor import doctor
from mismatchscope.doctor.verdict import advice
from tests.doctor import runs
from tests.helpers import cli

FP32 = {"sampler": {"dtype": "float32"}, "trainer": {"dtype": "float32"}}


def test_a_verdict_with_no_check_run_is_inconclusive_never_numerics(tmp_path):
    cols = {k: v[:12] for k, v in runs.clean_columns(runs.make(1, sequences=2, length=6, k=0)).items()}
    doc = doctor(runs.write(cols, tmp_path))
    assert doc.verdict == "inconclusive" and "no check could run" in doc.headline, doc.headline
    assert doc.needs and any("tokens" in n for n in doc.needs)


def test_a_temperature_without_top_k_is_not_passed_off_as_numerics(tmp_path):
    # T = 0.9 without top-k lists: the sampled tokens' slope is blurred by each position's normaliser, so no
    # exact fit; but the gap is far above a float32 run's, and doctor says so and what would settle it
    rng = np.random.default_rng(3)
    hot = runs.tempered(runs.make(3, noise=1e-4, k=0), 0.9, rng)
    doc = doctor(runs.write(runs.clean_columns(hot), tmp_path, meta=FP32))
    assert doc.verdict != "numerics", doc.headline
    wanted = " ".join(doc.needs + [n for f in doc.findings if f.status == "detected" for n in f.needs])
    assert doc.verdict == "pipeline" or "top-k" in wanted, (doc.verdict, doc.headline, wanted)


def test_the_advice_fits_the_runs_precision():
    assert "fp16 rather than bf16" in advice({"sampler": {"dtype": "bfloat16"}, "trainer": {"dtype": "float32"}})
    fp32 = advice(FP32)
    assert "bf16" not in fp32 and "fp16" not in fp32 and "float32" in fp32
    assert "fp16 rather than bf16" not in advice({"sampler": {"dtype": "float16"}, "trainer": {"dtype": "float32"}})
    assert "record both sides' dtypes" in advice(None)


def test_odd_inputs_print_no_numpy_warning(tmp_path):
    # constant logprobs, exact zeros, one sequence: every detector's arithmetic meets a 0/0 somewhere
    n = 120
    cols = {
        "sequence_id": np.zeros(n, np.int64),
        "position": np.arange(n),
        "token_id": np.full(n, 5),
        "sampler_logprob": np.zeros(n),
        "trainer_logprob": np.zeros(n),
    }
    out = cli("doctor", runs.write(cols, tmp_path, "zeros.parquet"))
    assert out.returncode == 0 and "Warning" not in out.stderr and "warn(" not in out.stderr, out.stderr
    cols["trainer_logprob"] = np.full(n, -1.0)
    out = cli("doctor", runs.write(cols, tmp_path, "constant.parquet"), "--format", "json")
    assert "Warning" not in out.stderr, out.stderr
