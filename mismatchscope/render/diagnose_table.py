"""``diagnose`` for people: its tables section by section, from the typed document (``--format json`` prints its
serialisation); the localisation's tables are :mod:`.locate_table`'s, shared with ``rescore --locate``."""

from __future__ import annotations

from dataclasses import fields
from typing import TYPE_CHECKING

from ..diagnose.document import (
    AbsentRoutes,
    Baseline,
    Gap,
    Routes,
    RoutesAgainstReference,
    SelfConsistency,
    SideFlips,
    Timing,
    VariantOk,
    VariantThroughput,
)
from ..diagnose.effects import PRIMARY
from ..formatting import num, pct
from ..metrics import ABS_LOGPROB_DIFF_MAX, ABS_LOGPROB_DIFF_MEAN, K3_MEAN, TV_TOKEN_MEAN

if TYPE_CHECKING:
    from ..diagnose.document import Determinism, DiagnoseDocument, Repeatability, Throughput


def render(console, doc: DiagnoseDocument) -> None:
    """The diagnose tables, section by section, then (``--locate``) each configuration's localisation."""
    _header(console, doc)
    _decomposition(console, doc)
    _variants(console, doc)
    _determinism(console, doc.determinism)
    _cost(console, doc)
    _conclusion(console, doc)
    if doc.locate:
        from .locate_table import render_all

        render_all(console, doc.locate)


def _header(console, doc: DiagnoseDocument) -> None:
    console.print(f"diagnose {doc.checkpoint} | device {doc.device} | reference: {doc.reference.note}", highlight=False)
    b = doc.baseline
    console.print(
        f"baseline: sampler {b.sampler.kind}/{b.sampler.dtype}, "
        f"trainer {b.trainer['dtype']}"
        f" | {b.throughput.costs.tokens:,} tokens | run {b.run_dir}",
        highlight=False,
    )


def _decomposition(console, doc: DiagnoseDocument) -> None:
    """The four gaps on identical tokens, their run directories, the error budget and the route flips."""
    from rich.table import Table

    from .layout import print_table

    t = Table(title="Decomposition (identical tokens; the metrics of `report` on each pair)", title_justify="left")
    for c in ("gap", "|log p - log q| mean", "max", "tv_token mean", "k3 mean"):
        t.add_column(c, justify="left" if c == "gap" else "right")
    dec = doc.decomposition
    dirs = []
    for name in ("total", "sampler_vs_reference", "trainer_vs_reference", "sampler_decode_vs_prefill"):
        g = getattr(dec, name)
        gap = g.gap if isinstance(g, SelfConsistency) else g
        if not isinstance(gap, Gap):  # skipped
            t.add_row(name, "skipped", "", "", "")
            dirs.append(f"  {name}: skipped ({gap.reason})")
            continue
        m = gap.metrics
        keys = (ABS_LOGPROB_DIFF_MEAN, ABS_LOGPROB_DIFF_MAX, TV_TOKEN_MEAN, K3_MEAN)
        t.add_row(name, *(num(getattr(m, k.name)) for k in keys))
        dirs.append(f"  {name}: {gap.run_dir}")
    print_table(console, t)
    console.print("run directories:\n" + "\n".join(dirs), highlight=False)
    s = dec.shares
    console.print(
        f"error budget: sampler share {pct(s.sampler_share)}, trainer share {pct(s.trainer_share)}, "
        f"correlation {num(s.correlation)} (mean e_s^2 {num(s.sampler_mse)}, mean e_t^2 {num(s.trainer_mse)})",
        highlight=False,
    )
    _routes(console, dec.routes)
    note = getattr(dec.sampler_decode_vs_prefill, "note", None)
    if note:
        console.print(f"[dim]{note}[/dim]")


_VARIANT_COLUMNS = (
    "variant",
    "side",
    "gap",
    "change",
    "95% interval",
    "signif.",
    "bootstrap",
    "tokens changed",
    "sampler share",
    "throughput",
)


def _variants(console, doc: DiagnoseDocument) -> None:
    """The variants ranked by their effect on the total gap; the ones that did not run, and why."""
    from rich.table import Table

    from .layout import print_table

    t = Table(
        title="Variants, ranked by effect on the total gap (|log p - log q| mean; variant - baseline)",
        title_justify="left",
    )
    for c in _VARIANT_COLUMNS:
        t.add_column(c, justify="left" if c in ("variant", "side", "bootstrap", "signif.") else "right")
    for v in doc.variants:
        if not isinstance(v, VariantOk):
            t.add_row(v.name, v.side, v.status, "", "", "", "", "", "", "", style="dim")
            continue
        t.add_row(*_variant_cells(v))
    print_table(console, t)
    for v in doc.variants:
        if not isinstance(v, VariantOk):
            console.print(f"  {v.name}: {v.status}: {v.reason}", highlight=False)
    if doc.no_effect:
        console.print(f"change nothing (no significant effect): {', '.join(doc.no_effect)}", highlight=False)


