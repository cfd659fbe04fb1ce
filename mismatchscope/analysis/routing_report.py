"""The ``routing`` entry of ``report``, and the warnings about a run's routes, from a :class:`~.routing.RoutingScan`.

Flip rates are per MoE layer, named by decoder-layer index, completion rows
and prompt rows apart; ``route_flip_rate`` is the share of completion tokens
flipped in some layer where both sides have a capture. What the terminal,
the HTML page and the gate read.
"""

from __future__ import annotations

import numpy as np

from ..routing.layout import SIDES, RoutingMeta
from .results import FlipGap, LayerFlipRate, MarginBucket, MissingCaptures, RouteSide, RouteSides, Routing
from .route_columns import MARGIN_EDGES
from .route_join import GapTally
from .route_scan import LayerFlips, RoutingScan

MOST_MISSING = 0.5
"""a recorded side with more than this share of its MoE-layer entries missing is warned about loudly."""


def _rate(num: int | np.integer, den: int | np.integer) -> float | None:
    return float(num) / float(den) if den else None


def _by_layer(meta: RoutingMeta, lf: LayerFlips) -> list[LayerFlipRate]:
    return [
        LayerFlipRate(layer=int(layer), flip_rate=_rate(f, c), compared=int(c), flipped=int(f))
        for layer, c, f in zip(meta.moe_layers, lf.compared, lf.flipped, strict=True)
    ]


ROUTING_COLUMNS = (
    "decoder layer",
    "completion flip rate",
    "flipped / compared",
    "prompt flip rate",
    "flipped / compared",
)
"""the per-layer routing table's columns, in the terminal and on the HTML page."""


def margin_labels() -> list[str]:
    edges = list(MARGIN_EDGES)
    return [f"[{lo:g}, {hi:g})" for lo, hi in zip(edges[:-1], edges[1:], strict=False)] + [f">= {edges[-1]:g}"]


def routing_section(scan: RoutingScan, gap: GapTally | None) -> Routing:
    """The report's ``routing`` entry: flip rates per MoE layer (completion and prompt rows apart), the share of
    tokens flipped in any layer, |log p - log q| on flipped vs unflipped tokens, flips by router margin."""
    meta = scan.meta
    sides = {s: RouteSide(recorded=getattr(meta, s).recorded, why=getattr(meta, s).why) for s in SIDES}
    out = Routing(
        family=meta.family,
        num_layers=meta.num_layers,
        moe_layers=list(meta.moe_layers),
        num_experts=meta.num_experts,
        top_k=meta.top_k,
        replay=meta.replay,
        sides=RouteSides(**sides),
        rows=scan.entries // len(meta.moe_layers),
        missing_captures=MissingCaptures(**scan.missing, entries=scan.entries),
    )
    if not scan.both_sides:
        return out
    c, p = scan.completion, scan.prompt
    out.route_flip_rate = _rate(c.rows_flipped, c.rows_compared)
    out.tokens_compared = c.rows_compared
    out.tokens_flipped = c.rows_flipped
    out.route_flip_rate_by_layer = _by_layer(meta, c)
    out.prompt_route_flip_rate = _rate(p.rows_flipped, p.rows_compared)
    out.prompt_rows_compared = p.rows_compared
    out.prompt_rows_flipped = p.rows_flipped
    out.prompt_route_flip_rate_by_layer = _by_layer(meta, p)
    if gap is not None:
        out.abs_logprob_diff = _flip_gap(gap)
        out.routing_share_of_gap = _rate_f(gap.flipped_abs_l, gap.total_abs_l)
    if scan.has_margin:
        out.by_trainer_margin = [
            MarginBucket(bucket=b, compared=int(n), flipped=int(f), flip_rate=_rate(f, n))
            for b, n, f in zip(margin_labels(), scan.margin_compared, scan.margin_flipped, strict=True)
        ]
    return out


def _flip_gap(gap: GapTally) -> FlipGap:
    """|log p - log q| on flipped and on unflipped tokens, and how many tokens had no compared route."""
    return FlipGap(
        flipped_mean=_rate_f(gap.flipped_abs_l, gap.flipped_n),
        flipped_tokens=gap.flipped_n,
        unflipped_mean=_rate_f(gap.unflipped_abs_l, gap.unflipped_n),
        unflipped_tokens=gap.unflipped_n,
        tokens_without_routes=gap.unrouted_n,
    )


def _rate_f(num: float, den: float) -> float | None:
    return num / den if den else None


def routing_warnings(scan: RoutingScan) -> list[str]:
    """Missing captures (always counted), loudly when most of a side's entries are missing; a side not recorded."""
    out = []
    for s, n in scan.missing.items():
        if not n:
            continue
        share = n / scan.entries if scan.entries else 0.0
        if share > MOST_MISSING:
            out.append(
                f"MOST {s.upper()} ROUTES ARE MISSING: {n:,} of {scan.entries:,} MoE-layer entries are null or "
                f"all zeros ({100 * share:.3g}%): the capture failed (an engine's parallel layout can write "
                "zeros silently); the flip rates below rest on the rest only"
            )
        else:
            out.append(
                f"{n:,} of {scan.entries:,} {s} MoE-layer route entries are null or all zeros: missing "
                "captures, left out of the flip rates (never read as expert 0)"
            )
    for s in SIDES:
        side = getattr(scan.meta, s)
        if not side.recorded:
            out.append(f"no {s} routes in this run ({side.why or 'not recorded'}): no flip rates")
    return out
