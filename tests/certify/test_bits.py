"""The bit-level comparisons certify rests on: ULP distance, widths and hex, a k3 that does not round a tiny gap to zero."""

from __future__ import annotations

import numpy as np
import pytest

from mismatchscope.certify.bits import (
    hex_value,
    recorded_width,
    stable_k3,
    ulp_distance,
)
from tests.certify.runs import LP


def test_ulp_distance_counts_representable_values_between():
    one = np.array([1.0])
    nxt = np.array([float(np.nextafter(np.float32(1.0), np.float32(2.0)))])
    assert ulp_distance(one, nxt, "float32")[0] == 1
    # smallest positive and negative subnormals: -tiny, -0/+0, +tiny -> 2 steps (both zeros are one point)
    tiny = float(np.nextafter(np.float32(0), np.float32(1)))
    assert ulp_distance(np.array([-tiny]), np.array([tiny]), "float32")[0] == 2
    assert ulp_distance(np.array([-0.0]), np.array([0.0]), "float32")[0] == 0
    assert ulp_distance(np.array([1.0]), np.array([np.nextafter(1.0, 2.0)]), "float64")[0] == 1


def test_width_and_hex():
    assert recorded_width(LP, LP, "a", "b").dtype == "float32"
    assert recorded_width(LP + 1e-9, LP, "a", "b").dtype == "float64"
    assert hex_value(-1.0, "float32") == "0xbf800000"  # sign 1, exponent 127, mantissa 0
    assert hex_value(-1.0, "float64") == "0xbff0000000000000"


def test_stable_k3_does_not_round_a_tiny_gap_to_zero():
    # d = 1e-9: expm1(d) - d = d^2/2 + d^3/6 + ... = 5e-19 (the naive exp(d) - 1 - d gives 0 or noise at 1e-16)
    k3 = stable_k3(np.array([1e-9]), np.array([0.0]))[0]
    assert k3 == pytest.approx(5e-19, rel=1e-6)
