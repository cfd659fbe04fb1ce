"""One configuration's record: its gaps against the reference, their decomposition, routes and costs.

The baseline's record is made first (:func:`config_record`); each variant
then runs (a trainer-side one rescores the baseline's tokens in this
process, a sampler-side one samples again in its own), is recorded the same
way, and is compared with the baseline (:func:`.effects.deltas`). What every
variant needs of the baseline travels as one :class:`BaselineRun`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from .. import rundir
from .decompose import decompose
from .determinism import changed_share, same_tokens
from .document import (
    Absent,
    AbsentRoutes,
    Costs,
    Gap,
    Gaps,
    RoutesAgainstReference,
    SamplerFailed,
    SelfConsistency,
    Shares,
    Skipped,
    SkippedWithNote,
    Timing,
    VariantEntry,
    VariantFailed,
    VariantOk,
    VariantThroughput,
)
from .effects import deltas
from .options import DiagnoseOptions
from .pairs import load_tokens, sequence_slices, write_pair_run
from .reference import reference_rows
from .routes import flips_against_reference, replay_failed, replay_unavailable
from .sampler_process import Launched, launch
from .sampler_result import SamplerResult
from .timing import Timer
from .variants import Configuration, Variant, apply, directory_name

RefRows = tuple[np.ndarray, dict[int, np.ndarray]]
"""the reference's logprob of every token row, and (MoE) its routes per sequence id."""


@dataclass(frozen=True)
class ConfigRecord:
    """One configuration's gaps, their decomposition, routes and costs; ``result``: its total gap's analysis
    (the per-sequence sums a variant's effect is bootstrapped from)."""

    gaps: Gaps
    decomposition: Shares
    routes: RoutesAgainstReference | Absent | AbsentRoutes
    costs: Costs
    certified: bool
    result: Any


@dataclass(frozen=True)
class Ran:
    """A variant that ran: its process's start-up and wall seconds, and its timing rounds (a trainer-side
    variant's come later, :func:`with_timing`)."""

    startup_s: float | None
    wall_s: float | None
    timing: Timing | None = None


@dataclass(frozen=True)
class NotRan:
    """A variant that did not run, and why; ``sampler``: its own sampler process failed (at ``stage``)."""

    reason: str
    sampler: bool = False
    stage: str | None = None
    log: str | None = None


@dataclass
class BaselineRun:
    """The baseline as the variants see it: its options, tokens, reference rows and record."""

    opts: DiagnoseOptions
    cfg: Configuration
    tokens: dict[str, np.ndarray]
    ref: RefRows
    reference: Any
    """the loaded reference model (:class:`.reference.Reference`)."""
    prompt_ids: list[list[int]]
    record: ConfigRecord


def variant_dir(opts: DiagnoseOptions, v: Variant) -> Path:
    return opts.out / "variants" / directory_name(v.name)


def variant_record(base: BaselineRun, v: Variant, ran: Ran | NotRan) -> VariantEntry:
    """The record of a variant that ran (``ran``: its run and timing, or where and why it failed); its rank and
    its throughput against the baseline's are :func:`.effects.rank`'s to fill in."""
    cfg = apply(base.cfg, v)
    out = variant_dir(base.opts, v)
    if isinstance(ran, NotRan):
        if ran.sampler:  # a sampler that ran out of time is a timeout, not a failure of the setting
            status = "timed out" if ran.stage == "timeout" else "failed"
            return SamplerFailed(v.name, "sampler", v.changes, str(out), status, ran.stage, ran.reason, ran.log)
        return VariantFailed(v.name, v.side, v.changes, str(out), "failed", ran.reason)
    why = replay_failed(out) if cfg.trainer.replay_routes else None
    if why:  # a trainer that ignored the request would show routing owning nothing
        return VariantFailed(v.name, v.side, v.changes, str(out), "failed", why)
    tokens = load_tokens(out)
    ref = (
        base.ref if v.side == "trainer" else reference_rows(base.reference, tokens, base.prompt_ids, base.opts.sampling)
    )
    rec = config_record(v.name, out, tokens, ref, base.reference, ran, base.opts, paired=v.side == "trainer")
    # paired whenever the variant scored the very tokens the baseline scored: a trainer-side variant always,
    # a sampler-side one that happened to sample them all again
    delta = deltas(base.record.result, rec.result, same_tokens(base.tokens, tokens), base.opts.bootstrap)
    return VariantOk(
        name=v.name,
        side=v.side,
        changes=v.changes,
        run_dir=str(out),
        status="ok",
        metrics=rec.gaps.total.metrics,
        gaps=rec.gaps,
        decomposition=rec.decomposition,
        routes=rec.routes,
        throughput=VariantThroughput(rec.costs, ran.timing, None, None),
        certified=rec.certified,
        delta=delta,
        tokens_changed_share=changed_share(base.tokens, tokens, v.side),
        rank=0,
    )


