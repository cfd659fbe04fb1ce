"""The gate's pictures: its checks against their limits, then the report's pictures with baseline and candidate
overlaid (``render.pictures``). matplotlib is imported only when they are drawn (``gate --plots`` or ``--html``)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from ..gate.document import GateDocument
    from ..gate.run import GateResult
    from .pictures import Picture


def pictures(doc: GateDocument) -> list[Picture]:
    """The gate's pictures: its checks, then baseline and candidate overlaid (drawn once for ``--plots`` and
    ``--html`` both)."""
    from .pictures import drawn_once

    return drawn_once(doc, lambda d: _drawn(d.source))


def _drawn(gate_result: GateResult) -> list[Picture]:
    from .figures import run_of
    from .pictures import _picture, _pictures

    runs = (
        [run_of("baseline", gate_result.baseline.result, gate_result.baseline.plot_data)]
        if gate_result.baseline
        else []
    )
    runs.append(run_of("candidate", gate_result.candidate.result, gate_result.candidate.plot_data))
    checks = _picture(
        "gate_checks",
        "Gate checks",
        "Each check's estimate and interval against its limit. Regression "
        "checks on candidate / baseline, absolute checks on candidate / limit.",
        gate_checks(gate_result.checks),
    )
    return [checks, *_pictures(runs, gate_result.config.rule_instances())]


def gate_checks(checks) -> Figure:
    """Each check's estimate with its interval against its limit, on one normalised axis per kind.

    A value of 0 sits on the left edge (marked <), an infinite ratio (baseline 0) on the right edge (>).
    """
    import numpy as np
    from matplotlib.figure import Figure

    from .figures import DPI, log_labels

    reg = [c for c in checks if c.kind == "regression"]
    ab = [c for c in checks if c.kind == "absolute"]
    panels = [
        (reg, "candidate / baseline (log scale; | = the largest allowed ratio)"),
        (ab, "candidate / limit (log scale; | = the limit)"),
    ]
    panels = [p for p in panels if p[0]]
    fig = Figure(
        figsize=(10.5, 1.3 + 0.5 * sum(len(p[0]) for p in panels) + 1.0 * len(panels)), dpi=DPI, layout="constrained"
    )
    axes = fig.subplots(len(panels), 1, squeeze=False, height_ratios=[len(p[0]) + 1 for p in panels])[:, 0]
    for ax, (cs, xlabel) in zip(axes, panels, strict=True):
        left, right = _ratio_limits(cs)
        ys = np.arange(len(cs))[::-1]
        for y, c in zip(ys, cs, strict=True):
            _draw_check(ax, y, c, left, right)
        ax.set_yticks(ys)
        ax.set_yticklabels([f"{c.name}  [{_status(c)}]" for c in cs], fontsize=9)
        ax.set_xscale("log")
        ax.set_xlim(left, right)
        ax.axvline(1.0, color="0.6", linewidth=0.8, linestyle=":")
        ax.set_xlabel(xlabel)
        ax.grid(True, axis="x", which="major", alpha=0.3)
        ax.set_ylim(-0.7, len(cs) - 0.3)
        log_labels(ax.xaxis)
    fig.suptitle(
        "Gate checks: estimate (dot) and interval (bar) against the limit (|)\n"
        "red: fails; orange: inconclusive; blue: beyond the ratio but the rise is below the floor; green: passes",
        fontsize=11,
    )
    return fig


def _draw_check(ax, y: float, c, left: float, right: float) -> None:
    """One check's row: its interval (bar), its estimate (dot, or an edge marker with the value), its limit (|)."""
    scale = 1.0 if c.kind == "regression" else abs(c.limit) or 1.0
    color = "#d62728" if c.failed else ("#ff7f0e" if c.inconclusive else "#1f77b4" if c.below_floor else "#2ca02c")
    if c.interval:
        lo, hi = (_clamp(v / scale, left, right) for v in c.interval)
        ax.plot([lo, hi], [y, y], color=color, linewidth=4, solid_capstyle="butt", alpha=0.55)
    est = c.estimate / scale
    x = _clamp(est, left, right)
    marker = "<" if est <= left else (">" if est >= right else "o")
    ax.plot([x], [y], marker=marker, color=color, markersize=8, linestyle="none", clip_on=False, zorder=3)
    if marker != "o":
        note = "0" if est <= 0 else ("inf: baseline 0" if math.isinf(est) else f"{est:.3g}")
        ax.annotate(
            note,
            (x, y),
            xytext=(-6 if marker == ">" else 6, 7),
            textcoords="offset points",
            fontsize=8,
            ha="right" if marker == ">" else "left",
            color=color,
        )
    ax.plot([c.limit / scale], [y], marker="|", color="black", markersize=18, markeredgewidth=2, linestyle="none")


def _status(c) -> str:
    return "FAIL" if c.failed else "inconclusive" if c.inconclusive else "below floor" if c.below_floor else "pass"


def _clamp(x: float, left: float, right: float) -> float:
    if not math.isfinite(x):
        return right if x > 0 else left
    return min(max(x, left), right)


def _ratio_limits(cs) -> tuple[float, float]:
    """Axis range over the finite positive values (estimates, intervals, limits), with room for the edge markers."""
    vals = []
    for c in cs:
        scale = 1.0 if c.kind == "regression" else abs(c.limit) or 1.0
        vals += [c.estimate / scale, c.limit / scale] + ([v / scale for v in c.interval] if c.interval else [])
    finite = [v for v in vals if v > 0 and math.isfinite(v)] or [1.0]
    return min(finite + [1.0]) / 2.5, max(finite + [1.0]) * 2.5
