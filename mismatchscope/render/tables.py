"""Rich tables for people. JSON output never goes through here."""

from __future__ import annotations

from typing import Any

from rich.table import Table

from ..analysis.results import MasksResult, Routing, WorstSequence
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


def num(v: Any, digits: int = 4) -> str:
    if v is None:
        return "-"
    if isinstance(v, str):
        return v
    if isinstance(v, int):
        return f"{v:,}"
    v = float(v)
    if v == 0:
        return "0"
    if 1e4 <= abs(v) < 1e9:  # 47,650 tokens/s reads at a glance; 4.765e4 makes the reader count
        return f"{v:,.0f}"
    if abs(v) >= 1e4 or abs(v) < 1e-3:  # 8.442e-5, not 8.442e-05: a column's character saved
        return f"{v:.{digits - 1}e}".replace("e-0", "e-").replace("e+0", "e").replace("e+", "e")
    return f"{v:.{digits}g}"


def pct(v: float | None) -> str:
    return "-" if v is None else f"{100 * v:.3g}%"


def header(console, result) -> None:
    run = result.run or {}
    bits = [f"{result.tokens:,} tokens", f"{result.sequences:,} sequences", f"{len(result.source.files)} file(s)"]
    if run.get("simulated"):
        bits.append("SIMULATED data")
    elif run.get("sampler"):
        s = run["sampler"]
        t = run.get("trainer", {})
        bits.append(f"sampler {s.get('kind', '?')}/{s.get('dtype', '?')} vs trainer {t.get('dtype', '?')}")
        if (run.get("trainer_checkpoint") or {}).get("same_as_sampler") is False:
            bits.append("trainer on another checkpoint (policy lag)")
    console.print(" | ".join(bits), highlight=False)


def report_tables(console, result) -> None:
    rep = result.report
    m = rep.metrics
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

    s = rep.sequence_metrics
    st = Table(title=f"Sequences (chi2_seq clamps S to +-{s.chi2_seq_clip:g}, as verl does)", title_justify="left")
    st.add_column("metric")
    st.add_column("mean", justify="right")
    for k in ("0.01", "0.5", "0.99"):
        st.add_column(f"q{k}", justify="right")
    for metric in SEQUENCE_DISTRIBUTIONS:
        v = getattr(s, metric.name)
        st.add_row(metric.meaning, num(v.mean), *[num(v.quantiles[k]) for k in ("0.01", "0.5", "0.99")])
    st.add_row(CHI2_SEQ.name, num(s.chi2_seq), "", "", "")
    print_table(console, st)

    sc = rep.score_centering
    if sc:
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
            c.add_row(
                metric.label,
                num(v.tokens),
                num(v.mean),
                *[num(v.quantiles[k]) for k in ("0.01", "0.5", "0.99")],
                metric.meaning,
            )
        print_table(console, c)
        rho = sc.tail_mass_ratio
        if rho.undefined_tokens:
            console.print(
                f"[dim]rho is undefined on {rho.undefined_tokens:,} token(s) with an empty tail (sampler: "
                f"{rho.empty_sampler_tail:,}, trainer: {rho.empty_trainer_tail:,}), counted apart.[/dim]"
            )
        if sc.topk_overlap is None:
            console.print("[dim]No trainer_topk_ids column: no top-k overlap.[/dim]")

    if rep.kept_mass:
        km = rep.kept_mass
        console.print(
            f"top-p/top-k truncation: mean log kept mass {num(km.kept_logmass_mean)} (min {num(km.kept_logmass_min)}), "
            "reported apart from the numerical mismatch above.",
            highlight=False,
        )

    for key, title in (
        ("sampler_prob", "By sampler probability q"),
        ("position", "By position in the completion"),
        ("entropy", "By trainer entropy (nats)"),
    ):
        rows = getattr(rep.breakdowns, key)
        if not rows:
            continue
        b = Table(title=title, title_justify="left")
        columns = (TV_TOKEN_MEAN, ABS_LOGPROB_DIFF_MEAN, K3_MEAN, KL_REVERSE_K3_MEAN, CHI2_TOKEN)
        for col in ("bucket", "tokens", *(c.label for c in columns)):
            b.add_column(col, justify="left" if col == "bucket" else "right")
        for r in rows:
            b.add_row(r.bucket, num(r.tokens), *(num(r.mean(c.name)) for c in columns))
        print_table(console, b)

    if rep.routing:
        routing_tables(console, rep.routing)

    for line in rep.interpretation:
        console.print(f"[bold]{line.metric}[/bold]: {line.reading}  [dim](source: {line.source})[/dim]")


