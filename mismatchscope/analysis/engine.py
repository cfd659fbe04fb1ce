"""One streaming pass that feeds ``report`` and ``compare-masks`` alike.

The pass reads only the columns the requested outputs need, computes the
shared per-token terms once per batch (``divergence.token_terms``), and hands
them to the token statistics, the per-sequence aggregator and the rule
accumulator. Both commands (and ``probe``'s closing summary) call
:func:`analyse`, so a number printed by one is the number printed by the other.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from ..divergence import TokenTerms, clamped_k_terms, token_terms
from ..errors import InputError
from ..reader import Hygiene, Source, iter_batches, open_source
from ..rules import RuleInstance, SequenceInputs
from ..schema import TOPK_COLUMNS
from .grouping import Op, SequenceAggregator
from .masks import MaskAccumulator, build_units, mean_row, tail_reading, unit_row
from .table import REDUCTIONS, SequenceTable, token_values
from .positions import PositionRuns, PositionTracker
from .tokenstats import RATIO_QUANTILES, TokenStats, _f
from .topk import score_centering, topk_bounds

CHI2_SEQ_CLIP = 20.0
"""verl clamps the sequence log-ratio to +-20 before exp(2 S) in chi2_seq."""


@dataclass
class AnalysisRequest:
    report: bool = True
    rules: list[RuleInstance] = field(default_factory=list)
    """rules for compare-masks; empty with ``masks=False``."""
    masks: bool = False
    sweeps: list[tuple[str, str, list[RuleInstance]]] = field(default_factory=list)
    examples: int = 0
    batch_rows: int = 1 << 18


@dataclass
class AnalysisResult:
    tokens: int
    sequences: int
    report: dict | None
    masks: dict | None
    warnings: list[str]
    run: dict | None
    source: Source
    per_sequence: SequenceTable


def analyse(path: str, request: AnalysisRequest, mapping: dict[str, str] | None = None,
            on_batch: Callable[[int], None] | None = None,
            on_terms: Callable[[TokenTerms, dict], None] | None = None) -> AnalysisResult:
    """``on_terms(terms, batch)``, when given, sees every batch's token terms (the pictures' histograms)."""
    source = open_source(path, mapping)
    has_adv = source.has("advantage")
    has_topk = all(source.has(c) for c in TOPK_COLUMNS)
    columns = ["advantage"] if has_adv else []  # the per-sequence aggregator always sums it
    if request.masks and request.examples:
        columns += ["token_id"]
    if request.report:
        columns += ["trainer_entropy", "sampler_kept_logmass"]
        if has_topk:
            columns += ["token_id", *TOPK_COLUMNS] + (["trainer_topk_ids"] if source.has("trainer_topk_ids") else [])

    units = build_units(request.rules, request.sweeps, has_adv) if request.masks else []
    masks = MaskAccumulator(units, request.examples) if request.masks else None
    stats = TokenStats()
    ops: dict[str, Op] = dict(REDUCTIONS)
    if has_adv:
        ops["sum_adv"] = "sum"
    clamped = bool(masks) and any(u.rule.spec.fixed_level is None and u.rule.level == "sequence" for u in masks.seq_units)
    if clamped:  # verl-rs sums its estimators over l clamped to +-20
        ops.update({"sum_ck1": "sum", "sum_ck2": "sum", "sum_ck3": "sum"})
    if masks:
        ops.update({k: "sum" for k in masks.per_token_columns()})
    seqagg = SequenceAggregator(ops)
    hygiene = Hygiene()
    positions = PositionTracker()

    for batch in iter_batches(source, columns, hygiene, request.batch_rows):
        t = token_terms(batch["trainer_logprob"], batch["sampler_logprob"])
        pos = batch["position"]
        if pos.size and pos.min() < 0:
            raise InputError(f"negative position {int(pos.min())} in {source.files[0] if len(source.files) == 1 else 'the input'}")
        positions.add(batch["sequence_id"], pos)
        if on_terms:
            on_terms(t, batch)
        adv = batch.get("advantage")
        if adv is not None and not np.isfinite(adv).all():
            raise InputError(f"the advantage column has {int((~np.isfinite(adv)).sum())} missing or non-finite value(s)",
                             hint="fill them, or drop the column with a --column mapping to another name")
        per_tok = token_values(t)
        if has_adv:
            per_tok["sum_adv"] = adv
        if clamped:
            per_tok["sum_ck1"], per_tok["sum_ck2"], per_tok["sum_ck3"] = clamped_k_terms(t.log_ratio_T)
        if masks:
            masks.add(t, adv, batch, per_tok)
        seqagg.add(batch["sequence_id"], per_tok)
        if request.report:
            ent = batch.get("trainer_entropy")
            stats.add(t, pos, ent if ent is not None and np.isfinite(ent).all() else None)
            if has_topk:
                b = topk_bounds(batch["token_id"], batch["sampler_logprob"], batch["trainer_logprob"],
                                batch["sampler_topk_ids"], batch["sampler_topk_logprobs"],
                                batch["trainer_logprobs_at_sampler_topk"], batch["sequence_id"], pos)
                stats.add_topk(b.tv_lower_T, b.kl_lower_T, b.sampler_mass_T)
                stats.add_centering(score_centering(b, batch["sampler_topk_ids"], batch.get("trainer_topk_ids")))
            if "sampler_kept_logmass" in batch:
                stats.add_kept_mass(batch["sampler_kept_logmass"])
        if on_batch:
            on_batch(t.log_ratio_T.size)

    seq_ids, agg = seqagg.result()
    table = SequenceTable.from_reduced(seq_ids, agg, agg.get("sum_adv"))
    n_tokens = int(table.n_tokens_S.sum()) if seq_ids.size else 0
    if n_tokens == 0:
        what = "has no token rows" if hygiene.rows_read == 0 else "has no token with finite logprobs"
        raise InputError(f"{path}: the input {what}")
    warnings = ([source.incomplete] if source.incomplete else []) + hygiene.warnings() + _position_warnings(positions.finish())
    seq = SequenceInputs(
        n_tokens_S=table.n_tokens_S,
        seq_log_ratio_S=table.sum_l_S,
        min_log_ratio_S=table.min_l_S,
        max_log_ratio_S=table.max_l_S,
        mean_k3_S=table.sum_k3_S / table.n_tokens_S,
        advantage_S=table.advantage_S,
        clamped_sum_k1_S=agg.get("sum_ck1"), clamped_sum_k2_S=agg.get("sum_ck2"), clamped_sum_k3_S=agg.get("sum_ck3"),
    )
    report = _report(stats, seq, table, source, has_topk) if request.report else None
    mask_out = None
    if masks:
        mask_columns = {k: agg[k] for k in masks.per_token_columns()}
        mask_out = _masks(masks, seq, mask_columns, n_tokens, seq_ids.size, has_adv)
        table.rules = masks.rule_columns(mask_columns, table.n_tokens_S)
    return AnalysisResult(n_tokens, int(seq_ids.size), report, mask_out, warnings, source.run_config, source, table)


def _position_warnings(runs: PositionRuns) -> list[str]:
    """Duplicates were refused while reading (exactly, ``positions.py``); gaps and late starts only warn."""
    warnings = []
    gaps = runs.runs_S > 1
    if gaps.any():
        warnings.append(f"{int(gaps.sum())} sequence(s) have gaps in their positions (tokens missing or masked out)")
    late = runs.first_position_S > 0
    if late.any():
        warnings.append(f"{int(late.sum())} sequence(s) do not start at position 0")
    return warnings


def _quantiles(x: np.ndarray) -> dict[str, float | None]:
    if x.size == 0:
        return {f"{q:g}": None for q in RATIO_QUANTILES}
    return {f"{q:g}": _f(v) for q, v in zip(RATIO_QUANTILES, np.quantile(x, RATIO_QUANTILES))}


def _report(stats: TokenStats, seq: SequenceInputs, table: SequenceTable, source: Source, has_topk: bool) -> dict:
    S = seq.seq_log_ratio_S
    mean_l = seq.mean_log_ratio_S
    with np.errstate(over="ignore"):
        geo = np.exp(mean_l)
    chi2_seq = float(np.mean(np.exp(2 * np.clip(S, -CHI2_SEQ_CLIP, CHI2_SEQ_CLIP))) - 1.0)
    metrics = stats.metrics()
    topk = stats.topk()
    metrics["seq_log_ratio_mean"] = _f(S.mean())
    metrics["geo_ratio_mean"] = _f(geo.mean())
    metrics["tv_topk_lower_mean"] = topk["tv_topk_lower_mean"] if topk else None
    metrics["kl_topk_lower_mean"] = topk["kl_topk_lower_mean"] if topk else None
    sequence_metrics = {
        "seq_log_ratio": {"mean": _f(S.mean()), "quantiles": _quantiles(S)},
        "geo_ratio": {"mean": _f(geo.mean()), "quantiles": _quantiles(geo)},
        "max_tv": {"mean": _f(table.max_tv_S.mean()), "quantiles": _quantiles(table.max_tv_S)},
        "log_ppl_diff": {"mean": _f((-mean_l).mean()), "quantiles": _quantiles(-mean_l)},
        "chi2_seq": _f(chi2_seq),
        "chi2_seq_clip": CHI2_SEQ_CLIP,
        "length": {"mean": _f(seq.n_tokens_S.mean()), "max": int(seq.n_tokens_S.max())},
    }
    return {
        "metrics": metrics,
        "sequence_metrics": sequence_metrics,
        "topk": topk,
        "score_centering": stats.score_centering(),
        "kept_mass": stats.kept_mass(),
        "breakdowns": stats.breakdowns(),
        "interpretation": interpret(metrics, source.run_config),
    }


def _masks(masks: MaskAccumulator, seq: SequenceInputs, per_seq: dict[str, np.ndarray], tokens: int, sequences: int,
           has_adv: bool) -> dict:
    extra = masks.finish(seq, per_seq)
    rows: list[dict] = []
    sweeps: dict[str, dict] = {}
    pending: dict[str, dict] = {}
    for u in masks.units:
        row = unit_row(u, tokens, sequences, has_adv)
        if u.sweep is None:
            rows.append(row)
            if u.hypothesis == "A>0":
                pending[u.rule.label] = row
            elif u.hypothesis == "A<0" and u.rule.label in pending:
                rows.append(mean_row(pending.pop(u.rule.label), row))
        else:
            name, _, param = u.sweep.partition(".")
            sw = sweeps.setdefault(u.sweep, {"rule": name, "param": param, "level": u.rule.level, "points": []})
            sw["points"].append({"value": u.rule.params[param], "hypothesis": u.hypothesis, **{
                k: row[k] for k in ("token_reject_rate", "token_reweight_rate", "tokens_rejected", "tokens_reweighted",
                                    "sequences_with_rejection", "sequences_rejected", "sequence_reject_rate")}})
    return {"rules": rows, "tokens_by_sampler_prob": extra["tokens_by_sampler_prob"],
            "tokens_by_pq_sign": extra["tokens_by_pq_sign"], "tail_reading": tail_reading(rows),
            "agreement": extra["agreement"], "sweeps": list(sweeps.values()), "examples": extra["examples"]}


def interpret(metrics: dict, run: dict | None) -> list[dict[str, Any]]:
    """Short readings against published yardsticks, each with its source."""
    out = []
    lag = policy_lag(run)
    tv = metrics.get("tv_token_mean")
    if tv is not None:
        if tv < 0.005:
            verdict = "normal (below 0.005)"
        elif tv <= 0.01:
            verdict = "elevated (0.005 to 0.01)"
        elif lag is None:
            verdict = "high (above 0.01): points at an inference precision problem"
        else:  # the yardstick is for numerics alone; lag moves the distributions by itself
            verdict = "high (above 0.01); with policy lag in the gap, not a verdict on inference precision"
        out.append({"metric": "tv_token_mean", "value": tv, "reading": verdict,
                    "source": "verl FAQ on rollout_probs_diff (<0.005 normal, >0.01 precision problem)"})
    k3 = metrics.get("k3_mean")
    if k3 is not None:
        reading = "around or below the ~1e-3 typical of healthy runs" if k3 <= 2e-3 else "well above the ~1e-3 typical of healthy runs"
        out.append({"metric": "k3_mean", "value": k3, "reading": reading,
                    "source": "NeMo-RL gen_kl_error (~1e-3 typical)"})
    tail = (metrics.get("ratio_tail_high") or {}).get("2")
    low = (metrics.get("ratio_tail_low") or {}).get("2")
    if tail is not None and low is not None:
        frac = tail + low
        out.append({"metric": "ratio outside [0.5, 2]", "value": frac,
                    "reading": f"{frac:.2%} of tokens would be rejected by a [0.5, 2] token mask",
                    "source": "SkyRL/TRL token_mask defaults"})
    if lag is not None:
        out.append({"metric": "trainer_logprob", "value": None, "reading": lag, "source": "file metadata"})
    return out


def policy_lag(run: dict | None) -> str | None:
    """Why the trainer's weights differ from the sampler's, when the run says they do.

    Imports carry it in ``source.semantics`` (an asynchronous trainer, e.g.
    prime-rl), probes in ``semantics`` (``--trainer-checkpoint``); both set
    ``policy_lag: true`` and may explain it in ``policy_lag_note``.
    """
    for sem in ((run or {}).get("semantics"), ((run or {}).get("source") or {}).get("semantics")):
        if isinstance(sem, dict) and sem.get("policy_lag") is True:
            return sem.get("policy_lag_note") or ("trainer logprobs were taken at update time by an asynchronous trainer: "
                                                  "the gap mixes policy lag with numerical mismatch")
    return None
