"""Which rules and thresholds the pictures draw, and their sweeps: a selection, drawing nothing.

Everything here is read off the rule registry (each rule's registration says
whether it is drawn by default, its thresholds on the ratio and each
parameter's sweep grid), so a new rule appears in the pictures without edits
here. No matplotlib: the CLI builds the analysis request from here before
anything is drawn, and the gate its default sweeps.
"""

from __future__ import annotations

import math

from .base import RULES, RuleInstance, make_instance


def plot_rules(selected: list[RuleInstance] | None) -> list[RuleInstance]:
    """The selected rules, else every rule registered as drawn by default."""
    return list(selected) if selected else [make_instance(n, {}) for n, s in RULES.items() if s.drawn_by_default]


def default_sweeps(rules: list[RuleInstance]) -> list[tuple[str, str, list[RuleInstance]]]:
    """One sweep per (rule, parameter) with a grid on its registration, in the shape ``parse_sweep`` returns.

    The rule's other parameters stay as selected.
    """
    out = []
    for r in rules:
        fixed = {k: v for k, v in r.params.items() if v is not None}
        for param, grid in r.spec.sweep_grids(r.config).items():
            out.append((r.name, param, [make_instance(r.name, {**fixed, param: v}) for v in grid]))
    return out


def ratio_thresholds(rule: RuleInstance) -> list[tuple[str, float]]:
    """Thresholds on the token ratio ``r`` (drawn at ``log r`` on the log-ratio histogram)."""
    return rule.ratio_thresholds()


def sweep_x(value) -> float | None:
    """A sweep point's position on the threshold axis: the number, or the upper bound U of verl's 'L_U';
    None for a bound that is off (it has no place on the axis: the picture names its rate in the legend)."""
    if value is None:
        return None
    x = float(value.rpartition("_")[2]) if isinstance(value, str) else float(value)
    return x if math.isfinite(x) and x > 0 else None  # inf: no bound either; the axis is logarithmic
