"""The pictures, one function each. Every function takes one or more labelled
runs and draws them on the same axes, so ``report`` (one run) and ``gate``
(baseline and candidate overlaid) share the code.

matplotlib is imported here only, through the object-oriented API (no
pyplot, no global state): ``Figure`` + ``savefig``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, LogLocator, MaxNLocator, NullFormatter

from ...analysis.histograms import PlotAccumulator
from ...analysis.results import MasksResult, Report, WorstSequence

DPI = 110
COLORS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd")
"""run colours: baseline blue, candidate red."""
RULE_COLORS = ("#555555", "#ff7f0e", "#8c564b", "#17becf", "#bcbd22", "#e377c2")


@dataclass
class Run:
    """One labelled run: what the figures read."""

    label: str
    report: Report | None
    masks: MasksResult | None
    hist: PlotAccumulator | None


def _hist(run: Run) -> PlotAccumulator:
    assert run.hist is not None  # the figures that read it are drawn only for runs read with their histograms
    return run.hist


def _report(run: Run) -> Report:
    assert run.report is not None  # the figures that read it are drawn only for runs with a report
    return run.report


def _masks(run: Run) -> MasksResult:
    assert run.masks is not None  # the figures that read it are drawn only for runs with masks
    return run.masks


def _fig(w: float, h: float) -> Figure:
    fig = Figure(figsize=(w, h), dpi=DPI, layout="constrained")
    return fig


def log_labels(axis, suffix: str = "") -> None:
    """Plain labels on a log axis (``0.1%``, not ``10^-1``); minor ticks are labelled only when
    the axis spans less than two decades (otherwise they would crowd)."""
    lo, hi = axis.get_view_interval()
    plain = FuncFormatter(lambda v, _p: f"{v:.3g}{suffix}")
    axis.set_major_formatter(plain)
    span = math.log10(hi / lo) if lo > 0 and hi > lo else 10.0
    if span < 2:
        axis.set_minor_locator(LogLocator(subs=(2.0, 3.0, 5.0)))
        axis.set_minor_formatter(plain)
    else:
        axis.set_minor_formatter(NullFormatter())


# ---- 5. the gate's checks ---------------------------------------------------------------


def gate_checks(checks) -> Figure:
    """Each check's estimate with its interval against its limit, on one normalised axis per kind.

    A value of 0 sits on the left edge (marked <), an infinite ratio (baseline 0) on the right edge (>).
    """
    reg = [c for c in checks if c.kind == "regression"]
    ab = [c for c in checks if c.kind == "absolute"]
    panels = [
        (reg, "candidate / baseline (log scale; | = the largest allowed ratio)"),
        (ab, "candidate / limit (log scale; | = the limit)"),
    ]
    panels = [p for p in panels if p[0]]
    fig = _fig(10.5, 1.3 + 0.5 * sum(len(p[0]) for p in panels) + 1.0 * len(panels))
    axes = fig.subplots(len(panels), 1, squeeze=False, height_ratios=[len(p[0]) + 1 for p in panels])[:, 0]
    for ax, (cs, xlabel) in zip(axes, panels):
        left, right = _ratio_limits(cs)
        ys = np.arange(len(cs))[::-1]
        for y, c in zip(ys, cs):
            scale = 1.0 if c.kind == "regression" else abs(c.limit) or 1.0
            color = (
                "#d62728" if c.failed else ("#ff7f0e" if c.inconclusive else "#1f77b4" if c.below_floor else "#2ca02c")
            )
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
            ax.plot(
                [c.limit / scale], [y], marker="|", color="black", markersize=18, markeredgewidth=2, linestyle="none"
            )
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


# ---- 6. one sequence's trace (report --worst) ---------------------------------------------


TRACE_MARKERS_UP_TO = 80
"""draw markers on the logprob lines of sequences up to this many tokens."""
TRACE_BARS_UP_TO = 400
"""draw the gap as bars up to this many tokens; longer sequences get one thin stem per token."""


def sequence_trace(trace, row: WorstSequence, by_label: str) -> Figure:
    """Sampler and trainer logprob along one completion, and the gap l = log p - log q beneath."""
    pos = np.asarray(trace.position_T)
    lq, lp = np.asarray(trace.sampler_logprob_T), np.asarray(trace.trainer_logprob_T)
    l_T = trace.log_ratio_T
    short = pos.size <= TRACE_MARKERS_UP_TO
    fig = _fig(12, 6.4)
    top, bottom = fig.subplots(2, 1, sharex=True, height_ratios=[3, 2])
    mk = {"marker": "o", "markersize": 3.5} if short else {}
    top.plot(pos, lq, color=COLORS[0], linewidth=1.3, label="sampler log q", **mk)
    top.plot(pos, lp, color=COLORS[1], linewidth=1.1, linestyle="--", label="trainer log p", **mk)
    top.set_ylabel("logprob of the sampled token (nats)")
    top.grid(True, alpha=0.3)
    top.legend(
        loc="lower right", bbox_to_anchor=(1.0, 1.0), ncol=2, fontsize=8.5, borderaxespad=0.2
    )  # above the axes: hides no point
    colors = np.where(l_T >= 0, COLORS[1], COLORS[0])
    if pos.size <= TRACE_BARS_UP_TO:
        bottom.bar(pos, l_T, width=0.8, color=colors)
    else:
        bottom.vlines(pos, 0.0, l_T, colors=colors, linewidth=0.8)
    bottom.axhline(0.0, color="0.3", linewidth=0.8)
    if row.max_gap_position is not None:
        i = int(np.argmax(np.abs(l_T)))
        for ax in (top, bottom):
            ax.axvline(pos[i], color="0.45", linewidth=0.9, linestyle=":", zorder=0)
        bottom.set_title(
            f"largest gap: l = {l_T[i]:+.3g} nats at position {int(pos[i])} (token id {int(trace.token_id_T[i])}; dotted line)",
            fontsize=9.5,
            loc="left",
        )
        lim = float(np.abs(l_T).max()) or 1e-12
        bottom.set_ylim(-lim * 1.25, lim * 1.25)
    bottom.set_ylabel("l = log p - log q (nats)")
    bottom.set_xlabel("position in the completion (tokens)")
    bottom.grid(True, alpha=0.3)
    if pos.size:
        pad = max(0.6, 0.01 * float(pos.max() - pos.min()))
        left = pos.min() - pad
        bottom.set_xlim(left, max(pos.max() + pad, left + 8))  # at least ~8 positions wide: ticks stay on whole tokens
    bottom.xaxis.set_major_locator(MaxNLocator(integer=True))  # positions are whole tokens
    prompt = "" if row.prompt_id is None else f", prompt {row.prompt_id}"
    fig.suptitle(
        f"Worst sequence #{row.rank}: sequence {row.sequence_id}{prompt}, {row.tokens:,} token{'s' if row.tokens != 1 else ''}; "
        f"ranked by {by_label}: {row.value:.4g}\n"
        "top: both sides' logprob of each sampled token; bottom: the gap (red: trainer above sampler, blue: below)",
        fontsize=11,
    )
    return fig


def save_png(fig: Figure) -> bytes:
    import io

    buf = io.BytesIO()
    fig.savefig(
        buf, format="png", dpi=DPI, bbox_inches="tight", pad_inches=0.15
    )  # nothing clipped, whatever the labels
    return buf.getvalue()


def run_of(label: str, result: Any, hist: PlotAccumulator | None) -> Run:
    return Run(label, result.report, result.masks, hist)
