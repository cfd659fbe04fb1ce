"""Building findings: the three statuses, and the helpers every detector shares."""

from __future__ import annotations

import numpy as np

from .document import Cause, Confidence, Evidence, Finding

MIN_TOKENS = 50
"""below this many examined tokens a statistical detector does not decide (it says so)."""


def detected(
    cause: Cause,
    sentence: str,
    evidence: list[Evidence],
    estimate: dict[str, float | str | None],
    confidence: Confidence,
    change: str,
    pipeline: bool = True,
) -> Finding:
    return Finding(cause, "detected", sentence, evidence, estimate, confidence, change, [], pipeline)


def clear(cause: Cause, sentence: str, evidence: list[Evidence] | None = None) -> Finding:
    return Finding(cause, "clear", sentence, evidence or [])


def not_checked(cause: Cause, needs: list[str], why: str | None = None) -> Finding:
    """A detector that could not look: never a silent pass."""
    sentence = why or f"not checked: needs {', '.join(needs)}"
    return Finding(cause, "not_checked", sentence, [], {}, None, None, needs)


def too_few(cause: Cause, n: int, minimum: int = MIN_TOKENS) -> Finding:
    return not_checked(
        cause, [f"at least {minimum} tokens"], f"not checked: {n} usable tokens, needs at least {minimum}"
    )


def fnum(x: float | None) -> float | None:
    """A statistic as the document holds it: a plain float, None for NaN or a missing value."""
    if x is None:
        return None
    x = float(x)
    return None if np.isnan(x) else x


def g(x: float | None, digits: int = 3) -> str:
    """A number for a sentence."""
    return "n/a" if x is None or np.isnan(x) else f"{x:.{digits}g}"


def welch(a: np.ndarray, b: np.ndarray, z: float) -> tuple[float, float, float]:
    """mean(a) - mean(b) and its interval at ``z`` standard errors (Welch's unequal variances)."""
    diff = float(a.mean() - b.mean())
    se = float(np.sqrt(a.var(ddof=1) / a.size + b.var(ddof=1) / b.size))
    return diff, diff - z * se, diff + z * se


Z_999 = 3.29
"""two-sided 99.9% normal interval: a clean run crosses it about once in a thousand."""
