"""One streaming pass that feeds ``report`` and ``compare-masks`` alike: plan, batch, fold, finish.

The request becomes a frozen plan once (:func:`make_plan`: the columns to
read, the reductions, the rule units, the run's routes located; how each
follows is :mod:`.plan`); the routes are scanned; each batch is analysed on a
worker thread by a pure function of the plan (:func:`~.batch.analyse_batch`, which computes the
shared per-token terms once and hands them to the token statistics, the
per-sequence aggregator and the rule units); the parts are folded in file
order (:class:`_Fold`); and :func:`_finish` assembles the outputs. Both
commands (and ``probe``'s closing summary) call :func:`analyse`, so a number
printed by one is the number printed by the other.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import partial

import numpy as np

from ..divergence import TokenTerms, token_terms
from ..errors import UsageError
from ..reader import Hygiene, RawBatch, Source, open_source, read_batches
from ..routing.io import locate_routes
from ..rules import RuleInstance, SequenceInputs
from ..rules.sequence import needs_inverse_k3
from ..schema import OVERLAP
from .batch import BatchPart, BatchSink, analyse_batch, topk_of, with_summaries
from .comparison import assemble_masks
from .grouping import SequenceAggregator
from .masks import ROUTE_FLIPPED, MaskAccumulator, build_units
from .parallel import ordered_map
from .plan import (
    LISTS_NOTE,
    AnalysisPlan,
    TopkRead,
    columns_to_read,
    reductions,
    required_columns,
    topk_read,
)
from .positions import PositionRuns, PositionTracker
from .quantiles import select_bins
from .report import assemble_report
from .results import MasksResult, Report
from .route_join import FlipIndex, GapTally
from .route_scan import RoutingScan, scan_routes
from .routing_report import routing_section, routing_warnings
from .summaries import check_row_group
from .table import SequenceTable
from .tokenstats import RATIO_QUANTILES, TokenStats, centering_values
from .turns import TurnRows, TurnTracker
from .validate import check_not_empty, overflow_warnings, position_warnings


@dataclass
class AnalysisRequest:
    report: bool = True
    headline: bool = False
    """with ``report``: the report's sums alone -- its headline metrics, tails and breakdowns; no exact quantiles
    (its ratio quantiles are None, and no second pass is made for them), no top-k bounds or score centering
    (None). The columns read and every check of them are the whole report's, so a run one command refuses every
    command refuses. What ``doctor`` reads of a report; ``report`` itself never asks."""
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
    row_sums: bool = False
    """the batches an ``on_terms`` caller sees carry ``doctor``'s per-row top-k sums: ``schema.ROW_SUMS`` from
    the run's summaries, or, in a run written before them, the two logprob lists they come from."""
    topk_lists: bool = False
    """decode the top-k lists even where the run has summaries: the summaries are computed again from them and
    held against the stored ones on every row (the numbers are the summaries' to the bit)."""
    batch_rows: int = 1 << 17
    """rows a worker analyses at once: large enough that numpy's per-call overhead (a rule is a dozen
    calls) stays small beside the work, small enough that a batch's temporaries stay near the cache."""
    by_turn: bool = False
    """compare-masks: each rule's rejections per turn (a multi-turn input; ``--by turn``)."""


@dataclass
class AnalysisResult:
    tokens: int
    sequences: int
    report: Report | None
    masks: MasksResult | None
    warnings: list[str]
    run: dict | None
    source: Source
    per_sequence: SequenceTable
    sequence_inputs: SequenceInputs
    """what the sequence rules read, per sequence (aligned with ``per_sequence``'s rows)."""
    turns: TurnRows | None = None
    """a multi-turn run's tokens per (sequence, turn), its turns checked; None for a run of single turns."""
    notes: tuple[str, ...] = ()
    """said on the terminal only (``AnalysisPlan.notes``): a document of the run stays what it was."""