def with_timing(record: VariantEntry, timing: Timing | None) -> VariantEntry:
    """A trainer-side variant's record with its timing rounds, which may come after the record."""
    if not isinstance(record, VariantOk):
        return record
    return replace(record, throughput=replace(record.throughput, timing=timing))


def rescored(base: BaselineRun, cfg: Configuration, out: Path) -> Ran | NotRan:
    """The baseline's tokens rescored by a trainer-side variant's trainer (untimed); or why not."""
    from ..probe.rescore import rescore

    baseline_dir = base.opts.out / "baseline"
    why = replay_unavailable(baseline_dir, cfg.sampler.kind) if cfg.trainer.replay_routes else None
    if why:
        return NotRan(why)
    t0 = time.perf_counter()
    try:
        rescore(baseline_dir, out, cfg.trainer)
    except Exception as e:  # a trainer that cannot load this setting is a result for this variant only
        return NotRan(f"{type(e).__name__}: {e}".splitlines()[0])
    return Ran(startup_s=None, wall_s=time.perf_counter() - t0)


def launch_variant(opts: DiagnoseOptions, base_cfg: Configuration, v: Variant, *, serve: bool) -> Launched:
    """A sampler-side variant's process, started: it starts its engine and probes while the caller goes on."""
    return launch(opts, apply(base_cfg, v), variant_dir(opts, v), repeat=False, prefill=False, serve=serve)


def sampler_timed(base: BaselineRun, timer: Timer, launched: Launched) -> Ran | NotRan:
    """A sampler-side variant's probe, collected, and its timing rounds against the baseline's sampler (the
    variant's process is closed after them); or where and why it failed."""
    run, server = launched.wait()
    timing = timer.sampler(server, base.record.costs)
    if not run.ok:
        return NotRan(run.reason or "", sampler=True, stage=run.stage, log=run.log)
    return Ran(run.startup_s, run.wall_s, timing)


def config_record(
    name: str, run_dir: Path, tokens, ref: RefRows, reference, run: Ran, opts: DiagnoseOptions, paired: bool
) -> ConfigRecord:
    """Total gap (report metrics), the reference gaps and decomposition, each side's route flips against the
    reference, and the costs of one configuration. ``ref``: the reference's logprobs and routes of these tokens."""
    from ..analysis.engine import AnalysisRequest, analyse
    from ..certify import certified_or_false

    ref_lp, ref_routes = ref
    total = analyse(str(run_dir), AnalysisRequest(report=True))
    sampler_gap, trainer_gap = _reference_gaps(name, tokens, ref_lp, reference, opts)
    return ConfigRecord(
        gaps=Gaps(_gap(total, run_dir), sampler_gap, trainer_gap),
        decomposition=decompose(tokens["sampler_logprob"], tokens["trainer_logprob"], ref_lp),
        routes=flips_against_reference(run_dir, ref_routes, reference.moe_layers),
        costs=_costs(run_dir, run, opts, paired, int(tokens["sampler_logprob"].size)),
        certified=certified_or_false(run_dir),
        result=total,
    )


