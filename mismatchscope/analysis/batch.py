"""One batch of token pairs analysed on a worker thread: what it adds to every output of the pass.

:func:`analyse_batch` is a pure function of the plan and the batch (it
reads the fold's token statistics only to spawn empty ones with the same
quantile window): the shared per-token terms are computed once
(``divergence.token_terms``) and handed to the per-sequence reductions, the
rule units, the token statistics and the routing join. The pass folds the
:class:`BatchPart` results in file order (``engine.analyse``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, cast

import numpy as np

from ..divergence import TokenTerms, clamped_k_terms, token_terms
from ..reader import Hygiene, RawBatch, token_keys
from ..rules.sequence import k3_inverse
from .grouping import Groups
from .masks import ROUTE_FLIPPED, MaskAccumulator
from .plan import AnalysisPlan, TopkRead
from .positions import position_runs
from .route_join import FlipIndex, GapTally
from .summaries import check_ranges, compare, from_lists, topk_from_summaries
from .table import token_values
from .tokenstats import TokenStats
from .topk import ScoreCentering, TopkBounds, batch_bounds, score_centering
from .turns import TurnRows, turn_rows
from .validate import check_advantage, check_positions


@dataclass(frozen=True)
class BatchTokens:
    """One cleaned batch as the rules judged it: what a :class:`BatchSink` sees of it, on the worker thread."""

    batch: dict
    """the cleaned columns (canonical name -> array)."""
    terms: TokenTerms
    actions: dict[str, np.ndarray]
    """each selected token rule unit's action per token (KEEP, REJECT, REWEIGHT), under its ``Unit.key``;
    the units of a ``--sweep`` are not in it."""


class BatchSink(Protocol):
    """Something that takes every batch of a compare-masks pass, token by token (``compare-masks --write``).

    ``start`` sees the plan before the first batch; ``per_batch`` runs on the
    worker thread that analysed the batch (a pure function of it); its result
    is handed to ``take`` on the calling thread, in file order; ``finish``
    sees the pass's result.
    """

    reads: tuple[str, ...]
    """columns the sink wants in the batches besides the pass's own, where the run has them."""

    def start(self, plan: AnalysisPlan) -> None: ...

    def per_batch(self, tokens: BatchTokens) -> object: ...

    def take(self, part: object) -> None: ...

    def finish(self, result: Any) -> None: ...


@dataclass
class BatchPart:
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
    sunk: object = None
    """what the pass's sink made of the batch (``BatchSink.per_batch``); None without a sink."""
    turns: TurnRows | None = None
    """a multi-turn run: the batch's rows per (sequence, turn), for the turns' check and counts."""


def analyse_batch(
    plan: AnalysisPlan,
    index: FlipIndex | None,
    stats: TokenStats,
    keep_terms: bool,
    sink: BatchSink | None,
    raw: RawBatch,
) -> BatchPart:
    """One batch's contribution. ``index``: the routes' flip index (runs whose both sides recorded routes);
    ``stats``: the fold's token statistics, spawned from; ``keep_terms``: hand the terms back for ``on_terms``;
    ``sink``: gets the batch with the rules' actions (``BatchSink.per_batch``)."""
    hyg = Hygiene()
    batch = raw.clean(hyg)
    t = token_terms(batch["trainer_logprob"], batch["sampler_logprob"])
    with_summaries(plan, raw.path, batch, t)
    check_positions(batch["position"], plan.source)
    runs = position_runs(*token_keys(batch))  # dropped rows too: a token written twice is a duplicate
    adv = batch.get("advantage")
    check_advantage(adv)
    groups = Groups(batch["sequence_id"])
    reduced = _reduced(plan, t, adv, groups)
    gap, flipped_T = None, None
    if index is not None:
        gap = GapTally()
        flipped_T = gap.add(index, batch["sequence_id"], batch["position"], np.abs(t.log_ratio_T))
    actions: dict[str, np.ndarray] | None = {} if sink is not None else None
    masks = _rule_counts(plan, t, adv, batch, groups, flipped_T, reduced, actions) if plan.masks else None
    part_stats = _token_stats(plan, stats, t, batch) if plan.report else None
    seen = (t, batch) if keep_terms else None
    sunk = sink.per_batch(BatchTokens(batch, t, actions or {})) if sink is not None else None
    turns = (
        turn_rows(batch["sequence_id"], batch["position"], batch["turn"], batch["turn_position"])
        if plan.turns
        else None
    )
    return BatchPart(hyg, runs, groups.keys, reduced, part_stats, masks, t.log_ratio_T.size, seen, gap, sunk, turns)