def _variant_cells(v: VariantOk) -> list[str]:
    d = v.delta[PRIMARY]
    return [
        v.name,
        v.side,
        num(getattr(v.metrics, PRIMARY)),
        num(d.estimate),
        f"[{num(d.ci_low)}, {num(d.ci_high)}]",
        "yes" if d.significant else "no",
        d.bootstrap,
        pct(v.tokens_changed_share),
        pct(v.decomposition.sampler_share),
        _ratio(v.throughput),
    ]


def _checks(determinism: Determinism) -> list[tuple[str, Repeatability]]:
    """The determinism checks that ran, by name, in the document's order."""
    return [(f.name, getattr(determinism, f.name)) for f in fields(determinism) if getattr(determinism, f.name)]


def _determinism(console, determinism: Determinism) -> None:
    from rich.table import Table

    from .layout import print_table

    ran = _checks(determinism)
    if not ran:
        return
    t = Table(title="Determinism and batch invariance (bits as the engines returned them)", title_justify="left")
    for c in ("check", "tokens", "tokens identical", "logprobs bit-identical", "largest |diff|", "compared"):
        t.add_column(c, justify="left" if c in ("check", "compared") else "right")
    for name, d in ran:
        t.add_row(
            name,
            num(d.tokens),
            pct(d.share_tokens_identical),
            pct(d.share_logprobs_bit_identical),
            num(d.max_abs_diff),
            d.compared,
        )
    print_table(console, t)


_COST_COLUMNS = (
    "configuration",
    "sampler tok/s",
    "trainer tok/s",
    "pipeline tok/s",
    "x baseline",
    "rounds",
    "start-up s",
    "wall s",
    "Pareto",
    "certified",
)


def _cost(console, doc: DiagnoseDocument) -> None:
    """Each configuration's throughput, its ratio to the baseline's, the Pareto front and certification."""
    from rich.table import Table

    from .layout import print_table

    t = Table(title="Cost per configuration (start-up excluded from throughput)", title_justify="left")
    for c in _COST_COLUMNS:
        t.add_column(c, justify="left" if c == "configuration" else "right")
    rows: list[tuple[str, Baseline | VariantOk]] = [("baseline", doc.baseline)]
    rows += [(v.name, v) for v in doc.variants if isinstance(v, VariantOk)]
    for name, rec in rows:
        tp = rec.throughput
        t.add_row(
            name,
            num(tp.costs.sampler_tokens_per_s),
            num(tp.costs.trainer_tokens_per_s),
            num(tp.pipeline_tokens_per_s),
            "1x" if name == "baseline" else _ratio(tp),
            _rounds(tp.timing if isinstance(tp, VariantThroughput) else None),
            num(tp.costs.startup_s),
            num(tp.costs.wall_s),
            "*" if name in doc.pareto_front else "",
            "yes" if rec.certified else "no",
        )
    print_table(console, t)
    console.print(
        "x baseline: pipeline throughput over the baseline's, the median of interleaved rounds (baseline, "
        "variant, ...) of the same work; rounds: their number and range. Throughput columns are one "
        "measurement each, minutes apart.",
        highlight=False,
    )


def _conclusion(console, doc: DiagnoseDocument) -> None:
    """The price of zero mismatch (one line per certified configuration), the reading, the output folder."""
    from ..diagnose.price import price_line

    for entry in doc.zero_price:
        console.print(price_line(entry), highlight=False)
    console.print(f"\n{doc.reading}", highlight=False)
    console.print(
        f"\noutput directory: {doc.out} (every run directory above works with report, compare-masks and gate)",
        highlight=False,
    )


def _ratio(tp: Throughput | VariantThroughput) -> str:
    rel = tp.relative_to_baseline if isinstance(tp, VariantThroughput) else None
    if rel is None:
        return "-"
    rankable = tp.timing.rankable if isinstance(tp, VariantThroughput) and tp.timing is not None else True
    return f"{rel:.2f}x" + ("" if rankable else " (!)")


def _rounds(timing: Timing | None) -> str:
    if not timing:
        return "-"
    return f"{timing.rounds}: {timing.low:.2f}-{timing.high:.2f}x"


def _routes(console, r: Routes) -> None:
    """One line per side: its route flips against the reference's routes, layer by layer (MoE only)."""
    if isinstance(r, AbsentRoutes) and r.layers:
        console.print(f"route flips against the reference: not measured ({r.reason})", highlight=False)
    if not isinstance(r, RoutesAgainstReference) or not r.layers:
        return
    layers = r.layers
    for side, f in (("sampler", r.sampler), ("trainer", r.trainer)):
        if isinstance(f, SideFlips):
            by_layer = ", ".join(f"{layer}: {pct(x)}" for layer, x in zip(layers, f.flip_rate_per_layer, strict=True))
            console.print(
                f"{side} route flips against the reference: {pct(f.flipped_any_layer)} of tokens in any "
                f"layer (by layer {by_layer})",
                highlight=False,
            )
        else:
            console.print(f"{side} route flips against the reference: not measured ({f.reason})", highlight=False)