def analyse(
    path: str,
    request: AnalysisRequest,
    mapping: dict[str, str] | None = None,
    on_batch: Callable[[int], None] | None = None,
    on_terms: Callable[[TokenTerms, dict], None] | None = None,
    workers: int | None = None,
    sink: BatchSink | None = None,
) -> AnalysisResult:
    """``on_terms(terms, batch)``, when given, sees every batch's token terms (the pictures' histograms);
    ``sink`` (compare-masks' rules only) every batch with the rules' actions, and the result at the end.

    Batches are analysed on ``workers`` threads (default: one per core, ``parallel.default_workers``)
    and folded in file order, so the result does not depend on the number of threads.
    """
    if sink is not None:
        request = replace(request, also_read=tuple(dict.fromkeys([*request.also_read, *sink.reads])))
    return run_plan(make_plan(path, request, mapping), on_batch, on_terms, workers, sink)


def run_plan(
    plan: AnalysisPlan,
    on_batch: Callable[[int], None] | None = None,
    on_terms: Callable[[TokenTerms, dict], None] | None = None,
    workers: int | None = None,
    sink: BatchSink | None = None,
) -> AnalysisResult:
    """:func:`analyse` of a plan already made: a caller that sizes something by the input (``doctor``'s
    sample, by its rows) reads the plan's source instead of opening the input a second time."""
    if sink is not None:
        sink.start(plan)
    scan = scan_routes(plan.routes) if plan.routes is not None else None
    fold = _Fold(plan, scan)
    one_batch = partial(analyse_batch, plan, fold.index, fold.stats, on_terms is not None, sink)
    batches = read_batches(
        plan.source, list(plan.columns), plan.batch_rows, required=plan.required, check=plan.check, only=plan.only_in
    )
    for part in ordered_map(one_batch, batches, workers):
        fold.add(part)
        if on_terms and part.seen is not None:
            on_terms(*part.seen)
        if sink is not None:
            sink.take(part.sunk)
        if on_batch:
            on_batch(part.tokens)
    if plan.report and not plan.headline:
        _refill_quantiles(plan, fold.stats, workers)
        fold.stats.gather_on(workers)
    result = _finish(fold)
    if sink is not None:
        sink.finish(result)
    return result


def make_plan(path: str, request: AnalysisRequest, mapping: dict[str, str] | None = None) -> AnalysisPlan:
    """Open the input once and decide the pass: columns, reductions, rule units, routes (located, not yet read)."""
    source = open_source(path, mapping)
    if request.by_turn and not source.has("turn"):
        raise UsageError(
            f"--by turn: {path} has no turn column (its sequences are one turn each)",
            hint="multi-turn runs carry turn and turn_position (docs/multi-turn.md)",
        )
    has_adv = source.has("advantage")
    units = tuple(build_units(request.rules, request.sweeps, has_adv)) if request.masks else ()
    seq_rules = [u.rule for u in units if u.rule.level == "sequence"]
    wants_routes = request.routing and (request.report or request.masks)
    routes, note = locate_routes(source.files) if wants_routes else (None, None)
    clamped = any(r.spec.fixed_level is None for r in seq_rules)
    inverse_k3 = needs_inverse_k3(seq_rules)
    flipped = request.masks and routes is not None and routes.both_sides
    topk = topk_read(source, request.report or request.row_sums, request.topk_lists)
    examples = request.masks and bool(request.examples)
    columns = columns_to_read(source, request.report, examples, request.also_read, topk, request.row_sums)
    return AnalysisPlan(
        path=path,
        source=source,
        columns=columns,
        ops=reductions(units if request.masks else None, has_adv, clamped, inverse_k3, flipped),
        units=units,
        report=request.report,
        headline=request.report and request.headline,
        masks=request.masks,
        examples=request.examples,
        has_advantage=has_adv,
        topk=topk,
        row_sums=request.row_sums,
        required=required_columns(source, "token_id" in columns),
        check=check_row_group(source.mapping, source.has(OVERLAP)) if topk is TopkRead.SUMMARIES else None,
        notes=(LISTS_NOTE,) if topk is TopkRead.LISTS else (),
        clamped=clamped,
        inverse_k3=inverse_k3,
        routes=routes,
        routes_note=note,
        batch_rows=request.batch_rows,
        turns=source.has("turn"),
        by_turn=request.by_turn and request.masks,
    )


