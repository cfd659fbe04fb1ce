"""One configuration's record: its gaps against the reference, their decomposition, routes and costs.

The baseline's record is made first (:func:`config_record`); each variant
then runs (a trainer-side one rescores the baseline's tokens in this
process, a sampler-side one samples again in its own), is recorded the same
way, and is compared with the baseline (:func:`.effects.deltas`). What every
variant needs of the baseline travels as one :class:`BaselineRun`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .. import rundir
from ..documents import to_json
from .decompose import decompose
from .determinism import changed_share, same_tokens
from .effects import deltas
from .options import DiagnoseOptions
from .pairs import load_tokens, sequence_slices, write_pair_run
from .reference import reference_rows
from .routes import flips_against_reference, replay_failed, replay_unavailable
from .sampler_process import Launched, launch
from .timing import Timer
from .variants import Configuration, Variant, apply, directory_name

RefRows = tuple[np.ndarray, dict[int, np.ndarray]]
"""the reference's logprob of every token row, and (MoE) its routes per sequence id."""


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
    record: dict[str, Any]


def variant_dir(opts: DiagnoseOptions, v: Variant) -> Path:
    return opts.out / "variants" / directory_name(v.name)


def variant_record(base: BaselineRun, v: Variant, ran: dict[str, Any]) -> dict[str, Any]:
    """The record of a variant that ran (``ran``: its run and timing, or where and why it failed)."""
    cfg = apply(base.cfg, v)
    out = variant_dir(base.opts, v)
    record: dict[str, Any] = {"name": v.name, "side": v.side, "changes": v.changes, "run_dir": str(out)}
    if "reason" in ran:  # a sampler that ran out of time is a timeout, not a failure of the setting
        return {**record, "status": "timed out" if ran.get("stage") == "timeout" else "failed", **ran}
    why = replay_failed(out) if cfg.trainer.replay_routes else None
    if why:  # a trainer that ignored the request would show routing owning nothing
        return {**record, "status": "failed", "reason": why}
    tokens = load_tokens(out)
    ref = (
        base.ref if v.side == "trainer" else reference_rows(base.reference, tokens, base.prompt_ids, base.opts.sampling)
    )
    rec = config_record(v.name, out, tokens, ref, base.reference, ran["run"], base.opts, paired=v.side == "trainer")
    # paired whenever the variant scored the very tokens the baseline scored: a trainer-side variant always,
    # a sampler-side one that happened to sample them all again
    rec["throughput"]["timing"] = ran.get("timing")  # a trainer-side variant's rounds may come after its record
    rec["delta"] = deltas(
        base.record["result"], rec.pop("result"), same_tokens(base.tokens, tokens), base.opts.bootstrap
    )
    rec["tokens_changed_share"] = changed_share(base.tokens, tokens, v.side)
    return {**record, "status": "ok", **rec}


def rescored(base: BaselineRun, cfg: Configuration, out: Path) -> dict[str, Any]:
    """The baseline's tokens rescored by a trainer-side variant's trainer (untimed); or why not."""
    from ..probe.rescore import rescore

    baseline_dir = base.opts.out / "baseline"
    why = replay_unavailable(baseline_dir, cfg.sampler.kind) if cfg.trainer.replay_routes else None
    if why:
        return {"reason": why}
    t0 = time.perf_counter()
    try:
        rescore(baseline_dir, out, cfg.trainer)
    except Exception as e:  # a trainer that cannot load this setting is a result for this variant only
        return {"reason": f"{type(e).__name__}: {e}".splitlines()[0]}
    return {"run": {"status": "ok", "startup_s": None, "wall_s": time.perf_counter() - t0}}


def launch_variant(opts: DiagnoseOptions, base_cfg: Configuration, v: Variant, *, serve: bool) -> Launched:
    """A sampler-side variant's process, started: it starts its engine and probes while the caller goes on."""
    return launch(opts, apply(base_cfg, v), variant_dir(opts, v), repeat=False, prefill=False, serve=serve)


def sampler_timed(base: BaselineRun, timer: Timer, launched: Launched) -> dict[str, Any]:
    """A sampler-side variant's probe, collected, and its timing rounds against the baseline's sampler (the
    variant's process is closed after them); or where and why it failed."""
    run, server = launched.wait()
    timing = timer.sampler(server, base.record["throughput"])
    if run["status"] != "ok":
        return {"stage": run.get("stage"), "reason": run["reason"], "log": run.get("log")}
    return {"run": run, "timing": timing}


