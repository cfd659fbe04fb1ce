"""One check in words, the same in every format the gate writes."""

from __future__ import annotations

from ..formatting import fmt
from ..gate.checks import Check


def estimate_text(ch: Check) -> str:
    """``x1.02 [0.97, 1.08]`` (regression) or ``0.0042 [0.0039, 0.0046]`` (absolute)."""
    x = "x" if ch.kind == "regression" else ""
    text = f"{x}{fmt(ch.estimate)}"
    if ch.interval:
        text += f" [{x}{fmt(ch.interval[0])}, {x}{fmt(ch.interval[1])}]"
    return text


def limit_text(ch: Check) -> str:
    if ch.kind == "regression":
        return f"x{fmt(ch.limit)} (+{ch.limit - 1:.0%}), floor {fmt(ch.floor)}"
    return f"{ch.op} {fmt(ch.limit)}"


def method_text(ch: Check, confidence: float) -> str:
    return f"bootstrap, {confidence:.0%}" if ch.method == "bootstrap" else "point estimate"


def status_text(ch: Check) -> str:
    if ch.failed:
        return "FAIL"
    if ch.inconclusive:
        return "pass (inconclusive)"
    return "pass (rise below floor)" if ch.below_floor else "pass"
