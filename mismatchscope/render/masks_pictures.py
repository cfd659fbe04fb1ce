"""compare-masks' pictures: which tail each rejecting rule cuts.

matplotlib is imported here only (the ``plot`` extra), and only when
``compare-masks --plots`` asks for it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter

from ..analysis.results import MasksResult, RuleRow

if TYPE_CHECKING:
    from ..reporting import MasksDocument
    from .pictures import Picture

TITLE = (
    "Which tail each rule cuts: each rule's rejected tokens by sampler probability q (left) and by sign of p - q "
    "(right), as shares of that rule's own rejections"
)


def tail_breakdown(masks: MasksResult) -> Figure | None:
    """Each rejecting rule's rejected tokens, as shares of its own rejections: left by sampler-probability bucket,
    right by sign of p - q. One normalisation in both panels and in the reading above them (``tail_reading``:
    "rejects mostly q<0.1 tokens (53%)" is the sum of that rule's bars below 0.1)."""
    rows = [r for r in masks.rules if r.rejected_by_sampler_prob is not None and r.hypothesis != "mean"]
    if not rows:
        return None
    buckets = list(masks.tokens_by_sampler_prob)
    totals = np.array([masks.tokens_by_sampler_prob[b] for b in buckets], dtype=float)
    names = [r.display for r in rows]
    groups = [(lv, [(r, n) for r, n in zip(rows, names, strict=True) if r.level == lv]) for lv in ("token", "sequence")]
    groups = [(lv, g) for lv, g in groups if g]
    fig = Figure(figsize=(15, 4.2 + 2.8 * len(groups)), dpi=110, layout="constrained")
    axes = fig.subplot_mosaic([[lv, "sign"] for lv, _ in groups], width_ratios=(2.2, 1))
    for k, (lv, group) in enumerate(groups):
        _bucket_panel(axes[lv], lv, group, buckets, totals, k)
    _sign_panel(axes["sign"], rows, names)
    fig.suptitle(TITLE + (f"\n{masks.tail_reading}" if masks.tail_reading else ""), fontsize=10, wrap=True)
    return fig


def _bucket_panel(
    ax, lv: str, group: list[tuple[RuleRow, str]], buckets: list[str], totals: np.ndarray, k: int
) -> None:
    """One level's rules: how each one's rejected tokens spread over the sampler-probability buckets (``k``: the
    panel's index, so the two panels' rules take different colours)."""
    cmap = __import__("matplotlib").colormaps["tab20"]
    x = np.arange(len(buckets))
    width = 0.84 / len(group)
    for i, (r, name) in enumerate(group):
        counts = np.array([(r.rejected_by_sampler_prob or {})[b] for b in buckets], dtype=float)
        share = 100 * counts / counts.sum() if counts.sum() > 0 else np.zeros_like(counts)
        ax.bar(
            x + (i - (len(group) - 1) / 2) * width, share, width=width * 0.95, color=cmap((i + 10 * k) % 20), label=name
        )
    ax.set_xticks(x)
    ax.set_xticklabels([f"{b}\n{int(n):,} tokens" for b, n in zip(buckets, totals, strict=True)], fontsize=8.5)
    ax.set_xlabel("sampler probability q of the sampled token (report's buckets)")
    ax.set_ylabel("share of the rule's rejected tokens\n(%; a rule's bars sum to 100%)")
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _p: f"{v:.3g}%"))
    ax.set_ylim(bottom=0)
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend(fontsize=7.5, ncol=2)
    ax.set_title(
        "Token rules: where on q their rejected tokens sit"
        if lv == "token"
        else "Sequence rules: where on q the tokens of their rejected sequences sit",
        fontsize=11,
    )


def _sign_panel(right, rows: list[RuleRow], names: list[str]) -> None:
    """Each rule's rejected tokens split by which way the trainer moved (p > q or p < q)."""
    y = np.arange(len(rows))
    ups = np.array([(r.rejected_by_pq_sign or {})["p>q"] for r in rows], dtype=float)
    downs = np.array([(r.rejected_by_pq_sign or {})["p<q"] for r in rows], dtype=float)
    tot = np.array([r.tokens_rejected for r in rows], dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        up_share = np.where(tot > 0, 100 * ups / tot, 0.0)
        down_share = np.where(tot > 0, 100 * downs / tot, 0.0)
    right.barh(y, up_share, color="#2ca02c", label="p > q (trainer above sampler)")
    right.barh(y, down_share, left=up_share, color="#d62728", label="p < q (trainer below sampler)")
    for j, n in enumerate(tot):
        right.annotate(
            f"{int(n):,} rejected" if n else "none rejected",
            xy=(101, j),
            va="center",
            fontsize=7.5,
            color="0.3",
            annotation_clip=False,
        )
    right.set_yticks(y)
    right.set_yticklabels(names, fontsize=8.5)
    right.invert_yaxis()
    right.set_xlim(0, 100)
    right.xaxis.set_major_formatter(FuncFormatter(lambda v, _p: f"{v:.0f}%"))
    right.set_xlabel("share of the rule's rejected tokens")
    right.legend(fontsize=7.5, loc="lower right")
    right.set_title("Which way the trainer moved, on the rejected tokens", fontsize=11)


def pictures(doc: MasksDocument) -> list[Picture]:
    """compare-masks' pictures (drawn once for ``--plots`` and ``--html`` both)."""
    from .pictures import drawn_once

    return drawn_once(doc, lambda d: masks_figures(d.analysis))


def masks_figures(result) -> list[Picture]:
    """``compare-masks --plots``: which tail each rejecting rule cuts."""
    from .pictures import _picture

    fig = tail_breakdown(result.masks)
    if fig is None:
        return []
    return [
        _picture(
            "rule_tails",
            "Which tail each rule cuts",
            "Each rejecting rule's rejected tokens as shares of its own rejections: left by sampler-probability "
            "bucket (a rule's bars sum to 100%; each bucket's token count under it), right by sign of p - q.",
            fig,
        )
    ]
