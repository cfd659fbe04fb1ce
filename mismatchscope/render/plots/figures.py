"""What every picture shares: a labelled :class:`Run`, the figure, plain log-axis labels and PNG bytes;
and report's trace of one worst sequence.

Every picture takes one or more labelled runs and draws them on the same
axes, so ``report`` (one run) and ``gate`` (baseline and candidate overlaid)
share the code (:mod:`.mismatch`, :mod:`.sweeps`, :mod:`.routing`).
matplotlib is imported through the object-oriented API (no pyplot, no
global state): ``Figure`` + ``savefig``, and only when pictures are asked for.
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


# ---- 5. one sequence's trace (report --worst) ---------------------------------------------


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
