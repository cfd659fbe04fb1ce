"""The decomposition of the total gap into sampler and trainer shares, by hand."""

from __future__ import annotations

import math

import numpy as np
import pytest


def test_decomposition_by_hand():
    from mismatchscope.diagnose.decompose import decompose

    # lq = [-1.0, -2.0], lp = [-1.1, -1.9], lr = [-1.05, -2.0]
    # e_s = lq - lr = [0.05, 0], e_t = lp - lr = [-0.05, 0.1]
    # mean e_s^2 = 0.0025 / 2 = 0.00125; mean e_t^2 = (0.0025 + 0.01) / 2 = 0.00625
    # mean e_s e_t = (-0.0025 + 0) / 2 = -0.00125
    # total: l = e_t - e_s = [-0.1, 0.1], mean l^2 = 0.01 = 0.00125 + 0.00625 + 2 * 0.00125
    # shares: 0.00125 / 0.0075 = 1/6 and 5/6; correlation -0.00125 / sqrt(0.00125 * 0.00625) = -1/sqrt(5)
    d = decompose(np.array([-1.0, -2.0]), np.array([-1.1, -1.9]), np.array([-1.05, -2.0]))
    assert d.tokens == 2
    assert d.sampler_mse == pytest.approx(0.00125)
    assert d.trainer_mse == pytest.approx(0.00625)
    assert d.cross == pytest.approx(-0.00125)
    assert d.total_mse == pytest.approx(0.01)
    assert d.sampler_share == pytest.approx(1 / 6)
    assert d.trainer_share == pytest.approx(5 / 6)
    assert d.correlation == pytest.approx(-1 / math.sqrt(5))
