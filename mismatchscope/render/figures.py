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

from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

from ..analysis.histograms import PlotAccumulator
from ..analysis.results import MasksResult, Report

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


def save_png(fig: Figure) -> bytes:
    import io

    buf = io.BytesIO()
    fig.savefig(
        buf, format="png", dpi=DPI, bbox_inches="tight", pad_inches=0.15
    )  # nothing clipped, whatever the labels
    return buf.getvalue()


def run_of(label: str, result: Any, hist: PlotAccumulator | None) -> Run:
    return Run(label, result.report, result.masks, hist)
