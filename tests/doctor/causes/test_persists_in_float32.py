"""``persists_in_float32``: read from a diagnose document beside the baseline's pairs."""

from __future__ import annotations

import json
import shutil

from mismatchscope.doctor import doctor
from tests.helpers import REPO, cli

GOLDEN = REPO / "tests" / "data" / "golden-probe"


def _metrics(abs_mean: float, k3: float) -> dict:
    return {"abs_logprob_diff_mean": abs_mean, "k3_mean": k3}


def _diagnose(tmp_path, fp32_gap: float):
    """A diagnose output folder: the golden run as its bfloat16 baseline, and a float32 sampler variant whose
    gap is ``fp32_gap`` (mean |gap|), the trainer float32 throughout. Only the fields doctor reads."""
    out = tmp_path / f"diag{fp32_gap}"
    shutil.copytree(GOLDEN, out / "baseline")
    doc = {
        "baseline": {
            "sampler": {"kind": "hf", "dtype": "bfloat16"},
            "trainer": {"dtype": "float32"},
            "metrics": _metrics(0.03, 1e-3),
        },
        "decomposition": {},
        "variants": [
            {
                "name": "sampler.dtype=float32",
                "changes": {"sampler.dtype": "float32"},
                "status": "ok",
                "metrics": _metrics(fp32_gap, fp32_gap**2 / 2),
                "gaps": {
                    "sampler_vs_reference": {"metrics": _metrics(fp32_gap, 0.0)},
                    "trainer_vs_reference": {"metrics": _metrics(1e-6, 0.0)},
                },
            },
            {
                "name": "sampler.kv_cache_dtype=fp8",
                "changes": {"sampler.engine.kv_cache_dtype": "fp8"},
                "status": "ok",
                "metrics": _metrics(0.5, 0.1),
            },
        ],
    }
    (out / "diagnose.json").write_text(json.dumps(doc))
    return out


def test_a_gap_that_survives_float32_is_a_program_difference(tmp_path):
    # both sides float32 and the gap still 0.02 of the baseline's 0.03: not rounding (float32 rounding leaves
    # 1/14 to 1/20 of a bfloat16 gap); the sampler is the side far from the float64 reference
    doc = doctor(str(_diagnose(tmp_path, 0.02)))
    f = next(x for x in doc.findings if x.cause == "persists_in_float32")
    assert f.status == "detected" and f.pipeline and f.estimate["side"] == "sampler", f.sentence
    assert f.estimate["configuration"] == "sampler.dtype=float32"  # the fp8 KV-cache variant is no float32 one
    assert f.explained_share is not None and f.explained_share.abs_logprob_diff == 0.02 / 0.03
    assert doc.verdict == "pipeline"
    # the baseline folder itself reads the same document
    assert (
        next(
            x for x in doctor(str(_diagnose(tmp_path, 0.021) / "baseline")).findings if x.cause == "persists_in_float32"
        ).status
        == "detected"
    )


def test_a_gap_that_float32_shrinks_is_rounding(tmp_path):
    doc = doctor(str(_diagnose(tmp_path, 0.0015)))
    f = next(x for x in doc.findings if x.cause == "persists_in_float32")
    assert f.status == "clear" and "rounding" in f.sentence
    # on a plain run it says what it needs
    plain = cli("doctor", str(GOLDEN), "--format", "json")
    f = next(x for x in json.loads(plain.stdout)["findings"] if x["cause"] == "persists_in_float32")
    assert f["status"] == "not_checked" and "diagnose" in f["sentence"]
