"""``routing_replay``: a routing replay the run declares that did nothing, or not everywhere.

Under replay the trainer routes each token through the sampler's experts, so
no token's experts differ in any layer, unless the stack replaces some replayed
experts on purpose (prime-rl's score threshold) and says at what rate: then
the flips must come at that rate (a rate far from it is ``replay_invalid``'s).
Read from the report's routing section (routes of both sides); its share of
the gap is what the flipped tokens carry above the unflipped ones.
"""

from __future__ import annotations

from ...metrics import ROUTE_FLIP_RATE
from ..document import Evidence, ExplainedShare, Finding
from ..findings import clear, detected, g, model_share, not_checked, pct
from ..registry import Cause, Context

REPLACE_MATCH = 0.02
"""flips within this (absolute) of a declared replace rate are the replace rate at work."""


def declared_replace_rate(ctx: Context) -> float | None:
    """The share of replayed experts the stack says it replaced on purpose (the manifest's
    ``routing.replace_rate``, or the run's ``semantics.router_replay_replace_rate``), or None."""
    holders: list[tuple[object, str]] = [((ctx.run or {}).get("semantics"), "router_replay_replace_rate")]
    if ctx.routes is not None:
        from ... import rundir

        manifest = rundir.read_manifest(ctx.routes.root) or {}
        holders.append((manifest.get("routing"), "replace_rate"))
        holders.append((manifest.get("semantics"), "router_replay_replace_rate"))
    for holder, key in holders:
        v = holder.get(key) if isinstance(holder, dict) else None
        if isinstance(v, (int, float)) and not isinstance(v, bool) and 0 <= v <= 1:
            return float(v)
    return None


def detect(ctx: Context) -> Finding:
    r = ctx.report.routing
    if r is None:
        return not_checked("routing_replay", ["routes/ with both sides' experts (MoE runs)"])
    if not r.replay:
        return clear("routing_replay", "no routing replay declared: flips are expected")
    if r.route_flip_rate is None:
        return not_checked("routing_replay", ["both sides' routes"])
    ev = [Evidence("tokens whose experts differ in some layer, under replay", r.route_flip_rate, "0 (replayed)")]
    if r.route_flip_rate == 0:
        return clear("routing_replay", "the replay held: the trainer routed every token as the sampler did", ev)
    declared = declared_replace_rate(ctx)
    if declared is not None and abs(r.route_flip_rate - declared) <= REPLACE_MATCH:
        return clear(
            "routing_replay",
            f"flips at {pct(r.route_flip_rate)}, the replace rate the run declares ({pct(declared)})",
            ev,
        )
    layers = [x for x in (r.route_flip_rate_by_layer or []) if x.flip_rate]
    where = ", ".join(f"layer {x.layer} {pct(x.flip_rate)}" for x in layers[:6])
    return detected(
        "routing_replay",
        f"the run says routes were replayed ({r.replay}), yet {pct(r.route_flip_rate)} of tokens route "
        f"differently" + (f" ({where})" if where else "") + ": the replay did nothing, or not everywhere",
        ev,
        {ROUTE_FLIP_RATE.name: r.route_flip_rate},
        "high",
        "check that the trainer's MoE layers take the replayed routes (the hook is installed, on every layer)",
    )


def share(ctx: Context, f: Finding) -> ExplainedShare | None:
    """What the flipped tokens carry of the summed |gap| above what unflipped tokens show."""
    r = ctx.report.routing
    gap = r.abs_logprob_diff if r is not None else None
    total = ctx.report.metrics.abs_logprob_diff_mean
    if gap is None or gap.flipped_mean is None or gap.unflipped_mean is None or not total:
        return None
    excess = (gap.flipped_mean - gap.unflipped_mean) * gap.flipped_tokens / (total * ctx.report.tokens)
    return model_share(
        None,
        max(0.0, min(1.0, excess)),
        "the gap",
        f"flipped tokens' |gap| ({g(gap.flipped_mean)}) above unflipped ones' ({g(gap.unflipped_mean)}), summed",
    )


CAUSE = Cause(
    "routing_replay",
    detect,
    share=share,
    correction="the flipped tokens' excess gap (from the routes)",
    sample_scope=False,
)
