"""``report``'s pictures: where the mismatch sits (:mod:`.run_pictures`, shared with the gate's overlays) and, with
``--worst``, each worst sequence's trace. matplotlib is imported only when they are drawn (``--plots``, ``--html``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from ..analysis.results import WorstSequence
    from ..reporting import ReportDocument
    from .pictures import Picture


def pictures(doc: ReportDocument) -> list[Picture]:
    """The report's pictures, and with ``--worst`` each sequence's trace (drawn once for ``--plots`` and
    ``--html`` both)."""
    from .pictures import drawn_once

    return drawn_once(doc, _drawn)


def _drawn(doc: ReportDocument) -> list[Picture]:
    worst = doc.report.worst
    return report_figures(doc.analysis, doc.plot_data, doc.rules) + (worst_figures(worst, doc.traces) if worst else [])


def report_figures(result, hist, rules) -> list[Picture]:
    """The report's pictures for one run; ``rules`` are the rules whose thresholds are drawn."""
    from .figures import run_of
    from .pictures import _pictures

    return _pictures([run_of("run", result, hist)], rules)


def worst_figures(rows: list[WorstSequence], traces: dict) -> list[Picture]:
    """``report --worst``: one trace picture per ranked sequence, ``worst-<rank>-seq<id>``."""
    from ..analysis.worst import RANKINGS
    from .pictures import _picture

    out = []
    for row in rows:
        trace = traces.get(row.sequence_id)
        if trace is None:
            continue
        label = RANKINGS[row.by][0]
        out.append(
            _picture(
                f"worst-{row.rank}-seq{row.sequence_id}",
                f"Worst sequence #{row.rank}: sequence {row.sequence_id}",
                f"Ranked by {label} = {row.value:.4g}. Top: sampler log q and trainer log p of each sampled token "
                "along the completion; bottom: the gap l = log p - log q, the largest |log p - log q| marked (dotted line).",
                sequence_trace(trace, row, label),
            )
        )
    return out


TRACE_MARKERS_UP_TO = 80
"""draw markers on the logprob lines of sequences up to this many tokens."""


TRACE_BARS_UP_TO = 400
"""draw the gap as bars up to this many tokens; longer sequences get one thin stem per token."""


def sequence_trace(trace, row: WorstSequence, by_label: str) -> Figure:
    """Sampler and trainer logprob along one completion, and the gap l = log p - log q beneath."""
    import numpy as np
    from matplotlib.ticker import MaxNLocator

    from .figures import COLORS, _fig

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
