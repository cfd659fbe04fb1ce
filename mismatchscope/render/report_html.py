"""``report --html``: headline metrics, readings, the worst sequences, pictures, breakdowns, score centering,
MoE routing and run metadata, on the page scaffolding of ``render/page.py``."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..analysis.results import Report, WorstSequence
from ..formatting import pct
from ..metrics import SCORE_CENTERING
from ..view.document import TokenView
from .page import _breakdown, _e, _figures, _metadata, _metrics, _num, _page, _table
from .report_table import largest_turn_line
from .token_view_html import tabbed, token_view_link

if TYPE_CHECKING:
    from ..reporting import ReportDocument


def render(doc: ReportDocument) -> str:
    """``report --html``: the run as given and doctor's top finding in the header, headline metrics, each rule's
    rejections, breakdowns, pictures, run metadata; ``--worst`` adds its table; the run's token view is its own
    tab, which the worst sequences and the headline link to."""
    from .doctor_table import top_line
    from .report_pictures import pictures as drawn

    result, pictures, worst, run, tokens = doc.analysis, drawn(doc), doc.report.worst, doc.path, doc.tokens
    doctor = top_line(doc.doctor) if doc.doctor is not None else None
    rep = result.report
    assert rep is not None  # report's pass
    runs = [("value", rep)]
    body = [f"<p>{result.tokens:,} tokens, {result.sequences:,} sequences, {len(result.source.files)} file(s).</p>"]
    if doctor:
        body.append(f'<p class="verdict">{_e(doctor)}</p>')
    if tokens is not None:
        body.append(token_view_link(tokens))
    if result.warnings:
        body.append("".join(f'<p class="note">warning: {_e(w)}</p>' for w in result.warnings))
    body.append("<h2>Token mismatch</h2>" + _metrics(runs))
    if result.masks is not None:
        body.append(_rules(result.masks))
    body.append(
        "<h2>Readings</h2>"
        + _table(
            ["metric", "value", "reading", "source"],
            [[_e(i.metric), _num(i.value), _e(i.reading), _e(i.source)] for i in rep.interpretation],
            numeric={1},
        )
    )
    if worst:
        body.append(_worst(worst, tokens))
    body.append(_figures(pictures))
    body.append("<h2>By sampler probability</h2>" + _breakdown(runs, "sampler_prob"))
    body.append("<h2>By position in the completion</h2>" + _breakdown(runs, "position"))
    if rep.breakdowns.entropy:
        body.append("<h2>By trainer entropy</h2>" + _breakdown(runs, "entropy"))
    if rep.breakdowns.turn:
        line = largest_turn_line(rep.breakdowns.turn)
        body.append("<h2>By turn</h2>" + _breakdown(runs, "turn") + (f"<p>{_e(line)}</p>" if line else ""))
    body.append(_centering(rep))
    body.append(_routing(rep))
    body.append("<h2>Run metadata</h2>" + _metadata([("run", result.run)]))
    shards = ", ".join(str(f) for f in result.source.files[:3]) + (" ..." if len(result.source.files) > 3 else "")
    return _page(
        f"mismatchscope report: {run}" if run else "mismatchscope report",
        run or shards,
        tabbed("".join(body), tokens, "Report"),
    )


def _rules(masks) -> str:
    """Each rule's rejections and reweightings, as compare-masks' first table has them."""
    rows = [
        [
            _e(r.display),
            _e(r.level),
            _num(r.tokens_rejected),
            _e(pct(r.token_reject_rate)),
            _num(r.tokens_reweighted),
            _e(pct(r.token_reweight_rate)),
            _num(r.sequences_with_rejection),
        ]
        for r in masks.rules
    ]
    return "<h2>What each rule would reject or reweight</h2>" + _table(
        ["rule", "level", "tokens rejected", "%", "tokens reweighted", "%", "sequences with a rejection"],
        rows,
        numeric={2, 3, 4, 5, 6},
    )


def _centering(rep: Report) -> str:
    """The score-centering statistics (top-k columns only), as the terminal prints them."""
    sc = rep.score_centering
    if not sc:
        return ""
    qs = ("0.01", "0.5", "0.99")
    rows = [
        [
            _e(m.label),
            _num(v.tokens),
            _num(v.mean),
            *[_num(v.quantiles[q]) for q in qs],
            f"<code>{_e(m.meaning)}</code>",
        ]
        for m in SCORE_CENTERING
        if (v := getattr(sc, m.name))
    ]
    rho = sc.tail_mass_ratio
    note = (
        f'<p class="note">rho is undefined on {rho.undefined_tokens:,} token(s) with an empty tail (sampler: '
        f"{rho.empty_sampler_tail:,}, trainer: {rho.empty_trainer_tail:,}), counted apart.</p>"
        if rho.undefined_tokens
        else ""
    )
    return (
        f"<h2>Score centering from the top-k</h2><p>{sc.tokens:,} tokens; K = the sampler's listed ids and the sampled one.</p>"
        + _table(["statistic", "tokens", "mean", *[f"q{q}" for q in qs], "meaning"], rows, numeric={1, 2, 3, 4, 5})
        + note
    )


def _routing(rep: Report) -> str:
    """MoE runs: the flip rate per MoE layer (completion and prompt rows apart) and what flipped tokens cost."""
    from ..analysis.routing_report import ROUTING_COLUMNS

    ro = rep.routing
    if not ro:
        return ""
    if ro.route_flip_rate_by_layer is None:
        absent = ", ".join(ro.sides.absent())
        return f"<h2>MoE routing</h2><p>No flip rates: routes missing for the {_e(absent)}.</p>"
    pct = lambda v: "-" if v is None else _e(f"{100 * v:.3g}%")  # noqa: E731
    rows = [
        [
            _e(c.layer),
            pct(c.flip_rate),
            f"{c.flipped:,} / {c.compared:,}",
            pct(p.flip_rate),
            f"{p.flipped:,} / {p.compared:,}",
        ]
        # routing_section sets both lists together, one entry per MoE layer
        for c, p in zip(ro.route_flip_rate_by_layer, ro.prompt_route_flip_rate_by_layer or [], strict=True)
    ]
    rows.append(
        [
            "any layer",
            pct(ro.route_flip_rate),
            f"{ro.tokens_flipped:,} / {ro.tokens_compared:,}",
            pct(ro.prompt_route_flip_rate),
            f"{ro.prompt_rows_flipped:,} / {ro.prompt_rows_compared:,}",
        ]
    )
    out = (
        f"<h2>MoE routing</h2><p>Top-{ro.top_k} expert sets that differ between the sides ({_e(ro.family)}, "
        f"{ro.num_experts} experts); missing captures ({ro.missing_captures.sampler or 0:,} sampler, "
        f"{ro.missing_captures.trainer or 0:,} trainer of {ro.missing_captures.entries:,} entries) "
        "are left out.</p>" + _table(ROUTING_COLUMNS, rows, numeric={0, 1, 2, 3, 4})
    )
    gap = ro.abs_logprob_diff
    if gap:
        out += _table(
            ["tokens", "count", "mean |log p - log q|"],
            [
                ["flipped in some layer", _num(gap.flipped_tokens), _num(gap.flipped_mean)],
                ["unflipped", _num(gap.unflipped_tokens), _num(gap.unflipped_mean)],
                ["without a compared route", _num(gap.tokens_without_routes), "-"],
            ],
            numeric={1, 2},
        )
        out += (
            "<p>Routing's share of the gap (sum |log p - log q| on flipped / on all tokens): "
            f"{pct(ro.routing_share_of_gap)}.</p>"
        )
    if ro.by_trainer_margin:
        out += "<h3>Flips by the trainer's router margin</h3>" + _table(
            ["margin", "compared", "flipped", "flip rate"],
            [[_e(r.bucket), _num(r.compared), _num(r.flipped), pct(r.flip_rate)] for r in ro.by_trainer_margin],
            numeric={1, 2, 3},
        )
    return out


def _worst(rows: list[WorstSequence], tokens: TokenView | None) -> str:
    from ..analysis.worst import RANKINGS

    shown = {s.sequence_id for s in tokens.sequences} if tokens is not None else set()

    def ident(v) -> str:  # ids as written, no thousands separator; a link where the token view shows it
        if v is None:
            return "-"
        return f'<a href="#seq-{v}">{_e(v)}</a>' if v in shown else _e(v)

    by = rows[0].by
    ranked = by not in ("k3_sum", "tv_max")  # those two are columns anyway
    header = [
        "rank",
        "sequence",
        "prompt",
        "tokens",
        *([RANKINGS[by][0]] if ranked else []),
        "sum k3",
        "max |p - q|",
        "position of the largest gap",
        "token there",
        "gap l there (nats)",
    ]
    body = [
        [
            _num(r.rank),
            ident(r.sequence_id),
            _e("-" if r.prompt_id is None else r.prompt_id),
            _num(r.tokens),
            *([_num(r.value)] if ranked else []),
            _num(r.k3_sum),
            _num(r.tv_max),
            _e("-" if r.max_gap_position is None else r.max_gap_position),
            _e("-" if r.max_gap_token_id is None else r.max_gap_token_id),
            _num(r.max_gap_log_ratio),
        ]
        for r in rows
    ]
    return (
        f"<h2>Worst sequences</h2><p>Ranked by {_e(RANKINGS[by][0])}; their traces are among the pictures below.</p>"
        + _table(header, body, numeric=set(range(len(header))))
    )
