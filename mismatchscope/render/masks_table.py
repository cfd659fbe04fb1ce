"""``compare-masks``' terminal output: one function per section, in the order the command prints them.

The numbers come typed from :class:`~mismatchscope.analysis.results.MasksResult`;
cells are formatted by :mod:`mismatchscope.formatting`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.table import Table

from ..analysis.results import MasksResult, RuleRow
from ..formatting import num, pct
from .layout import print_table
from .run_header import parameters

if TYPE_CHECKING:
    from ..reporting import MasksDocument

AGREEMENT_SHOWN = 25
"""rule pairs the agreement table lists (most disagreement first); the JSON has every pair."""
HYPOTHESIS_LEGEND = (
    "hyp.: the advantages a rule's count assumes: data, the run's own (or none needed); A>0 or A<0, every "
    "advantage of that sign (the run records none); mean, the mean of the two"
)
RIGHT_EXAMPLE_COLUMNS = ("sequence", "position", "token", "p", "q", "log p/q")
"""the example table's number columns, right-aligned."""


def render(console, doc: MasksDocument) -> None:
    """The input's header line, then every table of compare-masks."""
    from .run_header import header

    header(console, doc.analysis)
    masks_tables(console, doc.masks, doc.examples)


def masks_tables(console, mk: MasksResult, examples: int) -> None:
    rules_table(console, mk)
    parameters(console, {r.name: r.params for r in mk.rules})
    if any(r.hypothesis != "data" for r in mk.rules):
        console.print(
            "[dim]No advantage column: advantage-dependent rules are shown as hypotheses, as if every A > 0, "
            "every A < 0, and their mean. dppo-* put A == 0 on the negative branch (reference code).[/dim]"
        )
    tails_table(console, mk)
    if mk.tokens_by_turn is not None:
        turns_table(console, mk)
    agreement_table(console, mk)
    sweep_tables(console, mk)
    if examples:
        examples_table(console, mk, examples)


def rules_table(console, mk: MasksResult) -> None:
    """What each rule would reject or reweight, in tokens and sequences."""
    has_sign = any(r.rejected_by_advantage_sign for r in mk.rules)
    routed = mk.route_flipped_tokens is not None
    t = Table(title="What each rule would reject or reweight", title_justify="left")
    for col in ("rule", "level", "hyp."):
        t.add_column(col, justify="left")
    for col in ("tok. rejected", "%", "tok. reweighted", "%", "seq. rejected", "seq. w/ rejection"):
        t.add_column(col, justify="right")
    if has_sign:
        t.add_column("rejected A>0 / A<0 / A=0", justify="right")
    if routed:
        t.add_column(f"flipped rejected (of {mk.route_flipped_tokens:,})", justify="right")
    for r in mk.rules:
        t.add_row(*_rule_cells(r, has_sign, routed), style="dim" if r.hypothesis == "mean" else None)
    print_table(console, t)
    console.print(HYPOTHESIS_LEGEND, highlight=False, markup=False)


def _rule_cells(r: RuleRow, has_sign: bool, routed: bool) -> list[str]:
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
    return cells


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
    print_table(console, t, together=(("p>q", "p<q"),))
    if mk.tail_reading:
        console.print(mk.tail_reading, highlight=False)


def turns_table(console, mk: MasksResult) -> None:
    """``--by turn``: each rule's rejected (or reweighted) tokens in each turn of a multi-turn run."""
    by_turn = mk.tokens_by_turn or {}
    t = Table(title="Rejected tokens by turn (reweighted, for a reweighting rule)", title_justify="left")
    t.add_column("rule")
    t.add_column("hyp.")
    for k in by_turn:
        t.add_column(f"turn {k}", justify="right")
    t.add_row("[dim]all tokens[/dim]", "", *[f"[dim]{num(v)}[/dim]" for v in by_turn.values()])
    for r in mk.rules:
        counts = r.rejected_by_turn if r.action == "reject" else r.reweighted_by_turn
        t.add_row(r.name, r.hypothesis, *[num((counts or {}).get(k)) for k in by_turn])
    print_table(console, t)


def agreement_table(console, mk: MasksResult) -> None:
    """How far the rejecting rules' token sets overlap, most disagreement first."""
    # pairs where one rule rejects nothing carry no information about disagreement
    agree = [a for a in mk.agreement if (a.both + a.only_a) > 0 and (a.both + a.only_b) > 0]
    if not agree:
        console.print(
            "[dim]Agreement: fewer than two rules reject anything here, so there is no overlap to compare.[/dim]"
        )
        return
    agree.sort(key=lambda a: a.jaccard if a.jaccard is not None else 2.0)
    shown = agree[:AGREEMENT_SHOWN]
    g = Table(title="Agreement between rejecting rules (token sets; most disagreement first)", title_justify="left")
    for col in ("rule a", "rule b", "both", "only a", "only b", "Jaccard"):
        g.add_column(col, justify="left" if col.startswith("rule") else "right")
    for a in shown:
        g.add_row(a.a, a.b, num(a.both), num(a.only_a), num(a.only_b), num(a.jaccard, 3))
    print_table(console, g)
    if len(agree) > len(shown):
        console.print(f"[dim]{len(agree) - len(shown)} more pairs in --format json[/dim]")


def sweep_tables(console, mk: MasksResult) -> None:
    """Each ``--sweep``: the reject and reweight rates along the swept parameter."""
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


def examples_table(console, mk: MasksResult, examples: int) -> None:
    """``--examples N``: the tokens the rules disagree on most, and which rules reject and keep each."""
    if not mk.examples:
        console.print("[dim]No token on which the token-level rejecting rules disagree.[/dim]")
        return
    e = Table(
        title=f"Tokens the rules disagree on most (largest |log p - log q|, top {examples})", title_justify="left"
    )
    for col in (*RIGHT_EXAMPLE_COLUMNS, "rejected by", "kept by"):
        e.add_column(col, justify="right" if col in RIGHT_EXAMPLE_COLUMNS else "left")
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
