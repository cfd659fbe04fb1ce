"""One streaming pass that feeds ``report`` and ``compare-masks`` alike.

The pass reads only the columns the requested outputs need, computes the
shared per-token terms once per batch (``divergence.token_terms``), and hands
them to the token statistics, the per-sequence aggregator and the rule
accumulator. Both commands (and ``probe``'s closing summary) call
:func:`analyse`, so a number printed by one is the number printed by the other.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import cast

import numpy as np

from ..divergence import TokenTerms, clamped_k_terms, token_terms
from ..reader import Hygiene, RawBatch, Source, open_source, read_batches, token_keys
from ..rules import RuleInstance, SequenceInputs
from ..rules.sequence import k3_inverse, needs_inverse_k3
from ..schema import TOPK_COLUMNS
from .comparison import assemble_masks
from .grouping import Groups, Op, SequenceAggregator
from .masks import ROUTE_FLIPPED, MaskAccumulator, build_units
from .parallel import ordered_map
from .positions import PositionTracker, position_runs
from .quantiles import select_bins
from .readings import interpret, policy_lag  # noqa: F401 - importable from here as before
from .report import CHI2_SEQ_CLIP, assemble_report  # noqa: F401
from .results import MasksResult, Report
from .routing import FlipIndex, GapTally, RoutingScan, locate_routes, scan_routes
from .routing_report import routing_section, routing_warnings
from .table import REDUCTIONS, SequenceTable, token_values
from .tokenstats import RATIO_QUANTILES, TokenStats, centering_values
from .topk import ScoreCentering, TopkBounds, score_centering, topk_bounds
from .validate import check_advantage, check_not_empty, check_positions, overflow_warnings, position_warnings


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


@dataclass
class _Partial:
    """What one batch contributes, computed on a worker thread and folded in file order."""

    hygiene: Hygiene
    runs: tuple | None
    keys: np.ndarray
    reduced: dict[str, np.ndarray]
    stats: TokenStats | None
    masks: MaskAccumulator | None
    tokens: int
    seen: tuple | None = None
    """(terms, batch) for ``on_terms``; None when nobody asked."""
    gap: GapTally | None = None


def analyse(
    path: str,
    request: AnalysisRequest,
    mapping: dict[str, str] | None = None,
    on_batch: Callable[[int], None] | None = None,
    on_terms: Callable[[TokenTerms, dict], None] | None = None,
    workers: int | None = None,
) -> AnalysisResult:
    """``on_terms(terms, batch)``, when given, sees every batch's token terms (the pictures' histograms).

    Batches are analysed on ``workers`` threads (default: one per core, ``parallel.default_workers``)
    and folded in file order, so the result does not depend on the number of threads.
    """
    source = open_source(path, mapping)
    has_adv = source.has("advantage")
    has_topk = all(source.has(c) for c in TOPK_COLUMNS)
    columns = ["advantage"] if has_adv else []  # the per-sequence aggregator always sums it
    if request.masks and request.examples:
        columns += ["token_id"]
    if request.report:
        columns += ["trainer_entropy", "sampler_kept_logmass"]
        if has_topk:
            columns += ["token_id", *TOPK_COLUMNS] + [c for c in TRAINER_TOPK if source.has(c)]

    columns += [c for c in request.also_read if source.has(c) and c not in columns]
    units = build_units(request.rules, request.sweeps, has_adv) if request.masks else []
    masks = MaskAccumulator(units, request.examples) if request.masks else None
    wants_routes = request.routing and (request.report or request.masks)
    scan, routes_note = _routes(source.files) if wants_routes else (None, None)
    index: FlipIndex | None = scan.index if scan else None
    if masks and index is not None:
        masks.routed = True
    stats = TokenStats()
    ops: dict[str, Op] = dict(REDUCTIONS)
    if has_adv:
        ops["sum_adv"] = "sum"
    clamped = bool(masks) and any(
        u.rule.spec.fixed_level is None and u.rule.level == "sequence" for u in masks.seq_units
    )
    inverse_k3 = bool(masks) and needs_inverse_k3([u.rule for u in masks.seq_units])
    if inverse_k3:  # k3-seq in AReaL's orientation
        ops["sum_k3inv"] = "sum"
    if clamped:  # verl-rs sums its estimators over l clamped to +-20
        ops.update({"sum_ck1": "sum", "sum_ck2": "sum", "sum_ck3": "sum"})
    if masks:
        ops.update(dict.fromkeys(masks.per_token_columns(), "sum"))
    if masks and index is not None:
        ops[ROUTE_FLIPPED] = "sum"
    seqagg = SequenceAggregator(ops)
    hygiene = Hygiene()
    positions = PositionTracker()
    gap = GapTally()

    def one_batch(raw: RawBatch) -> _Partial:
        hyg = Hygiene()
        batch = raw.clean(hyg)
        t = token_terms(batch["trainer_logprob"], batch["sampler_logprob"])
        pos = batch["position"]
        check_positions(pos, source)
        runs = position_runs(*token_keys(batch))  # dropped rows too: a token written twice is a duplicate
        adv = batch.get("advantage")
        check_advantage(adv)
        groups = Groups(batch["sequence_id"])
        per_tok = token_values(t)
        if has_adv:
            per_tok["sum_adv"] = cast(np.ndarray, adv)  # has_adv: the column was read
        if clamped:
            per_tok["sum_ck1"], per_tok["sum_ck2"], per_tok["sum_ck3"] = clamped_k_terms(t.log_ratio_T)
        if inverse_k3:
            per_tok["sum_k3inv"] = k3_inverse(t.log_ratio_T)
        reduced = {k: (groups.counts() if k == "n_tokens_S" else groups.reduce(v, ops[k])) for k, v in per_tok.items()}
        part_masks, part_gap, flipped_T = None, None, None
        if index is not None:
            part_gap = GapTally()
            flipped_T = part_gap.add(index, batch["sequence_id"], pos, np.abs(t.log_ratio_T))
        if masks:
            part_masks = masks.spawn()
            reduced.update(part_masks.add(t, adv, batch, groups, flipped_T))
            if flipped_T is not None:
                reduced[ROUTE_FLIPPED] = groups.count_at(np.flatnonzero(flipped_T))
        part_stats = None
        if request.report:
            part_stats = stats.spawn()
            ent = batch.get("trainer_entropy")
            part_stats.add(t, pos, ent if ent is not None and np.isfinite(ent).all() else None)
            if has_topk:
                b, centering = _topk(batch, t)
                part_stats.add_topk(b.tv_lower_T, b.kl_lower_T, b.sampler_mass_T)
                part_stats.add_centering(centering)
            if "sampler_kept_logmass" in batch:
                part_stats.add_kept_mass(batch["sampler_kept_logmass"])
        return _Partial(
            hyg,
            runs,
            groups.keys,
            reduced,
            part_stats,
            part_masks,
            t.log_ratio_T.size,
            (t, batch) if on_terms else None,
            part_gap,
        )

    for part in ordered_map(one_batch, read_batches(source, columns, request.batch_rows), workers):
        hygiene.merge(part.hygiene)
        positions.add_runs(part.runs)
        seqagg.add_reduced(part.keys, part.reduced)
        if part.stats is not None:
            stats.merge(part.stats)
        if part.masks is not None:
            assert masks is not None  # a part only carries masks when masks were asked for
            masks.merge(part.masks)
        if part.gap is not None:
            gap.merge(part.gap)
        if on_terms and part.seen is not None:
            on_terms(*part.seen)
        if on_batch:
            on_batch(part.tokens)

    if request.report:
        _refill_quantiles(source, columns, request.batch_rows, stats, workers)
        stats.gather_on(workers)
    seq_ids, agg = seqagg.result()
    table = SequenceTable.from_reduced(seq_ids, agg, agg.get("sum_adv"))
    n_tokens = int(table.n_tokens_S.sum()) if seq_ids.size else 0
    check_not_empty(path, n_tokens, hygiene, source)
    warnings = source.warnings + hygiene.warnings() + position_warnings(positions.finish())
    warnings += overflow_warnings(table.max_l_S)
    warnings += ([routes_note] if routes_note else []) + (routing_warnings(scan) if scan else [])
    seq = SequenceInputs(
        n_tokens_S=table.n_tokens_S,
        seq_log_ratio_S=table.sum_l_S,
        min_log_ratio_S=table.min_l_S,
        max_log_ratio_S=table.max_l_S,
        mean_k3_S=table.sum_k3_S / table.n_tokens_S,
        advantage_S=table.advantage_S,
        clamped_sum_k1_S=agg.get("sum_ck1"),
        clamped_sum_k2_S=agg.get("sum_ck2"),
        clamped_sum_k3_S=agg.get("sum_ck3"),
        mean_k3_inverse_S=agg["sum_k3inv"] / table.n_tokens_S if inverse_k3 else None,
    )
    report = None
    if request.report:
        routing = routing_section(scan, gap if index is not None else None) if scan is not None else None
        report = assemble_report(stats, seq, table, source.run_config, n_tokens, warnings, routing)
    mask_out = None
    if masks:
        mask_columns = {k: agg[k] for k in masks.per_token_columns()}
        with np.errstate(over="ignore"):  # a sequence's geometric ratio exp(mean l) may overflow to inf, as it should
            if index is not None:
                mask_columns[ROUTE_FLIPPED] = agg[ROUTE_FLIPPED]
            mask_out = assemble_masks(masks, seq, mask_columns, n_tokens, seq_ids.size, has_adv, warnings)
        if index is not None:
            mask_out.route_flipped_tokens = gap.flipped_n
        table.rules = masks.rule_columns(mask_columns, table.n_tokens_S)
    return AnalysisResult(n_tokens, int(seq_ids.size), report, mask_out, warnings, source.run_config, source, table)


def _routes(files) -> tuple[RoutingScan | None, str | None]:
    """The run's routes scanned once before the token pass (the pass joins on their flip index), or why not."""
    run, note = locate_routes(files)
    return (scan_routes(run) if run else None), note


