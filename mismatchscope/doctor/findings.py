"""Building findings: the three statuses, and the helpers every detector shares."""

from __future__ import annotations

import math

import numpy as np

from .document import Confidence, Evidence, ExplainedShare, Finding

MIN_TOKENS = 50
"""below this many usable tokens a statistical detector does not decide (it says so)."""


def detected(
    cause: str,
    sentence: str,
    evidence: list[Evidence],
    estimate: dict[str, float | str | None],
    confidence: Confidence,
    change: str,
    pipeline: bool = True,
) -> Finding:
    return Finding(cause, "detected", sentence, evidence, estimate, confidence, change, [], pipeline)


def clear(cause: str, sentence: str, evidence: list[Evidence] | None = None) -> Finding:
    return Finding(cause, "clear", sentence, evidence or [])


def not_checked(cause: str, needs: list[str], why: str | None = None) -> Finding:
    """A detector that could not look: never a silent pass."""
    sentence = why or f"not checked: needs {', '.join(needs)}"
    return Finding(cause, "not_checked", sentence, [], {}, None, None, needs)


def too_few(cause: str, n: int, minimum: int = MIN_TOKENS, what: str = "tokens") -> Finding:
    """Not checked for want of data; ``what`` names the tokens that count (e.g. "tokens at position 8 or later")."""
    return not_checked(cause, [f"at least {minimum} {what}"], f"not checked: {n} {what}, needs at least {minimum}")


def fnum(x: float | None) -> float | None:
    """A statistic as the document holds it: a plain float, None for NaN, an infinity or a missing value."""
    if x is None:
        return None
    x = float(x)
    return x if math.isfinite(x) else None


def g(x: float | None, digits: int = 3) -> str:
    """A number for a sentence."""
    return "n/a" if x is None or not np.isfinite(x) else f"{x:.{digits}g}"


def pct(x: float | None) -> str:
    """A share for a sentence: 94%, 0.3%, <0.1%."""
    if x is None or not np.isfinite(x):
        return "n/a"
    if x >= 0.1 or x == 0:
        return f"{x:.0%}"
    return f"{x:.1%}" if x >= 0.001 else "<0.1%"


def share(before: float | None, after: float | None, base: float | None) -> float | None:
    """(before - after) / base, clipped to [0, 1]; None where any is missing or base is 0."""
    if before is None or after is None or base is None or not base > 0:
        return None
    return float(min(1.0, max(0.0, (before - after) / base)))


def model_share(k3: float | None, abs_l: float | None, of: str, how: str) -> ExplainedShare:
    return ExplainedShare(fnum(k3), fnum(abs_l), of, how)


def welch_t(a: np.ndarray, b: np.ndarray) -> tuple[float, float, float]:
    """(mean(a) - mean(b), its standard error, Welch-Satterthwaite degrees of freedom)."""
    va, vb = a.var(ddof=1) / a.size, b.var(ddof=1) / b.size
    se = math.sqrt(va + vb)
    df = (va + vb) ** 2 / (va**2 / (a.size - 1) + vb**2 / (b.size - 1)) if se > 0 else float(a.size + b.size - 2)
    return float(a.mean() - b.mean()), se, df


def t_quantile(p: float, df: float) -> float:
    """Student's t quantile (upper ``p`` tail) by the Cornish-Fisher expansion of the normal's (Hill 1970):
    within 1% of the exact value from 5 degrees of freedom on, which is all the tests here use it for."""
    z = normal_quantile(p)
    g1 = (z**3 + z) / 4
    g2 = (5 * z**5 + 16 * z**3 + 3 * z) / 96
    g3 = (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / 384
    g4 = (79 * z**9 + 776 * z**7 + 1482 * z**5 - 1920 * z**3 - 945 * z) / 92160
    return z + g1 / df + g2 / df**2 + g3 / df**3 + g4 / df**4


def normal_quantile(p: float) -> float:
    """The upper-tail normal quantile z with P(Z > z) = p (Acklam's rational approximation, 1e-9 relative)."""
    q = min(p, 1 - p)
    t = math.sqrt(-2 * math.log(q))
    c = (2.515517, 0.802853, 0.010328)
    d = (1.432788, 0.189269, 0.001308)
    z = t - (c[0] + c[1] * t + c[2] * t * t) / (1 + d[0] * t + d[1] * t * t + d[2] * t**3)
    return z if p < 0.5 else -z


def rank_test(a: np.ndarray, b: np.ndarray) -> float:
    """Mann-Whitney U's z (normal approximation with the tie correction): positive when a tends above b.

    Ranks, not values: a few heavy-tailed sequences cannot carry it the way they carry a t statistic.
    """
    both = np.r_[a, b]
    order = both.argsort(kind="mergesort")
    ranks = np.empty(both.size)
    sorted_v = both[order]
    # average ranks of ties
    edges = np.flatnonzero(np.r_[True, sorted_v[1:] != sorted_v[:-1], True])
    counts = np.diff(edges)
    avg = (edges[:-1] + edges[1:] - 1) / 2 + 1
    ranks[order] = np.repeat(avg, counts)
    n1, n2 = a.size, b.size
    u = ranks[:n1].sum() - n1 * (n1 + 1) / 2
    n = n1 + n2
    tie = float(np.sum(counts**3 - counts)) / (n * (n - 1)) if n > 1 else 0.0
    var = n1 * n2 / 12 * ((n + 1) - tie)
    return float((u - n1 * n2 / 2) / math.sqrt(var)) if var > 0 else 0.0


P_ALARM = 5e-4
"""two-sided tail a clean run's test statistic crosses (each side 5e-4, 99.9% intervals): on 240 clean runs
with a few tests each, a false alarm in well under one of them."""