def _reference_gaps(name: str, tokens, ref_lp: np.ndarray, reference, opts: DiagnoseOptions) -> tuple[Gap, Gap]:
    """Each side against the reference, written as run directories under ``pairs/CONFIG/`` and analysed."""
    from ..analysis.engine import AnalysisRequest, analyse

    pairs_dir = opts.out / "pairs" / directory_name(name)
    lq, lp = tokens["sampler_logprob"], tokens["trainer_logprob"]
    meta = {"diagnose_configuration": name, "reference_dtype": reference.dtype}
    s_dir = write_pair_run(
        pairs_dir / "sampler_vs_reference", tokens, lq, ref_lp, {**meta, "pair": "sampler_vs_reference"}
    )
    t_dir = write_pair_run(
        pairs_dir / "trainer_vs_reference", tokens, ref_lp, lp, {**meta, "pair": "trainer_vs_reference"}
    )
    return (
        _gap(analyse(str(s_dir), AnalysisRequest(report=True)), s_dir),
        _gap(analyse(str(t_dir), AnalysisRequest(report=True)), t_dir),
    )


def _costs(run_dir: Path, run: Ran, opts: DiagnoseOptions, paired: bool, rows: int) -> Costs:
    """The run's own timings as rates; a trainer-side variant keeps the baseline's sampler, and its cost."""
    timings = (rundir.read_manifest(run_dir) or {}).get("timings", {})
    sampling_s = timings.get("sampling_seconds") or None
    scoring_s = timings.get("scoring_seconds") or None
    n = int(timings.get("tokens", rows))
    if paired and sampling_s is None:
        sampling_s = (rundir.read_manifest(opts.out / "baseline") or {}).get("timings", {}).get("sampling_seconds")
    return Costs(
        tokens=n,
        startup_s=run.startup_s,
        sampler_tokens_per_s=n / sampling_s if sampling_s else None,
        trainer_tokens_per_s=n / scoring_s if scoring_s else None,
        sampling_s=sampling_s,
        scoring_s=scoring_s,
        wall_s=run.wall_s,
    )


def _gap(result, path: Path) -> Gap:
    return Gap(run_dir=str(path), tokens=result.tokens, sequences=result.sequences, metrics=result.report.metrics)


SELF_CONSISTENCY_NOTE = (
    "vLLM's prompt (prefill) logprobs are raw: T = 1 over the full vocabulary, in either logprobs mode; "
    "decode-time logprobs are compared with them only when they mean the same "
    "(raw_logprobs, or T = 1 without top-k/top-p, or greedy)"
)


def self_consistency(opts: DiagnoseOptions, base: SamplerResult, tokens) -> SelfConsistency | Skipped | SkippedWithNote:
    """Decode-time logprobs against the same engine's prefill of the same sequences, like with like."""
    from ..analysis.engine import AnalysisRequest, analyse

    s = opts.sampling
    truncates = s.top_p < 1.0 or (s.top_k or 0) > 0
    comparable = (
        s.logprobs_mode == "raw_logprobs"
        or (abs(s.temperature - 1.0) < 1e-12 and not truncates)
        or s.temperature < 1e-5
    )
    if base.prefill is None:
        return Skipped("skipped", "the sampler has no prefill scoring")
    if not comparable:
        return SkippedWithNote(
            "skipped",
            SELF_CONSISTENCY_NOTE,
            f"decode logprobs here are processed at T={s.temperature:g}"
            f"{' with truncation' if truncates else ''}: rerun with --logprobs-mode raw_logprobs",
        )
    prefill = _aligned(base.prefill.keys, base.prefill.batch, tokens, opts.sampling.n)
    path = write_pair_run(
        opts.out / "pairs" / "baseline" / "sampler_decode_vs_prefill",
        tokens,
        tokens["sampler_logprob"],
        prefill,
        {"pair": "sampler_decode_vs_prefill"},
    )
    return SelfConsistency("ok", _gap(analyse(str(path), AnalysisRequest(report=True)), path), SELF_CONSISTENCY_NOTE)


def _aligned(keys, values, tokens, n: int) -> np.ndarray:
    """Per-sequence lists keyed by (prompt_index, sample_index) laid out as the token rows."""
    by_seq = {p * n + k: v for (p, k), v in zip(keys, values, strict=True)}
    out = np.empty(tokens["sequence_id"].size)
    for sid, sl in sequence_slices(tokens["sequence_id"]):
        out[sl] = by_seq[sid]
    return out