def _reduced(plan: AnalysisPlan, t: TokenTerms, adv: np.ndarray | None, groups: Groups) -> dict[str, np.ndarray]:
    """The per-sequence reductions of the table's per-token values (and the sequence rules' extra sums)."""
    per_tok = token_values(t)
    if plan.has_advantage:
        per_tok["sum_adv"] = cast(np.ndarray, adv)  # has_advantage: the column was read
    if plan.clamped:
        per_tok["sum_ck1"], per_tok["sum_ck2"], per_tok["sum_ck3"] = clamped_k_terms(t.log_ratio_T)
    if plan.inverse_k3:
        per_tok["sum_k3inv"] = k3_inverse(t.log_ratio_T)
    ops = plan.ops
    return {k: (groups.counts() if k == "n_tokens_S" else groups.reduce(v, ops[k])) for k, v in per_tok.items()}


def _rule_counts(
    plan: AnalysisPlan,
    t: TokenTerms,
    adv: np.ndarray | None,
    batch: dict,
    groups: Groups,
    flipped_T: np.ndarray | None,
    reduced: dict[str, np.ndarray],
    actions: dict[str, np.ndarray] | None = None,
) -> MaskAccumulator:
    """The rule units' counts of this batch; their per-sequence sums go into ``reduced`` (and each selected
    token unit's actions into ``actions``, when given)."""
    masks = MaskAccumulator([u.fresh() for u in plan.units], plan.examples)
    masks.routed = plan.joins_routes
    reduced.update(masks.add(t, adv, batch, groups, flipped_T, actions, batch["turn"] if plan.by_turn else None))
    if flipped_T is not None:
        reduced[ROUTE_FLIPPED] = groups.count_at(np.flatnonzero(flipped_T))
    return masks


def _token_stats(plan: AnalysisPlan, stats: TokenStats, t: TokenTerms, batch: dict) -> TokenStats:
    """The report's token statistics of this batch (top-k bounds and kept mass where the file has them)."""
    part = stats.spawn()
    ent = batch.get("trainer_entropy")
    part.add(t, batch["position"], ent if ent is not None and np.isfinite(ent).all() else None, batch.get("turn"))
    if plan.has_topk and not plan.headline:
        b, centering = topk_of(plan, batch, t)
        part.add_topk(b.tv_lower_T, b.kl_lower_T, b.sampler_mass_T)
        part.add_centering(centering)
    elif (
        plan.topk is TopkRead.LISTS
    ):  # a headline pass folds no bound, but a run's lists are checked where they are read
        topk_of(plan, batch, t)
    if "sampler_kept_logmass" in batch:
        part.add_kept_mass(batch["sampler_kept_logmass"])
    return part


def with_summaries(plan: AnalysisPlan, path: Path, batch: dict, t: TokenTerms) -> None:
    """The batch's top-k summaries, where the plan reads them: held to their ranges, or (a run with summaries whose
    lists were asked for) computed again from the lists, held against the stored ones, and put in their place."""
    if plan.topk is TopkRead.SUMMARIES:
        check_ranges(path, batch)
    elif plan.topk is TopkRead.LISTS_ROUNDED:
        again = from_lists(batch, t)
        for name, v in again.items():
            if name in batch:
                compare(path, batch, name, np.asarray(batch[name]), v)
            batch[name] = v


def topk_of(plan: AnalysisPlan, batch: dict, t: TokenTerms) -> tuple[TopkBounds, ScoreCentering]:
    """One batch's top-k bounds and score-centering statistics, from wherever the plan reads them."""
    if plan.topk is TopkRead.LISTS:
        return topk_terms(batch, t)
    return topk_from_summaries(batch)


def topk_terms(batch: dict, t: TokenTerms) -> tuple[TopkBounds, ScoreCentering]:
    """One batch's top-k lower bounds and score-centering statistics (the batch has the top-k columns).

    ``t``: the batch's token terms, whose probabilities the bounds reuse.
    """
    b = batch_bounds(batch, (t.q_T, t.p_T))
    return b, score_centering(b, batch["sampler_topk_ids"], batch.get("trainer_topk_ids"))
