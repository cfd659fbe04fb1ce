"""``report``'s terminal output: one function per section, in the order the report prints them.

The numbers come typed from :class:`~mismatchscope.analysis.results.Report`;
cells are formatted by :mod:`mismatchscope.formatting`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.table import Table

from ..analysis.results import (
    Breakdowns,
    FlipGap,
    KeptMass,
    Report,
    Routing,
    ScoreCentering,
    SequenceMetrics,
    TokenMetrics,
    WorstSequence,
)
from ..formatting import num, pct
from ..metrics import (
    ABS_LOGPROB_DIFF_MEAN,
    CHI2_SEQ,
    CHI2_TOKEN,
    ESS,
    K1_MEAN,
    K2_MEAN,
    K3_MEAN,
    KL_REVERSE_K3_MEAN,
    KL_TOPK_LOWER_MEAN,
    SCORE_CENTERING,
    SEQUENCE_DISTRIBUTIONS,
    TV_TOKEN_MEAN,
    TV_TOPK_LOWER_MEAN,
)
from .layout import print_table

if TYPE_CHECKING:
    from ..reporting import ReportDocument

QUANTILES_SHOWN = ("0.01", "0.5", "0.99")
"""the quantiles a distribution's row shows beside its mean."""


def render(console, doc: ReportDocument) -> None:
    """The input's header line, the report's tables, ``--worst``'s table, and doctor's top finding last."""
    from rich.markup import escape

    from .doctor_table import top_line
    from .run_header import header

    header(console, doc.analysis)
    report_tables(console, doc.report)
    if doc.report.worst is not None:
        worst_table(console, doc.report.worst)
    if doc.doctor is not None:
        line = f"{top_line(doc.doctor)} (evidence: mismatchscope doctor {doc.path})"
        console.print(escape(line), highlight=False, overflow="fold")


def report_tables(console, rep: Report) -> None:
    token_table(console, rep.metrics)
    ratio_tables(console, rep.metrics)
    sequence_table(console, rep.sequence_metrics)
    if rep.score_centering:
        centering_table(console, rep.score_centering)
    if rep.kept_mass:
        kept_mass_line(console, rep.kept_mass)
    breakdown_tables(console, rep.breakdowns)
    if rep.routing:
        routing_tables(console, rep.routing)
    for line in rep.interpretation:
        console.print(f"[bold]{line.metric}[/bold]: {line.reading}  [dim](source: {line.source})[/dim]")


def token_table(console, m: TokenMetrics) -> None:
    """The token metrics, each with what it means."""
    t = Table(title="Token mismatch (trainer p vs sampler q, over sampled tokens)", title_justify="left")
    t.add_column("metric")
    t.add_column("value", justify="right")
    t.add_column("meaning")
    rows = [
        ("tv_token mean / max", f"{num(m.tv_token_mean)} / {num(m.tv_token_max)}", TV_TOKEN_MEAN.meaning),
        ("|log p - log q| mean / max", f"{num(m.abs_logprob_diff_mean)} / {num(m.abs_logprob_diff_max)}", ""),
        (K1_MEAN.label, num(m.k1_mean), K1_MEAN.meaning),
        (K2_MEAN.label, num(m.k2_mean), K2_MEAN.meaning),
        (K3_MEAN.label, num(m.k3_mean), K3_MEAN.meaning),
        ("reverse-KL k3 mean", num(m.kl_reverse_k3_mean), KL_REVERSE_K3_MEAN.meaning),
        (CHI2_TOKEN.name, num(m.chi2_token), CHI2_TOKEN.meaning),
        (ESS.label, num(m.ess), ESS.meaning),
        ("ratio min / max", f"{num(m.ratio_min)} / {num(m.ratio_max)}", "r = p/q"),
    ]
    if m.tv_topk_lower_mean is not None:
        rows.append(("TV lower bound (top-k) mean", num(m.tv_topk_lower_mean), TV_TOPK_LOWER_MEAN.meaning))
        rows.append(("KL lower bound (top-k) mean", num(m.kl_topk_lower_mean), KL_TOPK_LOWER_MEAN.meaning))
    for r in rows:
        t.add_row(*r)
    print_table(console, t)


def ratio_tables(console, m: TokenMetrics) -> None:
    """The ratio's quantiles, then its tails on both sides."""
    q = Table(title="Ratio r = p/q: quantiles and tails", title_justify="left")
    q.add_column("quantile")
    for k in m.ratio_quantiles:
        q.add_column(k, justify="right")
    q.add_row("r", *[num(v) for v in m.ratio_quantiles.values()])
    print_table(console, q)
    tails = Table(show_header=True)
    tails.add_column("c")
    tails.add_column("share r > c", justify="right")
    tails.add_column("share r < 1/c", justify="right")
    for c in m.ratio_tail_high:
        tails.add_row(c, pct(m.ratio_tail_high[c]), pct(m.ratio_tail_low[c]))
    print_table(console, tails)