@dataclass
class _Fold:
    """The pass's running totals; each batch's part is added in file order."""

    plan: AnalysisPlan
    scan: RoutingScan | None
    hygiene: Hygiene = field(default_factory=Hygiene)
    positions: PositionTracker = field(default_factory=PositionTracker)
    stats: TokenStats = field(init=False)
    gap: GapTally = field(default_factory=GapTally)
    turns: TurnTracker = field(default_factory=TurnTracker)
    seqagg: SequenceAggregator = field(init=False)
    masks: MaskAccumulator | None = field(init=False)

    def __post_init__(self) -> None:
        self.stats = TokenStats(quantiles=not self.plan.headline)
        self.seqagg = SequenceAggregator(dict(self.plan.ops))
        self.masks = None
        if self.plan.masks:
            self.masks = MaskAccumulator([u.fresh() for u in self.plan.units], self.plan.examples)
            self.masks.routed = self.plan.joins_routes

    @property
    def index(self) -> FlipIndex | None:
        """The routes' flip index the tokens join on (None: no routes, or only one side recorded them)."""
        return self.scan.index if self.scan is not None else None

    def add(self, part: BatchPart) -> None:
        self.hygiene.merge(part.hygiene)
        self.positions.add_runs(part.runs)
        self.turns.add(part.turns)
        self.seqagg.add_reduced(part.keys, part.reduced)
        if part.stats is not None:
            self.stats.merge(part.stats)
        if part.masks is not None:
            assert self.masks is not None  # a part only carries masks when masks were asked for
            self.masks.merge(part.masks)
        if part.gap is not None:
            self.gap.merge(part.gap)


def _finish(fold: _Fold) -> AnalysisResult:
    """The pass's outputs from its totals: the per-sequence table, warnings, the report and the rule counts."""
    plan, scan = fold.plan, fold.scan
    seq_ids, agg = fold.seqagg.result()
    table = SequenceTable.from_reduced(seq_ids, agg, agg.get("sum_adv"))
    n_tokens = int(table.n_tokens_S.sum()) if seq_ids.size else 0
    check_not_empty(plan.path, n_tokens, fold.hygiene, plan.source)
    turns = fold.turns.finish() if plan.turns else None
    runs = fold.positions.finish()
    warnings = plan.source.warnings + fold.hygiene.warnings() + position_warnings(runs, _turns_of(runs, turns))
    warnings += overflow_warnings(table.max_l_S)
    warnings += ([plan.routes_note] if plan.routes_note else []) + (routing_warnings(scan) if scan else [])
    seq = _sequence_inputs(plan, table, agg)
    report = None
    if plan.report:
        routing = routing_section(scan, fold.gap if fold.index is not None else None) if scan is not None else None
        report = assemble_report(fold.stats, seq, table, plan.source.run_config, n_tokens, warnings, routing)
    mask_out = _masks_out(fold, seq, table, agg, n_tokens, warnings, turns) if fold.masks is not None else None
    return AnalysisResult(
        n_tokens,
        int(seq_ids.size),
        report,
        mask_out,
        warnings,
        plan.source.run_config,
        plan.source,
        table,
        seq,
        turns,
        plan.notes,
    )


def _turns_of(runs: PositionRuns, turns: TurnRows | None) -> np.ndarray | None:
    """Each sequence's number of turns, in the order of ``runs`` (None for a run of single turns)."""
    if turns is None:
        return None
    ids, counts = np.unique(turns.sequence_id, return_counts=True)
    at = np.clip(np.searchsorted(ids, runs.sequence_id_S), 0, max(ids.size - 1, 0))
    return np.where(ids[at] == runs.sequence_id_S, counts[at], 1) if ids.size else None


