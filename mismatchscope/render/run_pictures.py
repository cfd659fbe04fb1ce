"""report's (and gate's) pictures of where the mismatch sits: the log-ratio histogram, sampler against
trainer probability, and the breakdowns by probability and position.

Each takes one or more labelled runs (:class:`~.figures.Run`) and draws them on
the same axes, so ``report`` (one run) and ``gate`` (baseline and candidate
overlaid) share the code. matplotlib is imported only when pictures are asked for.
"""

from __future__ import annotations

import math

import numpy as np
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

from ..analysis.histograms import log_ratio_edges, prob_edges
from ..metrics import ABS_LOGPROB_DIFF_MEAN, K3_MEAN, TV_TOKEN_MEAN
from ..rules.drawn import ratio_thresholds
from .figures import COLORS, RULE_COLORS, Run, _fig, _hist, _report, log_labels

# ---- 1. log-ratio histogram ---------------------------------------------------


def log_ratio_histogram(runs: list[Run], rules) -> Figure:
    """Histogram of l = log p - log q on a symmetric log axis, log-scaled counts, with rule thresholds."""
    fig = _fig(12, 5.2)
    ax = fig.add_subplot()
    edges = log_ratio_edges()
    lo_i, hi_i, ymax = _draw_counts(ax, runs, edges)
    ax.set_yscale("log")
    ax.set_xscale("symlog", linthresh=1e-9, linscale=0.5)
    thresholds = [(lab, math.log(r)) for rule in rules for lab, r in ratio_thresholds(rule)]
    xs = [edges[lo_i] if lo_i < len(edges) else -1e-6, edges[hi_i] if hi_i else 1e-6] + [x for _, x in thresholds]
    left, right = min(xs + [-1e-6]), max(xs + [1e-6])
    ax.set_xlim(_decade_floor(left), _decade_ceil(right))
    ax.set_ylim(0.7, ymax * 3)
    for j, (lab, x) in enumerate(thresholds):
        linestyle = ("--", "-.", ":")[j // len(RULE_COLORS) % 3]
        ax.axvline(
            x,
            color=RULE_COLORS[j % len(RULE_COLORS)],
            linestyle=linestyle,
            linewidth=1.3,
            label=f"{lab} (l = {x:+.3g})",
        )
    ax.set_xticks(_symlog_ticks(*ax.get_xlim()))
    ax.xaxis.set_major_formatter(FuncFormatter(_signed_pow10))
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_xlabel("log ratio l = log p - log q  (nats; symmetric log axis, |l| < 1e-9 in the middle bin)")
    ax.set_ylabel("tokens per bin (log scale)")
    ax.set_title("Where the tokens' log ratios fall, and the rules' thresholds on r = p/q (at log r)")
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8.5, borderaxespad=0)
    return fig


def _draw_counts(ax, runs: list[Run], edges: np.ndarray) -> tuple[int, int, float]:
    """Each run's counts as stairs; returns the first and past-last non-empty bins over all runs, and the
    largest count (the axis limits)."""
    lo_i, hi_i = len(edges), 0
    ymax = 1.0
    for i, run in enumerate(runs):
        c = _hist(run).log_ratio_counts.astype(float)
        nz = np.flatnonzero(c)
        if nz.size:
            lo_i, hi_i = min(lo_i, nz[0]), max(hi_i, nz[-1] + 1)
            ymax = max(ymax, c.max())
        ax.stairs(
            np.where(c > 0, c, np.nan),
            edges,
            color=COLORS[i % len(COLORS)],
            linewidth=1.6,
            label=f"{run.label} ({_hist(run).tokens:,} tokens)",
            fill=len(runs) == 1,
            alpha=0.85 if len(runs) == 1 else 1.0,
        )
    return lo_i, hi_i, ymax


def _decade_floor(x: float) -> float:
    if x >= 0:
        return -1e-9
    return -(10.0 ** math.ceil(math.log10(-x) + 1e-9))


def _decade_ceil(x: float) -> float:
    if x <= 0:
        return 1e-9
    return 10.0 ** math.ceil(math.log10(x) + 1e-9)


def _symlog_ticks(lo: float, hi: float) -> list[float]:
    """0 and signed decades, thinned to at most ~6 per side."""
    ticks = [0.0]
    for sign, end in ((-1, -lo), (1, hi)):
        if end <= 1e-9:
            continue
        top = int(round(math.log10(end)))
        decades = list(range(-8, top + 1))  # +-1e-9 would sit on top of the 0 label
        step = max(1, math.ceil(len(decades) / 6))
        ticks += [sign * 10.0**d for d in decades[::-1][::step]]
    return sorted(ticks)