def config_record(
    name: str, run_dir: Path, tokens, ref: RefRows, reference, run: dict, opts: DiagnoseOptions, paired: bool
) -> dict[str, Any]:
    """Total gap (report metrics), the reference gaps and decomposition, each side's route flips against the
    reference, and the costs of one configuration. ``ref``: the reference's logprobs and routes of these tokens."""
    from ..analysis.engine import AnalysisRequest, analyse
    from ..certify import certified_or_false

    ref_lp, ref_routes = ref
    total = analyse(str(run_dir), AnalysisRequest(report=True))
    gaps = {"total": _gap(total, run_dir), **_reference_gaps(name, tokens, ref_lp, reference, opts)}
    return {
        "metrics": gaps["total"]["metrics"],
        "gaps": gaps,
        "decomposition": decompose(tokens["sampler_logprob"], tokens["trainer_logprob"], ref_lp),
        "routes": flips_against_reference(run_dir, ref_routes, reference.moe_layers),
        "throughput": _throughput(run_dir, run, opts, paired, int(tokens["sampler_logprob"].size)),
        "certified": certified_or_false(run_dir),
        "result": total,
    }


def _reference_gaps(name: str, tokens, ref_lp: np.ndarray, reference, opts: DiagnoseOptions) -> dict[str, Any]:
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
    return {
        "sampler_vs_reference": _gap(analyse(str(s_dir), AnalysisRequest(report=True)), s_dir),
        "trainer_vs_reference": _gap(analyse(str(t_dir), AnalysisRequest(report=True)), t_dir),
    }


def _throughput(run_dir: Path, run: dict, opts: DiagnoseOptions, paired: bool, rows: int) -> dict[str, Any]:
    """The run's own timings as rates; a trainer-side variant keeps the baseline's sampler, and its cost."""
    timings = (rundir.read_manifest(run_dir) or {}).get("timings", {})
    sampling_s = timings.get("sampling_seconds") or None
    scoring_s = timings.get("scoring_seconds") or None
    n = int(timings.get("tokens", rows))
    if paired and sampling_s is None:
        sampling_s = (rundir.read_manifest(opts.out / "baseline") or {}).get("timings", {}).get("sampling_seconds")
    return {
        "tokens": n,
        "startup_s": run.get("startup_s"),
        "sampler_tokens_per_s": n / sampling_s if sampling_s else None,
        "trainer_tokens_per_s": n / scoring_s if scoring_s else None,
        "sampling_s": sampling_s,
        "scoring_s": scoring_s,
        "wall_s": run.get("wall_s"),
    }


def _gap(result, path: Path) -> dict[str, Any]:
    return {
        "run_dir": str(path),
        "tokens": result.tokens,
        "sequences": result.sequences,
        "metrics": to_json(result.report.metrics),
    }


SELF_CONSISTENCY_NOTE = (
    "vLLM's prompt (prefill) logprobs are raw: T = 1 over the full vocabulary, in either logprobs mode; "
    "decode-time logprobs are compared with them only when they mean the same "
    "(raw_logprobs, or T = 1 without top-k/top-p, or greedy)"
)


def self_consistency(opts: DiagnoseOptions, base: dict, tokens) -> dict[str, Any]:
    """Decode-time logprobs against the same engine's prefill of the same sequences, like with like."""
    from ..analysis.engine import AnalysisRequest, analyse

    s = opts.sampling
    truncates = s.top_p < 1.0 or (s.top_k or 0) > 0
    comparable = (
        s.logprobs_mode == "raw_logprobs"
        or (abs(s.temperature - 1.0) < 1e-12 and not truncates)
        or s.temperature < 1e-5
    )
    if "prefill" not in base:
        return {"status": "skipped", "reason": "the sampler has no prefill scoring"}
    if not comparable:
        return {
            "status": "skipped",
            "note": SELF_CONSISTENCY_NOTE,
            "reason": f"decode logprobs here are processed at T={s.temperature:g}"
            f"{' with truncation' if truncates else ''}: rerun with --logprobs-mode raw_logprobs",
        }
    prefill = _aligned(base["prefill"]["keys"], base["prefill"]["batch"], tokens, opts.sampling.n)
    path = write_pair_run(
        opts.out / "pairs" / "baseline" / "sampler_decode_vs_prefill",
        tokens,
        tokens["sampler_logprob"],
        prefill,
        {"pair": "sampler_decode_vs_prefill"},
    )
    out = _gap(analyse(str(path), AnalysisRequest(report=True)), path)
    out["note"] = SELF_CONSISTENCY_NOTE
    return {"status": "ok", **out}


def _aligned(keys, values, tokens, n: int) -> np.ndarray:
    """Per-sequence lists keyed by (prompt_index, sample_index) laid out as the token rows."""
    by_seq = {p * n + k: v for (p, k), v in zip(keys, values, strict=True)}
    out = np.empty(tokens["sequence_id"].size)
    for sid, sl in sequence_slices(tokens["sequence_id"]):
        out[sl] = by_seq[sid]
    return out