def sequence_table(console, s: SequenceMetrics) -> None:
    """The per-sequence distributions (mean and quantiles) and chi2_seq."""
    st = Table(title=f"Sequences (chi2_seq clamps S to +-{s.chi2_seq_clip:g}, as verl does)", title_justify="left")
    st.add_column("metric")
    st.add_column("mean", justify="right")
    for k in QUANTILES_SHOWN:
        st.add_column(f"q{k}", justify="right")
    for metric in SEQUENCE_DISTRIBUTIONS:
        v = getattr(s, metric.name)
        st.add_row(metric.meaning, num(v.mean), *[num(v.quantiles[k]) for k in QUANTILES_SHOWN])
    st.add_row(CHI2_SEQ.name, num(s.chi2_seq), "", "", "")
    print_table(console, st)


def centering_table(console, sc: ScoreCentering) -> None:
    """The score-centering statistics from the top-k lists, and what they leave out."""
    c = Table(
        title=f"Score centering from the top-k ({sc.tokens:,} tokens; K = the sampler's listed ids and the sampled one)",
        title_justify="left",
    )
    for col in ("statistic", "tokens", "mean", "q0.01", "q0.5", "q0.99", "meaning"):
        c.add_column(col, justify="left" if col in ("statistic", "meaning") else "right")
    for metric in SCORE_CENTERING:
        v = getattr(sc, metric.name)
        if v is None:
            continue
        quantiles = [num(v.quantiles[k]) for k in QUANTILES_SHOWN]
        c.add_row(metric.label, num(v.tokens), num(v.mean), *quantiles, metric.meaning)
    print_table(console, c)
    rho = sc.tail_mass_ratio
    if rho.undefined_tokens:
        console.print(
            f"[dim]rho is undefined on {rho.undefined_tokens:,} token(s) with an empty tail (sampler: "
            f"{rho.empty_sampler_tail:,}, trainer: {rho.empty_trainer_tail:,}), counted apart.[/dim]"
        )
    if sc.topk_overlap is None:
        console.print("[dim]No trainer_topk_ids column: no top-k overlap.[/dim]")


def kept_mass_line(console, km: KeptMass) -> None:
    """Top-p/top-k truncation, said apart from the numerical mismatch."""
    console.print(
        f"top-p/top-k truncation: mean log kept mass {num(km.kept_logmass_mean)} (min {num(km.kept_logmass_min)}), "
        "reported apart from the numerical mismatch above.",
        highlight=False,
    )


def breakdown_tables(console, breakdowns: Breakdowns) -> None:
    """Where the mismatch sits: by sampler probability, by position, by trainer entropy, by turn (multi-turn runs),
    and the turn whose gap is the largest."""
    columns = (TV_TOKEN_MEAN, ABS_LOGPROB_DIFF_MEAN, K3_MEAN, KL_REVERSE_K3_MEAN, CHI2_TOKEN)
    for key, title in (
        ("sampler_prob", "By sampler probability q"),
        ("position", "By position in the completion"),
        ("entropy", "By trainer entropy (nats)"),
        ("turn", "By turn (assistant turns of each conversation, from 0)"),
    ):
        rows = getattr(breakdowns, key)
        if not rows:
            continue
        b = Table(title=title, title_justify="left")
        for col in ("bucket", "tokens", *(c.label for c in columns)):
            b.add_column(col, justify="left" if col == "bucket" else "right")
        for r in rows:
            b.add_row(r.bucket, num(r.tokens), *(num(r.mean(c.name)) for c in columns))
        print_table(console, b)
    line = largest_turn_line(breakdowns.turn)
    if line:
        console.print(line, highlight=False)


def routing_tables(console, ro: Routing) -> None:
    """MoE runs: the flip rate per MoE layer (completion and prompt rows apart), and what flipped tokens cost."""
    if ro.route_flip_rate_by_layer is None:
        absent = ro.sides.absent()
        console.print(
            f"[dim]Routing: no flip rates, routes missing for the {', '.join(absent)}.[/dim]", highlight=False
        )
        return
    flip_table(console, ro)
    if ro.abs_logprob_diff:
        gap_line(console, ro, ro.abs_logprob_diff)
    if ro.by_trainer_margin:
        margin_table(console, ro)