def routing_tables(console, ro: Routing) -> None:
    """MoE runs: the flip rate per MoE layer (completion and prompt rows apart), and what flipped tokens cost."""
    if ro.route_flip_rate_by_layer is None:
        absent = ro.sides.absent()
        console.print(
            f"[dim]Routing: no flip rates, routes missing for the {', '.join(absent)}.[/dim]", highlight=False
        )
        return
    t = Table(
        title=f"MoE routing: top-{ro.top_k} sets that differ between the sides ({ro.family}, "
        f"{ro.num_experts} experts{', replayed ' + ro.replay if ro.replay else ''})",
        title_justify="left",
    )
    from ..analysis.routing_report import ROUTING_COLUMNS

    for col in ROUTING_COLUMNS:
        t.add_column(col, justify="right")
    for c, p in zip(ro.route_flip_rate_by_layer, ro.prompt_route_flip_rate_by_layer or []):
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
    gap = ro.abs_logprob_diff
    if gap:
        console.print(
            f"|log p - log q| on flipped tokens {num(gap.flipped_mean)} ({gap.flipped_tokens:,}), on "
            f"unflipped {num(gap.unflipped_mean)} ({gap.unflipped_tokens:,}); routing's share of the "
            f"gap (sum |log p - log q| on flipped / on all tokens): {pct(ro.routing_share_of_gap)}"
            + (
                f"; {gap.tokens_without_routes:,} token(s) without a compared route"
                if gap.tokens_without_routes
                else ""
            ),
            highlight=False,
        )
    if ro.by_trainer_margin:
        m = Table(
            title="Flips by the trainer's router margin (k-th minus (k+1)-th score, completion rows, per layer)",
            title_justify="left",
        )
        for col in ("margin", "compared", "flipped", "flip rate"):
            m.add_column(col, justify="left" if col == "margin" else "right")
        for r in ro.by_trainer_margin:
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
    t = Table(title=f"Worst sequences (by {RANKINGS[by][0]}; traces with --plots)", title_justify="left")
    shown = by not in ("k3_sum", "tv_max")  # those two are columns anyway
    cols = [
        "rank",
        "sequence",
        *(["prompt"] if prompts else []),
        "tokens",
        *([by] if shown else []),
        "sum k3",
        "max |p - q|",
        "largest gap at",
        "token",
        "gap l there",
    ]
    for col in cols:
        t.add_column(col, justify="right")
    for r in rows:
        ident = lambda v: "-" if v is None else str(v)  # noqa: E731  ids print as written, no thousands separator
        t.add_row(
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
        )
    print_table(console, t)


