"""Which thresholds the pictures draw, and the default sweep grids.

numpy only (the CLI builds the analysis request from here before any
matplotlib import).
"""

from __future__ import annotations

import math

from ..rules import RuleInstance, make_instance

PLOT_RULES = ("icepop", "ipo", "token-mask", "tis")
"""rules drawn when the user selects none: the advantage-free token rules."""

_R_LOW = (0.1, 0.2, 0.3, 0.5, 0.7, 0.8, 0.9)
_R_HIGH = (1.1, 1.25, 1.5, 2.0, 3.0, 5.0, 10.0)
_PQ = (0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.3, 0.5)
SWEEP_GRIDS: dict[str, dict[str, tuple[float, ...]]] = {
    "icepop": {"alpha": _R_LOW, "beta": _R_HIGH},
    "token-mask": {"lo": _R_LOW, "hi": _R_HIGH},
    "tis": {"C": _R_HIGH},
    "ipo": {"delta": _PQ},
    "dppo-tv": {"delta_low": _PQ, "delta_high": _PQ},
    "dppo-kl": {"delta": (1e-4, 1e-3, 0.01, 0.05, 0.1, 0.3)},
    "cispo": {"eps_high": (0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 9.0)},
    "ppo-clip": {"eps_low": (0.05, 0.1, 0.2, 0.3, 0.5), "eps_high": (0.05, 0.1, 0.2, 0.28, 0.5, 1.0)},
    "seq-tis": {"C": _R_HIGH},
    "seq-mis": {"lo": _R_LOW, "hi": _R_HIGH},
    "geo-mask": {"hi": (1.0001, 1.001, 1.01, 1.1)},
    "k3-seq": {"delta": (1e-4, 1e-3, 0.01, 0.1)},
    "veto": {"lo": (1e-6, 1e-5, 1e-4, 1e-3, 0.01, 0.1)},
    "opsm": {"delta": (1e-4, 1e-3, 0.01, 0.1, 0.5)},
}
"""threshold grids for the reject-rate curves; the rule's other parameters stay as selected."""


def plot_rules(selected: list[RuleInstance] | None) -> list[RuleInstance]:
    return list(selected) if selected else [make_instance(n, {}) for n in PLOT_RULES]


def default_sweeps(rules: list[RuleInstance]) -> list[tuple[str, str, list[RuleInstance]]]:
    """One sweep per (rule, parameter) of ``SWEEP_GRIDS``, in the shape ``parse_sweep`` returns."""
    out = []
    for r in rules:
        fixed = {k: v for k, v in r.params.items() if v is not None}
        for param, grid in SWEEP_GRIDS.get(r.name, {}).items():
            out.append((r.name, param, [make_instance(r.name, {**fixed, param: v}) for v in grid]))
    return out


def ratio_thresholds(rule: RuleInstance) -> list[tuple[str, float]]:
    """Thresholds on the token ratio ``r`` (drawn at ``log r`` on the log-ratio histogram)."""
    p = rule.params
    pairs: list[tuple[str, float | None]] = {
        "icepop": [("alpha", p.get("alpha")), ("beta", p.get("beta"))],
        "token-mask": [("lo", p.get("lo")), ("hi", p.get("hi"))],
        "tis": [("C", p.get("C"))],
        "cispo": [("1-eps_low", 1 - p["eps_low"] if p.get("eps_low") is not None else None),
                  ("1+eps_high", 1 + p["eps_high"] if p.get("eps_high") is not None else None)],
        "ppo-clip": [("1-eps_low", 1 - p["eps_low"] if p.get("eps_low") is not None else None),
                     ("1+eps_high", 1 + p["eps_high"] if p.get("eps_high") is not None else None)],
        "veto": [("lo", p.get("lo")), ("hi", p.get("hi"))],
    }.get(rule.name, [])
    return [(f"{rule.name} {k}={v:g}", v) for k, v in pairs if v is not None and v > 0 and math.isfinite(v)]