def flip_table(console, ro: Routing) -> None:
    """Per MoE layer, and in any layer: the share of compared rows whose top-k sets differ."""
    from ..analysis.routing_report import ROUTING_COLUMNS

    t = Table(
        title=f"MoE routing: top-{ro.top_k} sets that differ between the sides ({ro.family}, "
        f"{ro.num_experts} experts{', replayed ' + ro.replay if ro.replay else ''})",
        title_justify="left",
    )
    for col in ROUTING_COLUMNS:
        t.add_column(col, justify="right")
    # routing_section sets both lists together, one entry per MoE layer
    for c, p in zip(ro.route_flip_rate_by_layer or [], ro.prompt_route_flip_rate_by_layer or [], strict=True):
        t.add_row(
            str(c.layer),
            pct(c.flip_rate),
            f"{c.flipped:,} / {c.compared:,}",
            pct(p.flip_rate),
            f"{p.flipped:,} / {p.compared:,}",
        )
    t.add_row(
        "any layer",
        pct(ro.route_flip_rate),
        f"{ro.tokens_flipped:,} / {ro.tokens_compared:,}",
        pct(ro.prompt_route_flip_rate),
        f"{ro.prompt_rows_flipped:,} / {ro.prompt_rows_compared:,}",
        style="bold",
    )
    print_table(console, t)


def gap_line(console, ro: Routing, gap: FlipGap) -> None:
    """|log p - log q| on flipped and unflipped tokens, and routing's share of the gap."""
    without = f"; {gap.tokens_without_routes:,} token(s) without a compared route" if gap.tokens_without_routes else ""
    console.print(
        f"|log p - log q| on flipped tokens {num(gap.flipped_mean)} ({gap.flipped_tokens:,}), on "
        f"unflipped {num(gap.unflipped_mean)} ({gap.unflipped_tokens:,}); routing's share of the "
        f"gap (sum |log p - log q| on flipped / on all tokens): {pct(ro.routing_share_of_gap)}" + without,
        highlight=False,
    )


def margin_table(console, ro: Routing) -> None:
    """Flips by the trainer's router margin: a flip is expected where the margin is small."""
    m = Table(
        title="Flips by the trainer's router margin (k-th minus (k+1)-th score, completion rows, per layer)",
        title_justify="left",
    )
    for col in ("margin", "compared", "flipped", "flip rate"):
        m.add_column(col, justify="left" if col == "margin" else "right")
    for r in ro.by_trainer_margin or []:
        m.add_row(r.bucket, num(r.compared), num(r.flipped), pct(r.flip_rate))
    print_table(console, m)


def worst_table(console, rows: list[WorstSequence]) -> None:
    """``report --worst``: the ranked sequences and where each one's largest gap sits."""
    from ..analysis.worst import RANKINGS

    if not rows:
        console.print("[dim]No sequence to rank.[/dim]")
        return
    by = rows[0].by
    prompts = any(r.prompt_id is not None for r in rows)
    shown = by not in ("k3_sum", "tv_max")  # those two are columns anyway
    t = Table(title=f"Worst sequences (by {RANKINGS[by][0]}; traces with --plots)", title_justify="left")
    cols = ["rank", "sequence", *(["prompt"] if prompts else []), "tokens", *([by] if shown else [])]
    for col in cols + ["sum k3", "max |p - q|", "largest gap at", "token", "gap l there"]:
        t.add_column(col, justify="right")
    for r in rows:
        t.add_row(*_worst_row(r, prompts, shown))
    print_table(console, t)


def _worst_row(r: WorstSequence, prompts: bool, shown: bool) -> list[str]:
    """One ranked sequence's cells; ids print as written, with no thousands separator."""

    def ident(v) -> str:
        return "-" if v is None else str(v)

    return [
        str(r.rank),
        str(r.sequence_id),
        *([ident(r.prompt_id)] if prompts else []),
        num(r.tokens),
        *([num(r.value)] if shown else []),
        num(r.k3_sum),
        num(r.tv_max),
        ident(r.max_gap_position),
        ident(r.max_gap_token_id),
        num(r.max_gap_log_ratio),
    ]


def largest_turn_line(rows: list | None) -> str | None:
    """The turn with the largest mean |log p - log q| and by how much it stands out against the other turns'
    tokens (``report``'s breakdown by turn, in the terminal and on the page); None without two measured turns."""
    measured = [r for r in rows or [] if r.tokens and r.abs_logprob_diff_mean is not None]
    if len(measured) < 2:
        return None
    top = max(measured, key=lambda r: r.abs_logprob_diff_mean)
    rest = [r for r in measured if r is not top]
    n = sum(r.tokens for r in rest)
    others = sum(r.tokens * r.abs_logprob_diff_mean for r in rest) / n
    by = f"{top.abs_logprob_diff_mean / others:.3g}x" if others > 0 else "the other turns have none"
    return (
        f"Turn {top.bucket} has the largest gap: mean |log p - log q| {num(top.abs_logprob_diff_mean)} over "
        f"{top.tokens:,} tokens, {by} the other turns' {num(others)}."
        if others > 0
        else f"Turn {top.bucket} has the largest gap: mean |log p - log q| {num(top.abs_logprob_diff_mean)} over "
        f"{top.tokens:,} tokens; {by}."
    )