TRAINER_TOPK = ("trainer_topk_ids",)
"""the trainer's own top-k the report reads: its ids feed the overlap. Its logprobs feed no number, so they
are not read (decoding them would cost a probe run's report 10-15%), and what no number uses cannot
make one wrong."""


def _topk(batch: dict, t: TokenTerms) -> tuple[TopkBounds, ScoreCentering]:
    """One batch's top-k lower bounds and score-centering statistics (the batch has the top-k columns).

    ``t``: the batch's token terms, whose probabilities the bounds reuse.
    """
    b = topk_bounds(
        batch["token_id"],
        batch["sampler_logprob"],
        batch["trainer_logprob"],
        batch["sampler_topk_ids"],
        batch["sampler_topk_logprobs"],
        batch["trainer_logprobs_at_sampler_topk"],
        batch["sequence_id"],
        batch["position"],
        (t.q_T, t.p_T),
    )
    return b, score_centering(b, batch["sampler_topk_ids"], batch.get("trainer_topk_ids"))


def _refill_quantiles(
    source: Source, columns: list[str], batch_rows: int, stats: TokenStats, workers: int | None
) -> None:
    """A second pass for the exact quantiles a column's first pass could not answer from what it kept.

    A file too large to keep every value of (``quantiles.KEEP_VALUES``)
    keeps a window around the expected quantiles; when a wanted order
    statistic fell outside it (``ExactQuantiles.covers``), or the window
    outgrew its cap, the first pass counted every value into bins and this one reads the file
    again and hands each column back only the values of the bins its wanted
    order statistics fall in. The log-ratio needs only the required columns
    (the rows hygiene drops depend on the logprobs alone); the score-centering
    statistics need the top-k lists again.
    """
    todo = {name: acc for name, acc in stats.quantile_columns().items() if not acc.covers(RATIO_QUANTILES)}
    if not todo:
        return
    wanted = {name: acc.wanted(RATIO_QUANTILES) for name, acc in todo.items()}
    for acc in todo.values():
        acc.start_refill()
    centering = any(name != "log_ratio" for name in todo)
    cols = columns if centering else []

    def one_batch(raw: RawBatch) -> dict[str, np.ndarray]:
        batch = raw.clean(Hygiene())
        t = token_terms(batch["trainer_logprob"], batch["sampler_logprob"])
        values = {"log_ratio": t.log_ratio_T}
        if centering:
            values.update(centering_values(_topk(batch, t)[1]))
        return {name: select_bins(values[name], wanted[name]) for name in todo}

    for kept in ordered_map(one_batch, read_batches(source, cols, batch_rows), workers):
        for name, values in kept.items():
            todo[name].refill(values)