def masks_tables(console, result, examples: int) -> None:
    mk = result.masks
    has_sign = any(r.rejected_by_advantage_sign for r in mk.rules)
    t = Table(title="What each rule would reject or reweight", title_justify="left")
    for col in (
        "rule",
        "level",
        "hyp.",
        "tok. rejected",
        "%",
        "tok. reweighted",
        "%",
        "seq. rejected",
        "seq. w/ rejection",
    ):
        t.add_column(col, justify="right" if col not in ("rule", "level", "hyp.") else "left")
    if has_sign:
        t.add_column("rejected A>0 / A<0 / A=0", justify="right")
    routed = mk.route_flipped_tokens is not None
    if routed:
        t.add_column(f"flipped rejected (of {mk.route_flipped_tokens:,})", justify="right")
    for r in mk.rules:
        cells = [
            r.name,
            r.level,
            r.hypothesis,
            num(r.tokens_rejected),
            pct(r.token_reject_rate),
            num(r.tokens_reweighted),
            pct(r.token_reweight_rate),
            num(r.sequences_rejected if r.level == "sequence" else None),
            num(r.sequences_with_rejection),
        ]
        if has_sign:
            s = r.rejected_by_advantage_sign
            cells.append(f"{s['A>0']:,} / {s['A<0']:,} / {s['A=0']:,}" if s else "")
        if routed:
            cells.append(num(r.route_flipped_rejected))
        t.add_row(*cells, style="dim" if r.hypothesis == "mean" else None)
    print_table(console, t)
    parameters(console, {r.name: r.params for r in mk.rules})
    if any(r.hypothesis != "data" for r in mk.rules):
        console.print(
            "[dim]No advantage column: advantage-dependent rules are shown as hypotheses, as if every A > 0, "
            "every A < 0, and their mean. dppo-* put A == 0 on the negative branch (reference code).[/dim]"
        )

    tails_table(console, mk)

    # pairs where one rule rejects nothing carry no information about disagreement
    agree = [a for a in mk.agreement if (a.both + a.only_a) > 0 and (a.both + a.only_b) > 0]
    if not agree:
        console.print(
            "[dim]Agreement: fewer than two rules reject anything here, so there is no overlap to compare.[/dim]"
        )
    if agree:
        agree.sort(key=lambda a: a.jaccard if a.jaccard is not None else 2.0)
        shown = agree[:25]
        g = Table(title="Agreement between rejecting rules (token sets; most disagreement first)", title_justify="left")
        for col in ("rule a", "rule b", "both", "only a", "only b", "Jaccard"):
            g.add_column(col, justify="left" if col.startswith("rule") else "right")
        for a in shown:
            g.add_row(a.a, a.b, num(a.both), num(a.only_a), num(a.only_b), num(a.jaccard, 3))
        print_table(console, g)
        if len(agree) > len(shown):
            console.print(f"[dim]{len(agree) - len(shown)} more pairs in --format json[/dim]")

    for sw in mk.sweeps:
        s = Table(title=f"Sweep {sw.rule}.{sw.param} ({sw.level} level)", title_justify="left")
        for col in (sw.param, "hyp.", "token reject rate", "token reweight rate", "seq. w/ rejection"):
            s.add_column(col, justify="right")
        for p in sw.points:
            s.add_row(
                num(p.value),
                p.hypothesis,
                pct(p.token_reject_rate),
                pct(p.token_reweight_rate),
                num(p.sequences_with_rejection),
            )
        print_table(console, s)

    if examples and not mk.examples:
        console.print("[dim]No token on which the token-level rejecting rules disagree.[/dim]")
    elif examples:
        e = Table(
            title=f"Tokens the rules disagree on most (largest |log p - log q|, top {examples})", title_justify="left"
        )
        for col in ("sequence", "position", "token", "p", "q", "log p/q", "rejected by", "kept by"):
            e.add_column(
                col, justify="right" if col in ("sequence", "position", "token", "p", "q", "log p/q") else "left"
            )
        for x in mk.examples:
            e.add_row(
                str(x.sequence_id),
                str(x.position),
                str(x.token_id),
                num(x.p),
                num(x.q),
                num(x.log_ratio),
                ", ".join(x.rejected_by),
                ", ".join(x.kept_by),
            )
        print_table(console, e)


def parameters(console, params: dict[str, dict[str, Any]]) -> None:
    """Each rule's parameters once, under its table: one line a rule, aligned after its name."""
    width = max(map(len, params), default=0)
    console.print("parameters:", highlight=False)
    for name, ps in params.items():
        text = ", ".join(f"{k}={num(v) if v is not None else 'off'}" for k, v in ps.items())
        console.print(f"  {name:<{width}}  {text}", highlight=False)


def tails_table(console, mk: MasksResult) -> None:
    """Which tail each rejecting rule cuts: its rejections by sampler-probability bucket and by sign of p - q."""
    rows = [r for r in mk.rules if r.rejected_by_sampler_prob is not None and r.hypothesis != "mean"]
    if not rows:
        return
    buckets = list(mk.tokens_by_sampler_prob)
    t = Table(
        title="Which tail each rule cuts: rejected tokens by sampler probability q, and by sign of p - q",
        title_justify="left",
    )
    t.add_column("rule")
    t.add_column("hyp.")
    for b in buckets:
        t.add_column(f"q in {b}", justify="right")
    t.add_column("p>q", justify="right")
    t.add_column("p<q", justify="right")
    t.add_row(
        "[dim]all tokens[/dim]",
        "",
        *[f"[dim]{num(mk.tokens_by_sampler_prob[b])}[/dim]" for b in buckets],
        f"[dim]{num(mk.tokens_by_pq_sign['p>q'])}[/dim]",
        f"[dim]{num(mk.tokens_by_pq_sign['p<q'])}[/dim]",
    )
    for r in rows:
        by_q, by_s = r.rejected_by_sampler_prob or {}, r.rejected_by_pq_sign or {}
        t.add_row(r.name, r.hypothesis, *[num(by_q[b]) for b in buckets], num(by_s["p>q"]), num(by_s["p<q"]))
    print_table(console, t)
    if mk.tail_reading:
        console.print(mk.tail_reading, highlight=False)
