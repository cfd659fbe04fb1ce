"""The binary-KL statistics of the audit in two compiled passes around numpy's logarithms, where the install built them.

kpop's ``binary_kl_max`` and dppo-kl's ``binary_kl_qp`` are the costliest
columns of an audit: numpy evaluates each as a dozen passes over the tokens,
and on a 10-million-token run they were a quarter of what ``--write`` added to
the command's wall time. ``_kl.c`` does their clamps, differences, products,
sums and maxima in one pass before the logarithms and one after; the
logarithms and the exponentials of clamped logs stay numpy's (on CPUs with
AVX-512 numpy's vector log can differ from the C library's in the last bit),
so each value is the one the rule's numpy code computes, bit for bit
(``tests/audit/test_kl.py``), and the audit still shows the number each
decision was taken on.

Optional, as the analysis pass's loops (``analysis.compiled``): without a C
compiler the package installs without it and the statistics' own numpy code
runs; ``MISMATCHSCOPE_COMPILED=0`` runs the numpy code where it is built.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from importlib import import_module
from types import ModuleType
from typing import Any

import numpy as np

from ..analysis.compiled import COMPILED_ENV, OFF
from ..divergence import TokenTerms
from ..divergence import _exp_where_moved as exp_where_moved
from ..rules import RULES
from ..rules.base import Statistic


def _load() -> ModuleType | None:
    # by name: the extension is no module of the source tree, and ``from . import`` would read as an import of
    # the package that imports this module
    try:
        module = import_module(f"{__package__}._kl")
    except ImportError:  # installed without a C compiler
        return None
    return module if _maximum_keeps_the_second() else None


def _maximum_keeps_the_second() -> bool:
    """Whether this numpy's ``maximum`` of two equal values (-0.0 and 0.0) returns the second, as the loops do:
    the sign of a zero statistic is then the rule's own bit for bit; a numpy that returns the first keeps the
    numpy code."""
    zeros = np.full(64, -0.0)
    return not np.signbit(np.maximum(zeros, 0.0)).any() and bool(np.signbit(np.maximum(-zeros, -0.0)).all())


_kl = _load()

KL_MAX = RULES["kpop"].statistics[0]
KL_QP = RULES["dppo-kl"].statistics[0]


def compiled_statistic(st: Statistic, config: Any) -> Callable[[TokenTerms], np.ndarray] | None:
    """``st`` under ``config`` as the compiled passes evaluate it, or None: not one of theirs, not built, or
    turned off (``MISMATCHSCOPE_COMPILED=0``). kpop's without its clamp (``eps=0``) stays numpy's."""
    if _kl is None or os.environ.get(COMPILED_ENV, "").strip().lower() in OFF:
        return None
    if st is KL_MAX and config.eps > 0:
        return lambda t: binary_kl_max(t, config.eps)
    if st is KL_QP:
        return lambda t: binary_kl_qp(t, config.eps)
    return None


def binary_kl_max(t: TokenTerms, eps: float) -> np.ndarray:
    """``max(*divergence.binary_kl_logs_both(lq, lp, eps, exps))`` for ``eps > 0``, the same bits."""
    assert _kl is not None and eps > 0
    lq, lp = _contiguous(t.lq_T), _contiguous(t.lp_T)
    q1, p1 = _contiguous(t.one_minus_q_T), _contiguous(t.one_minus_p_T)
    la, lb, a1, b1 = (np.empty(lq.size) for _ in range(4))
    moved_a, moved_b = _kl.kl_max_prepare(lq, lp, q1, p1, la, lb, a1, b1, eps, math.log(eps), math.log1p(-eps))
    with np.errstate(over="ignore"):
        a = _contiguous(exp_where_moved(t.q_T, la, lq)) if moved_a else _contiguous(t.q_T)
        b = _contiguous(exp_where_moved(t.p_T, lb, lp)) if moved_b else _contiguous(t.p_T)
    with np.errstate(divide="ignore", invalid="ignore"):
        la1, lb1 = np.log(a1), np.log(b1)
    out = np.empty(lq.size)
    _kl.kl_max_finish(la, lb, a, b, a1, b1, la1, lb1, out)
    return out


def binary_kl_qp(t: TokenTerms, eps: float) -> np.ndarray:
    """``rules.token.dppo_binary_kl(lq, lp, eps, exps)``, the same bits."""
    assert _kl is not None
    lq, lp, q = _contiguous(t.lq_T), _contiguous(t.lp_T), _contiguous(t.q_T)
    q1, p1 = _contiguous(t.one_minus_q_T), _contiguous(t.one_minus_p_T)
    s1, s2 = np.empty(lq.size), np.empty(lq.size)
    _kl.kl_qp_prepare(q1, p1, s1, s2, eps)
    with np.errstate(divide="ignore", invalid="ignore"):
        np.log(s1, out=s1)
        np.log(s2, out=s2)
    out = np.empty(lq.size)
    _kl.kl_qp_finish(lq, lp, q, q1, s1, s2, out)
    return out


def _contiguous(values: np.ndarray | None) -> np.ndarray:
    return np.ascontiguousarray(values, dtype=np.float64)
