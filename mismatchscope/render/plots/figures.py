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
from matplotlib.ticker import FixedLocator, FuncFormatter, LogLocator, MaxNLocator, NullFormatter

from ...analysis.histograms import PlotAccumulator, log_ratio_edges, prob_edges
from ...analysis.results import MasksResult, Report, SweepPoint, WorstSequence
from ...metrics import K3_MEAN, TV_TOKEN_MEAN
from .sweeps import ratio_thresholds, sweep_x

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


# ---- 1. log-ratio histogram ---------------------------------------------------


def log_ratio_histogram(runs: list[Run], rules) -> Figure:
    """Histogram of l = log p - log q on a symmetric log axis, log-scaled counts, with rule thresholds."""
    fig = _fig(12, 5.2)
    ax = fig.add_subplot()
    edges = log_ratio_edges()
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
    ax.set_yscale("log")
    ax.set_xscale("symlog", linthresh=1e-9, linscale=0.5)
    thresholds = [(lab, math.log(r)) for rule in rules for lab, r in ratio_thresholds(rule)]
    xs = [edges[lo_i] if lo_i < len(edges) else -1e-6, edges[hi_i] if hi_i else 1e-6] + [x for _, x in thresholds]
    left, right = min(xs + [-1e-6]), max(xs + [1e-6])
    ax.set_xlim(_decade_floor(left), _decade_ceil(right))
    ax.set_ylim(0.7, ymax * 3)
    for j, (lab, x) in enumerate(thresholds):
        ax.axvline(
            x,
            color=RULE_COLORS[j % len(RULE_COLORS)],
            linestyle=("--", "-.", ":")[j // len(RULE_COLORS) % 3],
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
    for ax, run in zip(axes, runs):
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
        q = np.logspace(-8, 0, 400)
        ax.plot(q, q, color="0.4", linewidth=0.8, linestyle=":", label="p = q")
        a, b = icepop.params["alpha"], icepop.params["beta"]
        ax.plot(q, a * q, color="#ff7f0e", linewidth=1.4, linestyle="--", label=f"IcePop band: {a:g} q <= p <= {b:g} q")
        ax.plot(q, b * q, color="#ff7f0e", linewidth=1.4, linestyle="--")
        d = ipo.params["delta"]
        qq = np.logspace(math.log10(d) - 1e-6, 0, 300)
        ax.plot(q, q + d, color="#d62728", linewidth=1.4, label=f"IPO band: |p - q| <= {d:g}")
        ax.plot(qq, np.maximum(qq - d, 1e-12), color="#d62728", linewidth=1.4)
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
    for ax, (kind, key, ylabel, title) in zip(axes.ravel(), specs):
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


def _bucket_panel(ax, runs: list[Run], kind: str, key: str) -> None:
    labels = [r.bucket for r in getattr(_report(runs[0]).breakdowns, kind)]
    x = np.arange(len(labels))
    width = 0.8 / len(runs)
    positive = [float(v) for run in runs for r in getattr(_report(run).breakdowns, kind) if (v := r.mean(key))]
    finite = [v for v in positive if np.isfinite(v)]
    floor = min(finite) / 5 if finite else 1e-12
    top = max(finite) * 20 if finite else floor * 1e6  # where an infinite mean is drawn, marked "inf"
    counts = []
    for i, run in enumerate(runs):
        rows = {r.bucket: r for r in getattr(_report(run).breakdowns, kind)}
        vals = np.array([float((r.mean(key) if (r := rows.get(b)) else None) or 0.0) for b in labels], dtype=float)
        infinite = np.isinf(vals)
        vals[infinite] = top
        tokens = [r.tokens if (r := rows.get(b)) else 0 for b in labels]
        counts.append(tokens)
        color = COLORS[i % len(COLORS)]
        if kind == "position":
            ax.plot(x, np.where(vals > 0, vals, np.nan), marker="o", color=color, label=run.label)
        else:
            xs = x + (i - (len(runs) - 1) / 2) * width
            ax.bar(
                xs,
                np.where(vals > 0, vals - floor, np.where(np.array(tokens) > 0, 0.0, np.nan)),
                width=width * 0.95,
                bottom=floor,
                color=color,
                label=run.label,
                alpha=0.9,
            )
        for j in np.flatnonzero(infinite):  # an overflowed ratio (r = e^800) makes k3 inf: say so, not a bar of NaN
            xj = x[j] if kind == "position" else x[j] + (i - (len(runs) - 1) / 2) * width
            ax.annotate(
                "inf", (xj, top), textcoords="offset points", xytext=(0, 3), ha="center", fontsize=8, color=color
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


def _count(n: int) -> str:
    return f"{n / 1e6:.3g}M" if n >= 1e6 else f"{n / 1e3:.3g}k" if n >= 1e4 else f"{n:,}"


# ---- 4. sweeps ------------------------------------------------------------------------


def sweep_curves(runs: list[Run], rules) -> Figure | None:
    """Reject (or reweight) rate against threshold: one panel per rule, one line per swept parameter."""
    by_rule: dict[str, list[str]] = {}
    for run in runs:
        for sw in run.masks.sweeps if run.masks else []:
            by_rule.setdefault(sw.rule, [])
            if sw.param not in by_rule[sw.rule]:
                by_rule[sw.rule].append(sw.param)
    if not by_rule:
        return None
    n = len(by_rule)
    cols = min(n, 2)
    rows = math.ceil(n / cols)
    fig = _fig(6.2 * cols, 4.3 * rows)
    axes = np.atleast_1d(fig.subplots(rows, cols, squeeze=False)).ravel()
    current = {r.name: r.params for r in rules}
    for ax, (rule, params) in zip(axes, by_rule.items()):
        acts = "reweight"
        for i, run in enumerate(runs):
            for j, param in enumerate(params):
                sw = next((s for s in _masks(run).sweeps if s.rule == rule and s.param == param), None)
                if sw is None:
                    continue
                acts = (
                    "reweight"
                    if all(p.token_reweight_rate for p in sw.points) and not any(p.token_reject_rate for p in sw.points)
                    else "reject"
                )
                for hyp in dict.fromkeys(p.hypothesis for p in sw.points):
                    pts = [p for p in sw.points if p.hypothesis == hyp]
                    off = [_percent(p, acts) for p in pts if sweep_x(p.value) is None]
                    pts = [p for p in pts if sweep_x(p.value) is not None]
                    xs = [sweep_x(p.value) for p in pts]
                    ys = [_percent(p, acts) for p in pts]
                    label = (
                        f"{run.label}: {param}"
                        + ("" if hyp == "data" else f" [{hyp}]")
                        + (f" (off: {off[0]:.3g}%)" if off else "")
                    )
                    if xs:
                        ax.plot(
                            xs,
                            ys,
                            marker="os^v"[j % 4],
                            color=COLORS[i % len(COLORS)],
                            linestyle=("-", "--", ":", "-.")[(j + (hyp == "A<0")) % 4],
                            label=label,
                        )
        if not ax.get_lines():  # every value of the sweep switches the bound off: nothing to place on the axis
            ax.text(
                0.5,
                0.5,
                "every value of this sweep is off or infinite:\nno threshold to draw (see the legend of "
                "compare-masks --sweep)",
                ha="center",
                va="center",
                transform=ax.transAxes,
                fontsize=8.5,
                color="0.35",
            )
            ax.set_title(_title(rule), fontsize=10.5)
            ax.set_xticks([])
            ax.set_yticks([])
            continue
        for j, param in enumerate(params):
            v = current.get(rule, {}).get(param)
            v = sweep_x(v) if v is not None else None
            if v is not None:
                ax.axvline(v, color="0.5", linestyle=":", linewidth=1)
                ax.annotate(
                    f"{param}={v:g}",
                    xy=(v, 1.0),
                    xycoords=("data", "axes fraction"),
                    xytext=(2, -3 - 11 * j),
                    textcoords="offset points",
                    fontsize=7.5,
                    color="0.35",
                    va="top",
                )
        _rate_axis(ax)
        ax.set_xscale("log")
        ax.autoscale_view()
        log_labels(ax.xaxis)
        ax.set_xlabel(f"{rule} threshold ({', '.join(params)}; log scale)")
        ax.set_ylabel(
            f"tokens {'reweighted' if acts == 'reweight' else 'rejected'} (% of all"
            f"{'; log scale, linear near 0' if ax.get_yscale() == 'symlog' else ''})"
        )
        ax.set_title(_title(rule), fontsize=10.5)
        ax.grid(True, which="major", alpha=0.3)
        ax.legend(fontsize=7.5)
    for ax in axes[n:]:
        ax.set_visible(False)
    fig.suptitle("Reject rate against threshold (the --sweep curves; dotted: the selected value; 0% is drawn at 0)")
    return fig


def _percent(p: SweepPoint, acts: str) -> float:
    """The point's reweight or reject rate, in percent (0 where there are no tokens)."""
    return 100 * ((p.token_reweight_rate if acts == "reweight" else p.token_reject_rate) or 0.0)


_RULE_TITLES = {
    "icepop": "icepop: alpha rejects r < alpha, beta rejects r > beta",
    "token-mask": "token-mask: lo rejects r < lo, hi rejects r > hi",
    "ipo": "ipo: delta rejects |p - q| > delta",
    "tis": "tis: C truncates the weight of r > C",
    "cispo": "cispo: clips the weight outside [1 - eps_low, 1 + eps_high]",
}


def _title(rule: str) -> str:
    from ...rules import RULES

    spec = RULES.get(rule)
    return _RULE_TITLES.get(rule) or (f"{rule}: {spec.summary}"[:90] if spec else rule)


def _rate_axis(ax) -> None:
    """The rate axis: symmetric-log, linear from 0 to the smallest positive rate's decade, so 0% is drawn at a
    tick labelled ``0%`` (a log axis would put it at its bottom edge, labelled with some positive rate)."""
    ys = np.concatenate([ln.get_ydata() for ln in ax.get_lines() if len(ln.get_ydata()) > 2] or [np.zeros(1)])
    pos = ys[ys > 0]
    if pos.size == 0:  # nothing rejected anywhere: a linear axis, the curves lie on 0%
        ax.set_ylim(-0.05, 1.0)
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _p: f"{v:.3g}%"))
        ax.annotate(
            "no token rejected at any threshold", xy=(0.5, 0.5), xycoords="axes fraction", ha="center", color="0.4"
        )
        return
    lo = math.floor(math.log10(max(pos.min(), 1e-6)))
    linthresh = 10.0**lo
    top = 100.0 if pos.max() > 20 else pos.max() * 2
    hi = max(math.ceil(math.log10(top) - 1e-9), lo + 1)
    ax.set_yscale("symlog", linthresh=linthresh, linscale=0.3)
    ax.set_ylim(-0.05 * linthresh, min(10.0**hi, 100.0))
    ax.yaxis.set_major_locator(FixedLocator([0.0, *(10.0**e for e in range(lo, hi + 1) if 10.0**e <= 100.0)]))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _p: "0%" if v == 0 else f"{v:.3g}%"))
    ax.yaxis.set_minor_formatter(NullFormatter())


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