def _signed_pow10(x: float, _pos=None) -> str:
    if x == 0:
        return "0"
    e = int(round(math.log10(abs(x))))
    if -2 <= e <= 2:
        return f"{x:g}"
    return ("-" if x < 0 else "") + f"1e{e}"


# ---- 2. sampler vs trainer probability ------------------------------------------


def probability_density(runs: list[Run], icepop, ipo) -> Figure:
    """2-D histogram of (q, p) on log-log axes with the IcePop band (alpha q <= p <= beta q) and the IPO band (|p - q| <= delta)."""
    fig = _fig(5.4 * len(runs) + 2.2, 6.2)
    axes = fig.subplots(1, len(runs), sharex=True, sharey=True, squeeze=False)[0]
    edges = prob_edges()
    vmax = max(int(_hist(r).prob_counts_QP.max()) for r in runs) or 1
    from matplotlib.colors import LogNorm

    mesh = None
    for ax, run in zip(axes, runs, strict=True):
        c = _hist(run).prob_counts_QP.T.astype(float)  # rows: p (y), columns: q (x)
        mesh = ax.pcolormesh(
            edges,
            edges,
            np.where(c > 0, c, np.nan),
            norm=LogNorm(vmin=1, vmax=vmax),
            cmap="viridis",
            shading="flat",
            rasterized=True,
        )
        ax.set_xscale("log")
        ax.set_yscale("log")
        _draw_bands(ax, icepop, ipo)
        ax.set_xlim(1e-8, 1.0)
        ax.set_ylim(1e-8, 1.0)
        ax.set_aspect("equal")
        ax.set_title(f"{run.label}: {_hist(run).tokens:,} tokens")
        ax.set_xlabel("sampler probability q of the sampled token (log scale)")
        ax.grid(True, which="major", alpha=0.25)
        ax.xaxis.set_major_locator(LogLocator(numticks=10))
        ax.yaxis.set_major_locator(LogLocator(numticks=10))
    axes[0].set_ylabel("trainer probability p of the same token (log scale)")
    axes[0].legend(loc="upper left", fontsize=8.5, framealpha=0.9)
    assert mesh is not None  # runs is not empty
    fig.colorbar(mesh, ax=list(axes), label="tokens per cell (log scale)", shrink=0.85)
    fig.suptitle(
        "Sampler vs trainer probability\noff the diagonal: mismatch; outside a band: the rule acts (below 1e-8: first row/column)",
        fontsize=11,
    )
    return fig


def _draw_bands(ax, icepop, ipo) -> None:
    """The diagonal p = q, the IcePop band (alpha q <= p <= beta q) and the IPO band (|p - q| <= delta)."""
    q = np.logspace(-8, 0, 400)
    ax.plot(q, q, color="0.4", linewidth=0.8, linestyle=":", label="p = q")
    a, b = icepop.params["alpha"], icepop.params["beta"]
    ax.plot(q, a * q, color="#ff7f0e", linewidth=1.4, linestyle="--", label=f"IcePop band: {a:g} q <= p <= {b:g} q")
    ax.plot(q, b * q, color="#ff7f0e", linewidth=1.4, linestyle="--")
    d = ipo.params["delta"]
    qq = np.logspace(math.log10(d) - 1e-6, 0, 300)
    ax.plot(q, q + d, color="#d62728", linewidth=1.4, label=f"IPO band: |p - q| <= {d:g}")
    ax.plot(qq, np.maximum(qq - d, 1e-12), color="#d62728", linewidth=1.4)


# ---- 3. breakdowns ------------------------------------------------------------------


def breakdowns(runs: list[Run]) -> Figure:
    """Mean |p - q| and mean k3 by sampler-probability bucket and by position in the completion."""
    fig = _fig(12, 8.4)
    axes = fig.subplots(2, 2)
    specs = (
        (
            "sampler_prob",
            TV_TOKEN_MEAN.name,
            "mean |p - q| (probability; log scale)",
            "Mean |p - q| by sampler probability q",
        ),
        ("sampler_prob", K3_MEAN.name, "mean k3 (nats; log scale)", "Mean k3 by sampler probability q"),
        (
            "position",
            TV_TOKEN_MEAN.name,
            "mean |p - q| (probability; log scale)",
            "Mean |p - q| by position in the completion",
        ),
        ("position", K3_MEAN.name, "mean k3 (nats; log scale)", "Mean k3 by position in the completion"),
    )
    for ax, (kind, key, ylabel, title) in zip(axes.ravel(), specs, strict=True):
        _bucket_panel(ax, runs, kind, key)
        ax.set_ylabel(ylabel)
        ax.set_title(title, fontsize=11)
        ax.set_xlabel(
            "sampler probability bucket of the sampled token (and tokens in it)"
            if kind == "sampler_prob"
            else "position in the completion (tokens; deciles of the longest)"
        )
    fig.suptitle(
        "Where the mismatch sits (buckets without tokens are left empty; a bar on the bottom edge is exactly 0)"
    )
    return fig


