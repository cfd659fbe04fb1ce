"""The ``--sweep`` picture: each rule's reject (or reweight) rate against its threshold.

One panel per rule, one line per swept parameter (and per advantage
hypothesis), every run on the same axes; the selected value is a dotted line.
Which rules and sweeps are drawn is :mod:`mismatchscope.rules.drawn`.
"""

from __future__ import annotations

import math

import numpy as np
from matplotlib.figure import Figure
from matplotlib.ticker import FixedLocator, FuncFormatter, NullFormatter

from ..analysis.results import SweepPoint
from ..rules.drawn import sweep_x
from .figures import COLORS, Run, _fig, _masks, log_labels


def sweep_curves(runs: list[Run], rules) -> Figure | None:
    """Reject (or reweight) rate against threshold: one panel per rule, one line per swept parameter."""
    by_rule = _swept(runs)
    if not by_rule:
        return None
    n = len(by_rule)
    cols = min(n, 2)
    rows = math.ceil(n / cols)
    fig = _fig(6.2 * cols, 4.3 * rows)
    axes = np.atleast_1d(fig.subplots(rows, cols, squeeze=False)).ravel()
    current = {r.name: r.params for r in rules}
    # a two-column grid: an odd count of rules leaves a cell over
    for ax, (rule, params) in zip(axes, by_rule.items(), strict=False):
        acts = _draw_rule(ax, runs, rule, params)
        if not ax.get_lines():  # every value of the sweep switches the bound off: nothing to place on the axis
            _nothing_to_place(ax, rule)
            continue
        _mark_selected(ax, params, current.get(rule, {}))
        _label_panel(ax, rule, params, acts)
    for ax in axes[n:]:
        ax.set_visible(False)
    fig.suptitle("Reject rate against threshold (the --sweep curves; dotted: the selected value; 0% is drawn at 0)")
    return fig


def _swept(runs: list[Run]) -> dict[str, list[str]]:
    """rule -> its swept parameters, over every run, in first-seen order."""
    by_rule: dict[str, list[str]] = {}
    for run in runs:
        for sw in run.masks.sweeps if run.masks else []:
            by_rule.setdefault(sw.rule, [])
            if sw.param not in by_rule[sw.rule]:
                by_rule[sw.rule].append(sw.param)
    return by_rule


def _draw_rule(ax, runs: list[Run], rule: str, params: list[str]) -> str:
    """Every run's curves of one rule; returns what the rule does (the last sweep drawn says)."""
    acts = "reweight"
    for i, run in enumerate(runs):
        for j, param in enumerate(params):
            sw = next((s for s in _masks(run).sweeps if s.rule == rule and s.param == param), None)
            if sw is None:
                continue
            reweights = all(p.token_reweight_rate for p in sw.points) and not any(
                p.token_reject_rate for p in sw.points
            )
            acts = "reweight" if reweights else "reject"
            for hyp in dict.fromkeys(p.hypothesis for p in sw.points):
                pts = [p for p in sw.points if p.hypothesis == hyp]
                _draw_curve(ax, pts, acts, f"{run.label}: {param}" + ("" if hyp == "data" else f" [{hyp}]"), i, j, hyp)
    return acts


def _draw_curve(ax, pts: list[SweepPoint], acts: str, label: str, i: int, j: int, hyp: str) -> None:
    """One sweep's curve under one hypothesis; a value that switches the bound off is named in the legend."""
    off = [_percent(p, acts) for p in pts if sweep_x(p.value) is None]
    pts = [p for p in pts if sweep_x(p.value) is not None]
    xs = [sweep_x(p.value) for p in pts]
    ys = [_percent(p, acts) for p in pts]
    if not xs:
        return
    ax.plot(
        xs,
        ys,
        marker="os^v"[j % 4],
        color=COLORS[i % len(COLORS)],
        linestyle=("-", "--", ":", "-.")[(j + (hyp == "A<0")) % 4],
        label=label + (f" (off: {off[0]:.3g}%)" if off else ""),
    )


def _nothing_to_place(ax, rule: str) -> None:
    """A panel whose sweep has no finite value: say so instead of an empty axis."""
    ax.text(
        0.5,
        0.5,
        "every value of this sweep is off or infinite:\nno threshold to draw (see the legend of compare-masks --sweep)",
        ha="center",
        va="center",
        transform=ax.transAxes,
        fontsize=8.5,
        color="0.35",
    )
    ax.set_title(_title(rule), fontsize=10.5)
    ax.set_xticks([])
    ax.set_yticks([])


def _mark_selected(ax, params: list[str], selected: dict) -> None:
    """The selected value of each swept parameter: a dotted line, named at the top."""
    for j, param in enumerate(params):
        v = selected.get(param)
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


def _label_panel(ax, rule: str, params: list[str], acts: str) -> None:
    """Axes, labels, title and legend of one rule's panel."""
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
    from ..rules import RULES

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
