"""A small slice of doctor's calibration corpus (benchmarks/doctor_corpus.py; the whole corpus and its table are
in docs/doctor.md): clean runs raise no alarm, each cause at its middle severity is ranked first."""

from __future__ import annotations

import importlib.util
import sys

from tests.helpers import REPO


def _corpus():
    """The benchmark script, loaded from its folder (benchmarks/ is no package)."""
    spec = importlib.util.spec_from_file_location("doctor_corpus", REPO / "benchmarks" / "doctor_corpus.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["doctor_corpus"] = module  # its dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


def test_a_slice_of_the_corpus(tmp_path):
    doctor_corpus = _corpus()
    results = [doctor_corpus.examine_case(case, tmp_path) for case in doctor_corpus.small_slice()]
    clean = [r for r in results if not r["injected"]]
    assert len(clean) == 7 and not [r["name"] for r in clean if r["verdict"] == "pipeline"]
    for r in (r for r in results if r["injected"]):
        cause = r["injected"][0][0]
        assert r["ranked"][:1] == [cause], (r["name"], r["verdict"], r["ranked"])
        want = "pipeline" if doctor_corpus.EXPECTED_PIPELINE.get(cause, True) else "expected"
        assert r["verdict"] == want, (r["name"], r["verdict"])
    table = doctor_corpus.table(results)
    assert "exit 1 on 0" in table and "| `temperature` | middle (0.7) | 1 | 1 | 1 | 1 |" in table