def _sequence_inputs(plan: AnalysisPlan, table: SequenceTable, agg: dict[str, np.ndarray]) -> SequenceInputs:
    """What the sequence rules read, per sequence, from the folded reductions."""
    return SequenceInputs(
        n_tokens_S=table.n_tokens_S,
        seq_log_ratio_S=table.sum_l_S,
        min_log_ratio_S=table.min_l_S,
        max_log_ratio_S=table.max_l_S,
        mean_k3_S=table.sum_k3_S / table.n_tokens_S,
        advantage_S=table.advantage_S,
        clamped_sum_k1_S=agg.get("sum_ck1"),
        clamped_sum_k2_S=agg.get("sum_ck2"),
        clamped_sum_k3_S=agg.get("sum_ck3"),
        mean_k3_inverse_S=agg["sum_k3inv"] / table.n_tokens_S if plan.inverse_k3 else None,
    )


def _masks_out(
    fold: _Fold,
    seq: SequenceInputs,
    table: SequenceTable,
    agg: dict[str, np.ndarray],
    n_tokens: int,
    warnings,
    turns: TurnRows | None,
) -> MasksResult:
    """compare-masks' result; the rules' per-sequence columns go into ``table``."""
    masks, routed = fold.masks, fold.index is not None
    assert masks is not None  # called only when masks were asked for
    mask_columns = {k: agg[k] for k in masks.per_token_columns()}
    with np.errstate(over="ignore"):  # a sequence's geometric ratio exp(mean l) may overflow to inf, as it should
        if routed:
            mask_columns[ROUTE_FLIPPED] = agg[ROUTE_FLIPPED]
        by_turn = (table.sequence_id_S, turns) if fold.plan.by_turn and turns is not None else None
        out = assemble_masks(
            masks, seq, mask_columns, n_tokens, table.sequence_id_S.size, fold.plan.has_advantage, warnings, by_turn
        )
    if routed:
        out.route_flipped_tokens = fold.gap.flipped_n
    table.rules = masks.rule_columns(mask_columns, table.n_tokens_S)
    return out


def _refill_quantiles(plan: AnalysisPlan, stats: TokenStats, workers: int | None) -> None:
    """A second pass for the exact quantiles a column's first pass could not answer from what it kept.

    A file too large to keep every value of (``quantiles.KEEP_VALUES``)
    keeps a window around the expected quantiles; when a wanted order
    statistic fell outside it (``ExactQuantiles.covers``), or the window
    outgrew its cap, the first pass counted every value into bins and this one reads the file
    again and hands each column back only the values of the bins its wanted
    order statistics fall in. The log-ratio needs only the required columns
    (the rows hygiene drops depend on the logprobs alone); the score-centering
    statistics need the top-k columns again (summaries or lists, as the first pass read them).
    """
    todo = {name: acc for name, acc in stats.quantile_columns().items() if not acc.covers(RATIO_QUANTILES)}
    if not todo:
        return
    wanted = {name: acc.wanted(RATIO_QUANTILES) for name, acc in todo.items()}
    for acc in todo.values():
        acc.start_refill()
    centering = any(name != "log_ratio" for name in todo)
    # the report's own columns: what a caller added to the first pass (doctor's sums, ids and lists) no value
    # refilled here reads
    cols = list(columns_to_read(plan.source, True, False, (), plan.topk)) if centering else []
    required = required_columns(plan.source, "token_id" in cols)

    def one_batch(raw: RawBatch) -> dict[str, np.ndarray]:
        batch = raw.clean(Hygiene())
        t = token_terms(batch["trainer_logprob"], batch["sampler_logprob"])
        values = {"log_ratio": t.log_ratio_T}
        if centering:
            with_summaries(plan, raw.path, batch, t)
            values.update(centering_values(topk_of(plan, batch, t)[1]))
        return {name: select_bins(values[name], wanted[name]) for name in todo}

    batches = read_batches(plan.source, cols, plan.batch_rows, required=required, only=plan.only_in)
    for kept in ordered_map(one_batch, batches, workers):
        for name, values in kept.items():
            todo[name].refill(values)
