"""Each variant's effect: the paired bootstrap of its change against the baseline."""

from __future__ import annotations

import numpy as np
import pytest


def test_paired_bootstrap_of_an_unchanged_variant_is_exactly_zero():
    from types import SimpleNamespace

    from mismatchscope.diagnose.effects import Bootstrap, deltas

    sums = {
        "n": np.array([3.0, 2.0, 5.0]),
        "sum_abs_l": np.array([0.3, 0.1, 0.2]),
        "sum_tv": np.array([0.03, 0.01, 0.02]),
        "sum_k3": np.array([1e-3, 2e-3, 3e-3]),
    }
    r = SimpleNamespace(per_sequence=SimpleNamespace(sequence_id_S=np.array([0, 1, 2]), sums=sums))
    d = deltas(r, r, paired=True, boot=Bootstrap(resamples=200))
    # the same resample applies to both sides, so every replicate of the difference is 0
    for m in d.values():
        assert (m.estimate, m.ci_low, m.ci_high, m.significant, m.bootstrap) == (
            0.0,
            0.0,
            0.0,
            False,
            "paired",
        )
    # mean |l| = (0.3 + 0.1 + 0.2) / 10 = 0.06
    assert d["abs_logprob_diff_mean"].baseline == pytest.approx(0.06)
