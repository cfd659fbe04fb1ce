"""What the analysis pass will do, decided once before its first batch.

A request (what the caller wants: report, rules, sweeps, examples) meets the
input (which columns its files have, whether its run recorded routes) once,
in ``engine.make_plan``, and becomes a frozen :class:`AnalysisPlan`: the
columns to read, the per-sequence reductions, the rule units and the run's
routes, located. The pass and its per-batch function
(``batch.analyse_batch``) only consume the plan; nothing in them opens a
file to decide what to do. This module says how each decision follows.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from ..reader import Source
from ..routing.io import RoutesRun
from ..schema import TOPK_COLUMNS, TURN_COLUMNS
from .grouping import Op
from .masks import ROUTE_FLIPPED, MaskAccumulator, Unit
from .table import REDUCTIONS

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
    turns: bool = False
    """the input has turn columns (a multi-turn run): each batch's turns are checked and tallied."""
    by_turn: bool = False
    """compare-masks counts each rule's rejections per turn (``--by turn``)."""

    @property
    def joins_routes(self) -> bool:
        """Both sides recorded routes: the token pass joins each token to its flip flags."""
        return self.routes is not None and self.routes.both_sides


def columns_to_read(source: Source, report: bool, examples: bool, also_read: tuple[str, ...]) -> tuple[str, ...]:
    """The columns the outputs read besides the required ones, each once, in the order the pass has always
    read them. ``examples``: compare-masks lists disagreeing tokens (by id)."""
    has_topk = all(source.has(c) for c in TOPK_COLUMNS)
    columns = ["advantage"] if source.has("advantage") else []  # the per-sequence aggregator always sums it
    if examples:
        columns += ["token_id"]
    if report:
        columns += ["trainer_entropy", "sampler_kept_logmass"]
        if has_topk:
            columns += ["token_id", *TOPK_COLUMNS] + [c for c in TRAINER_TOPK if source.has(c)]
    columns += [c for c in also_read if source.has(c) and c not in columns]
    if source.has("turn"):  # checked in every pass, as positions are: a run refused by one command is by all
        columns += [c for c in TURN_COLUMNS if c not in columns]
    return tuple(columns)


def reductions(
    units: tuple[Unit, ...] | None, has_adv: bool, clamped: bool, inverse_k3: bool, flipped: bool
) -> Mapping[str, Op]:
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
    return MappingProxyType(ops)
