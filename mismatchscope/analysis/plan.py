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

import enum
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType

import pyarrow.parquet as pq

from ..reader import Source
from ..reader.streaming import SomeGroups
from ..routing.io import RoutesRun
from ..schema import BOUND_SUMMARIES, NOT_RECORDED_ID, OVERLAP, REQUIRED_NAMES, ROW_SUMS, TOPK_COLUMNS, TURN_COLUMNS
from .grouping import Op
from .masks import ROUTE_FLIPPED, MaskAccumulator, Unit
from .table import REDUCTIONS

TRAINER_TOPK = ("trainer_topk_ids",)
"""the trainer's own top-k the report reads: its ids feed the overlap. Its logprobs feed no number, so they
are not read (decoding them would cost a probe run's report 10-15%), and what no number uses cannot
make one wrong."""
ROW_SUM_LISTS = ("sampler_topk_logprobs", "trainer_logprobs_at_sampler_topk")
"""the lists ``doctor``'s per-row sums come from in a run without summaries."""
LISTS_NOTE = (
    "this run's top-k lists have no per-token summaries (it was written before runs had them), so every read "
    "decodes the lists; a run written now has them, and reads several times faster (a probe run: "
    "mismatchscope rescore writes it again)"
)


class TopkRead(enum.Enum):
    """Where the pass's top-k numbers come from."""

    NONE = "none"
    """no top-k lists in the input, or nothing asked needs them."""
    SUMMARIES = "summaries"
    """the run's per-token summaries (``analysis.summaries``); the lists are not decoded."""
    LISTS = "lists"
    """a run written before the summaries: its lists, in float64, as they were always read."""
    LISTS_ROUNDED = "lists_rounded"
    """a run with summaries whose lists were asked for: the summaries computed again from them (and held against
    the stored ones on every row), so the numbers are the summaries' to the bit."""


def topk_read(source: Source, wanted: bool, lists_asked: bool) -> TopkRead:
    """``wanted``: a number the request asks for needs the top-k; ``lists_asked``: decode the lists anyway."""
    if not wanted or not all(source.has(c) for c in TOPK_COLUMNS):
        return TopkRead.NONE
    summaries = all(source.has(c) for c in (*BOUND_SUMMARIES, *ROW_SUMS))
    if source.has(TRAINER_TOPK[0]) and not source.has(OVERLAP):
        summaries = False
    if not summaries:
        return TopkRead.LISTS
    return TopkRead.LISTS_ROUNDED if lists_asked else TopkRead.SUMMARIES


def required_columns(source: Source, token_ids: bool) -> tuple[str, ...]:
    """The required columns the pass decodes: ``token_id`` only where something reads the ids, or where the
    files' footer statistics cannot show that every id is one the readers accept (then it is decoded for its
    check, and a refused id is named with its row)."""
    if token_ids or source.token_id_min is None or source.token_id_min < NOT_RECORDED_ID:
        return REQUIRED_NAMES
    return tuple(c for c in REQUIRED_NAMES if c != "token_id")


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
    headline: bool
    """the report's sums alone (``AnalysisRequest.headline``): no exact quantiles, no top-k bounds or score centering
    folded. The same columns are read and checked as for the whole report."""
    masks: bool
    examples: int
    has_advantage: bool
    topk: TopkRead
    row_sums: bool
    """the batches carry ``doctor``'s per-row top-k sums (``schema.ROW_SUMS``, or the two lists they come from)."""
    required: tuple[str, ...]
    """the required columns decoded (``token_id`` is left out where nothing reads it: :func:`required_columns`)."""
    check: Callable[[Path, pq.ParquetFile, int], None] | None
    """the summaries' check of each row group before it is decoded (``summaries.check_row_group``)."""
    notes: tuple[str, ...]
    """said on the terminal, never in a document (a run's JSON stays what it was)."""
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
    only_in: SomeGroups | None = None
    """columns of ``columns`` decoded in some row groups alone (``doctor``'s top-k lists, for its list sample:
    ``doctor.sample.list_groups``); None: every column in every group."""

    @property
    def has_topk(self) -> bool:
        return self.topk is not TopkRead.NONE

    @property
    def joins_routes(self) -> bool:
        """Both sides recorded routes: the token pass joins each token to its flip flags."""
        return self.routes is not None and self.routes.both_sides


def columns_to_read(
    source: Source,
    report: bool,
    examples: bool,
    also_read: tuple[str, ...],
    topk: TopkRead = TopkRead.NONE,
    row_sums: bool = False,
) -> tuple[str, ...]:
    """The columns the outputs read besides the required ones, each once, in the order the pass has always
    read them. ``examples``: compare-masks lists disagreeing tokens (by id); ``topk``: where the report's
    top-k numbers come from; ``row_sums``: doctor's per-row top-k sums."""
    columns = ["advantage"] if source.has("advantage") else []  # the per-sequence aggregator always sums it
    if examples:
        columns += ["token_id"]
    if report:
        columns += ["trainer_entropy", "sampler_kept_logmass"]
    if topk in (TopkRead.LISTS, TopkRead.LISTS_ROUNDED):
        columns += ["token_id", *TOPK_COLUMNS] + [c for c in TRAINER_TOPK if source.has(c)]
    if topk is TopkRead.LISTS_ROUNDED or (topk is TopkRead.SUMMARIES and report):
        columns += [*BOUND_SUMMARIES] + ([OVERLAP] if source.has(OVERLAP) else [])
    if row_sums and topk in (TopkRead.SUMMARIES, TopkRead.LISTS_ROUNDED):
        columns += [*ROW_SUMS]
    columns += [c for c in also_read if source.has(c) and c not in columns]
    if source.has("turn"):  # checked in every pass, as positions are: a run refused by one command is by all
        columns += [c for c in TURN_COLUMNS if c not in columns]
    return tuple(dict.fromkeys(columns))


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
