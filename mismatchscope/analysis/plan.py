"""What the analysis pass will do, decided once before its first batch.

A request (what the caller wants: report, rules, sweeps, examples) meets the
input (which columns its files have, whether its run recorded routes) here,
and becomes a frozen :class:`AnalysisPlan`: the columns to read, the
per-sequence reductions, the rule units and the run's routes, located. The
pass (``engine.analyse``) and its per-batch function (``batch.analyse_batch``)
only consume the plan; nothing in them opens a file to decide what to do.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from ..reader import Source, open_source
from ..routing.io import RoutesRun, locate_routes
from ..rules import RuleInstance
from ..rules.sequence import needs_inverse_k3
from ..schema import TOPK_COLUMNS
from .grouping import Op
from .masks import ROUTE_FLIPPED, MaskAccumulator, Unit, build_units
from .table import REDUCTIONS


@dataclass
class AnalysisRequest:
    report: bool = True
    rules: list[RuleInstance] = field(default_factory=list)
    """rules for compare-masks; empty with ``masks=False``."""
    masks: bool = False
    sweeps: list[tuple[str, str, list[RuleInstance]]] = field(default_factory=list)
    examples: int = 0
    routing: bool = True
    """read the run's ``routes/`` (MoE runs) for the report's routing entry and the rules' flipped counts; a
    caller that needs neither (the gate without a routing limit) skips reading them."""
    also_read: tuple[str, ...] = ()
    """schema columns read besides the outputs' own, when the file has them, so an ``on_terms`` caller
    (``doctor``) sees them in its batches without a pass of its own."""
    batch_rows: int = 1 << 17
    """rows a worker analyses at once: large enough that numpy's per-call overhead (a rule is a dozen
    calls) stays small beside the work, small enough that a batch's temporaries stay near the cache."""


TRAINER_TOPK = ("trainer_topk_ids",)
"""the trainer's own top-k the report reads: its ids feed the overlap. Its logprobs feed no number, so they
are not read (decoding them would cost a probe run's report 10-15%), and what no number uses cannot
make one wrong."""


@dataclass(frozen=True)
class AnalysisPlan:
    """The request held against the input: everything the pass needs, fixed before it starts."""

    path: str
    source: Source
    columns: tuple[str, ...]
    """what the pass reads besides the required columns."""
    ops: Mapping[str, Op]
    """per-sequence reduction of each per-token value a batch hands the fold."""
    units: tuple[Unit, ...]
    """compare-masks' rule units (a rule under each advantage hypothesis, sweeps included); empty without masks."""
    report: bool
    masks: bool
    examples: int
    has_advantage: bool
    has_topk: bool
    clamped: bool
    """a sequence rule sums its estimators over the log-ratio clamped to +-20 (verl's rejection sampling)."""
    inverse_k3: bool
    """a sequence rule needs k3 in AReaL's orientation."""
    routes: RoutesRun | None
    """the run's route shards and their manifest entry, located; None for a dense run or one not asked."""
    routes_note: str | None
    """why routes exist but are not used (several runs with routes in one input)."""
    batch_rows: int

    @property
    def joins_routes(self) -> bool:
        """Both sides recorded routes: the token pass joins each token to its flip flags."""
        return self.routes is not None and self.routes.both_sides


def make_plan(path: str, request: AnalysisRequest, mapping: dict[str, str] | None = None) -> AnalysisPlan:
    """Open the input once and decide the pass: columns, reductions, rule units, routes (located, not yet read)."""
    source = open_source(path, mapping)
    has_adv = source.has("advantage")
    has_topk = all(source.has(c) for c in TOPK_COLUMNS)
    units = tuple(build_units(request.rules, request.sweeps, has_adv)) if request.masks else ()
    seq_rules = [u.rule for u in units if u.rule.level == "sequence"]
    wants_routes = request.routing and (request.report or request.masks)
    routes, note = locate_routes(source.files) if wants_routes else (None, None)
    clamped = any(r.spec.fixed_level is None for r in seq_rules)
    inverse_k3 = needs_inverse_k3(seq_rules)
    flipped = request.masks and routes is not None and routes.both_sides
    return AnalysisPlan(
        path=path,
        source=source,
        columns=_columns(source, request, has_adv, has_topk),
        ops=MappingProxyType(_ops(units if request.masks else None, has_adv, clamped, inverse_k3, flipped)),
        units=units,
        report=request.report,
        masks=request.masks,
        examples=request.examples,
        has_advantage=has_adv,
        has_topk=has_topk,
        clamped=clamped,
        inverse_k3=inverse_k3,
        routes=routes,
        routes_note=note,
        batch_rows=request.batch_rows,
    )


def _columns(source: Source, request: AnalysisRequest, has_adv: bool, has_topk: bool) -> tuple[str, ...]:
    """The columns the requested outputs read, each once, in the order the pass has always read them."""
    columns = ["advantage"] if has_adv else []  # the per-sequence aggregator always sums it
    if request.masks and request.examples:
        columns += ["token_id"]
    if request.report:
        columns += ["trainer_entropy", "sampler_kept_logmass"]
        if has_topk:
            columns += ["token_id", *TOPK_COLUMNS] + [c for c in TRAINER_TOPK if source.has(c)]
    columns += [c for c in request.also_read if source.has(c) and c not in columns]
    return tuple(columns)


def _ops(
    units: tuple[Unit, ...] | None, has_adv: bool, clamped: bool, inverse_k3: bool, flipped: bool
) -> dict[str, Op]:
    """Each per-token value's per-sequence reduction: the table's own, then what the rules add.

    ``units``: None without compare-masks; ``flipped``: the rules count the tokens whose routes flipped.
    """
    ops: dict[str, Op] = dict(REDUCTIONS)
    if has_adv:
        ops["sum_adv"] = "sum"
    if inverse_k3:  # k3-seq in AReaL's orientation
        ops["sum_k3inv"] = "sum"
    if clamped:  # verl-rs sums its estimators over l clamped to +-20
        ops.update({"sum_ck1": "sum", "sum_ck2": "sum", "sum_ck3": "sum"})
    if units is not None:
        ops.update(dict.fromkeys(MaskAccumulator(list(units), 0).per_token_columns(), "sum"))
    if flipped:
        ops[ROUTE_FLIPPED] = "sum"
    return ops