def turn_breakdown(runs: list[Run]) -> Figure:
    """Mean |log p - log q| and mean k3 per turn of a multi-turn run (its ``breakdowns.turn``)."""
    fig = _fig(12, 4.6)
    for ax, (key, ylabel) in zip(
        fig.subplots(1, 2),
        (
            (ABS_LOGPROB_DIFF_MEAN.name, "mean |log p - log q| (nats; log scale)"),
            (K3_MEAN.name, "mean k3 (nats; log scale)"),
        ),
        strict=True,
    ):
        _bucket_panel(ax, runs, "turn", key)
        ax.set_ylabel(ylabel)
        ax.set_xlabel("assistant turn (and its tokens)")
        ax.set_title(ylabel.split(" (")[0].capitalize() + " by turn", fontsize=11)
    fig.suptitle("Where the mismatch sits, turn by turn (a turn without a gap is left empty)")
    return fig


def _bucket_panel(ax, runs: list[Run], kind: str, key: str) -> None:
    """One breakdown (by sampler probability: bars from a floor; by position: lines) of one mean, every run."""
    labels = [r.bucket for r in _rows(runs[0], kind)]
    if kind == "turn":  # runs of other turn counts overlaid (a gate's baseline may have none)
        labels = sorted({r.bucket for run in runs for r in _rows(run, kind)}, key=int)
    x = np.arange(len(labels))
    width = 0.8 / len(runs)
    positive = [float(v) for run in runs for r in _rows(run, kind) if (v := r.mean(key))]
    finite = [v for v in positive if np.isfinite(v)]
    floor = min(finite) / 5 if finite else 1e-12
    top = max(finite) * 20 if finite else floor * 1e6  # where an infinite mean is drawn, marked "inf"
    counts = []
    for i, run in enumerate(runs):
        vals, infinite, tokens = _bucket_values(run, kind, key, labels, top)
        counts.append(tokens)
        color = COLORS[i % len(COLORS)]
        xs = x if kind == "position" else x + (i - (len(runs) - 1) / 2) * width
        if kind == "position":
            ax.plot(x, np.where(vals > 0, vals, np.nan), marker="o", color=color, label=run.label)
        else:
            heights = np.where(vals > 0, vals - floor, np.where(np.array(tokens) > 0, 0.0, np.nan))
            ax.bar(xs, heights, width=width * 0.95, bottom=floor, color=color, label=run.label, alpha=0.9)
        for j in np.flatnonzero(infinite):  # an overflowed ratio (r = e^800) makes k3 inf: say so, not a bar of NaN
            ax.annotate(
                "inf", (xs[j], top), textcoords="offset points", xytext=(0, 3), ha="center", fontsize=8, color=color
            )
    ax.set_yscale("log")
    if kind == "position":
        ax.margins(y=0.15)
    else:
        ax.set_ylim(bottom=floor)
        labels = [f"{b}\n" + " / ".join(_count(c[j]) for c in counts) for j, b in enumerate(labels)]
    ax.autoscale_view()
    log_labels(ax.yaxis)
    ax.set_xticks(x)
    ax.set_xticklabels(labels, rotation=30 if len(labels) > 6 else 0, fontsize=8.5)
    ax.grid(True, axis="y", which="major", alpha=0.3)
    ax.legend(fontsize=8.5)


def _bucket_values(
    run: Run, kind: str, key: str, labels: list[str], top: float
) -> tuple[np.ndarray, np.ndarray, list[int]]:
    """One run's mean of ``key`` in each bucket (0 where it has none; an infinite mean drawn at ``top``), which
    were infinite, and its tokens per bucket."""
    rows = {r.bucket: r for r in _rows(run, kind)}
    vals = np.array([float((r.mean(key) if (r := rows.get(b)) else None) or 0.0) for b in labels], dtype=float)
    infinite = np.isinf(vals)
    vals[infinite] = top
    tokens = [r.tokens if (r := rows.get(b)) else 0 for b in labels]
    return vals, infinite, tokens


def _rows(run: Run, kind: str) -> list:
    """One breakdown's rows of a run (none for a breakdown it lacks: the turns of a run of single turns)."""
    return getattr(_report(run).breakdowns, kind) or []


def _count(n: int) -> str:
    return f"{n / 1e6:.3g}M" if n >= 1e6 else f"{n / 1e3:.3g}k" if n >= 1e4 else f"{n:,}"
