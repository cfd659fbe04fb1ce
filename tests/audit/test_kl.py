"""The audit's compiled binary-KL passes (``audit/_kl.c``) against the numpy code the rules decide with, bit for
bit: the statistic an audit writes must be the number the rule compared, whichever path computed it.

The inputs hit every branch of the clamps and of the zero terms: logprobs of exactly 0 and -0.0, a probability
that rounds to 1 (-1e-9), one under the clamp (log 1e-7 < log eps), logs past exp's underflow (-800, -746), the
clamp's own edges, equal logprobs (D = 0 both ways) and random pairs; with kpop's clamp at its default and
off its default, and dppo-kl's epsilon at its default, at 0 and larger.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from mismatchscope.audit import kl
from mismatchscope.divergence import binary_kl_logs_both, token_terms
from mismatchscope.rules import parse_rule
from mismatchscope.rules.token import dppo_binary_kl

pytestmark = pytest.mark.skipif(kl._kl is None, reason="the audit's loops were not built (no C compiler)")

EDGES = [
    (0.0, -1e-9),
    (-0.0, 0.0),
    (-1e-9, -0.0),
    (-800.0, -1.0),
    (0.0, -800.0),
    (-1e-300, 0.0),
    (-1e-7, -1e-7),
    (math.log1p(-1e-6), math.log1p(-1e-6)),
    (math.log(1e-6), math.log(1e-7)),
    (-746.0, -5e-324),
    (math.log(0.6), math.log(0.2)),
]


def _pairs(n: int = 20_000, seed: int = 11) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    lq = np.log(rng.uniform(1e-12, 1.0, n))
    lp = np.minimum(lq + rng.normal(0.0, 0.5, n), 0.0)
    same = rng.random(n) < 0.2
    lp[same] = lq[same]
    near = rng.random(n) < 0.2  # near-certain tokens on both sides, inside and past the clamp
    lq[near] = -np.abs(rng.normal(0.0, 2e-6, near.sum()))
    lp[near] = -np.abs(rng.normal(0.0, 2e-6, near.sum()))
    lp[: len(EDGES)], lq[: len(EDGES)] = zip(*EDGES, strict=True)
    return lp, lq


def _bits(x: np.ndarray) -> np.ndarray:
    return np.asarray(x, dtype=np.float64).view(np.int64)


@pytest.mark.parametrize("eps", [1e-6, 1e-3, 0.3])
def test_kpop_statistic_is_the_numpy_one_to_the_bit(eps):
    lp, lq = _pairs()
    t = token_terms(lp, lq)
    with np.errstate(all="ignore"):
        rule_values = np.maximum(*binary_kl_logs_both(lq, lp, eps))  # what kpop compares
    np.testing.assert_array_equal(_bits(kl.binary_kl_max(t, eps)), _bits(rule_values))


@pytest.mark.parametrize("eps", [1e-8, 0.0, 0.01])
def test_dppo_kl_statistic_is_the_numpy_one_to_the_bit(eps):
    lp, lq = _pairs(seed=12)
    t = token_terms(lp, lq)
    with np.errstate(all="ignore"):
        rule_values = dppo_binary_kl(lq, lp, eps)  # what dppo-kl compares
    np.testing.assert_array_equal(_bits(kl.binary_kl_qp(t, eps)), _bits(rule_values))


def test_the_compiled_passes_take_the_statistics_they_stand_in_for(monkeypatch):
    kpop, kpop_off, dppo = parse_rule("kpop"), parse_rule("kpop:eps=0"), parse_rule("dppo-kl")
    assert kl.compiled_statistic(kpop.spec.statistics[0], kpop.config) is not None
    assert kl.compiled_statistic(dppo.spec.statistics[0], dppo.config) is not None
    # kpop without its clamp, any other statistic, and MISMATCHSCOPE_COMPILED=0: numpy's own code
    assert kl.compiled_statistic(kpop_off.spec.statistics[0], kpop_off.config) is None
    icepop = parse_rule("icepop")
    assert kl.compiled_statistic(icepop.spec.statistics[0], icepop.config) is None
    monkeypatch.setenv("MISMATCHSCOPE_COMPILED", "0")
    assert kl.compiled_statistic(kpop.spec.statistics[0], kpop.config) is None


def test_a_buffer_of_another_type_or_length_is_refused():
    loops = kl._kl
    assert loops is not None
    x = np.zeros(4)
    with pytest.raises(TypeError):
        loops.kl_qp_prepare(x, x.astype(np.float32), x, x, 1e-8)
    with pytest.raises(TypeError):
        loops.kl_qp_prepare(x, x[:3], x, x, 1e-8)


def test_a_numpy_whose_maximum_keeps_the_first_of_two_zeros_runs_the_numpy_code(monkeypatch):
    # the loops return the second of two equal values (max(-0.0, 0.0) = 0.0), as this numpy does; a numpy that
    # returned the first would give -0.0 where the loops give 0.0, so the extension is not used there
    assert kl._maximum_keeps_the_second()
    monkeypatch.setattr(kl, "_maximum_keeps_the_second", lambda: False)
    assert kl._load() is None
