"""Orchestration of ``diagnose``: baseline, reference, variants, determinism, cost.

Order of work, cheapest checks first:

1. variants, checkpoint and prompts are checked before any engine starts;
2. the baseline samples in its own process (:mod:`.worker`), samples again
   with the same seed and scores its own sequences by prefill;
3. the float64 reference scores the baseline's tokens; the four pairs are
   written as run directories and decomposed;
4. the baseline trainer scores the same sequences alone, in the full batch
   and shuffled;
5. each variant runs: trainer-side ones rescore the baseline's samples
   (no sampling, in this process), sampler-side ones sample again in their
   own process; a variant that fails is recorded with its reason and the
   others still run;
6. every variant's total gap is compared with the baseline's (bootstrap over
   sequences) and decomposed against the reference.

Layout of ``OUT``: ``baseline/`` and ``variants/NAME/`` are probe run
directories; ``pairs/CONFIG/PAIR/`` hold the reference pairs; ``diagnose.json``
is the payload the CLI prints.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from .. import rundir
from ..documents import to_json
from ..errors import MismatchscopeError, SamplerError, UsageError
from ..probe.types import SamplerConfig, SamplingConfig, ScoreRequest, TrainerConfig
from ..progress import Progress
from .decompose import decompose
from .determinism import changed_share, same_tokens, sampler_checks, trainer_checks
from .effects import Bootstrap, deltas, rank
from .locate.run import LocateOptions
from .pairs import load_tokens, sequence_slices, write_pair_run
from .reading import finish
from .routes import REPLAY_KEY, flips_against_reference, replay_failed, replay_unavailable
from .timing import SamplerServer, Timer
from .variants import Configuration, Variant, apply, check_names, directory_name

WORKER_TIMEOUT_S = 900


@dataclass(frozen=True)
class DiagnoseOptions:
    checkpoint: Path
    prompts: Path
    out: Path
    sampling: SamplingConfig
    sampler: SamplerConfig
    trainer: TrainerConfig
    variants: list[Variant]
    env: dict[str, str] = field(default_factory=dict)
    bootstrap: Bootstrap = field(default_factory=Bootstrap)
    determinism: bool = True
    reference_dtype: str | None = None
    """None: float64 where it fits."""
    plots: Path | None = None
    """the folder the CLI writes the Pareto picture into (checked here, with every other output)."""
    html: Path | None = None
    matrix: Path | None = None
    """the matrix file the variants came from: an input no output may replace."""
    locate: LocateOptions | None = None
    """``--locate``: localise the gap of every configuration, after everything else (:mod:`.locate`)."""


SAMPLER_KINDS = ("vllm", "hf")
"""diagnose starts its own sampler for every configuration: an engine in-process, or transformers' generate."""


def check_options(opts: DiagnoseOptions):
    """Everything that can be checked without an engine, for the baseline and every variant; returns the
    checkpoint info. The probe's own checks judge each configuration, so diagnose refuses exactly what
    probe would refuse, before the first engine starts."""
    from ..probe.checkpoint import inspect_checkpoint
    from ..probe.options import check_sampling
    from ..probe.prompts import load_prompts

    check_sampling(opts.sampling)
    if opts.sampler.kind not in SAMPLER_KINDS:
        raise UsageError(
            f"diagnose starts its own samplers; --sampler {opts.sampler.kind} is not one of them",
            hint=f"use --sampler {' or --sampler '.join(SAMPLER_KINDS)}",
        )
    check_names(opts.variants)
    base = Configuration(opts.sampler, opts.trainer, dict(opts.env))
    if base.trainer.replay_routes:
        raise UsageError(
            "the baseline trainer cannot replay routes: the baseline records them",
            hint=f"vary it instead: --vary {REPLAY_KEY}=true",
        )
    configurations = [("baseline", base)] + [
        (v.name, apply(base, v)) for v in opts.variants if v.skip_reason is None
    ]  # a skipped entry is reported, never started
    _check_outputs(opts)
    for name, cfg in configurations:  # the options alone first: the cheapest checks
        _check_configuration(opts, cfg, name)
    load_prompts(opts.prompts)
    info = inspect_checkpoint(
        opts.checkpoint, allow_pickle=opts.trainer.allow_pickle, trust_remote_code=opts.trainer.trust_remote_code
    )
    for name, cfg in configurations:
        _check_configuration(opts, cfg, name, info)
    return info


def _check_configuration(opts: DiagnoseOptions, cfg: Configuration, name: str, info=None) -> None:
    """The probe's checks on one configuration: its options, or (``info`` given) what needs the checkpoint.
    A variant's refusal names the variant."""
    from ..probe.options import ProbeOptions, check_against_checkpoint, check_engine_installed
    from ..probe.options import check_options as check_probe_options

    out = opts.out / ("baseline" if name == "baseline" else f"variants/{directory_name(name)}")
    probe = ProbeOptions(
        checkpoint=opts.checkpoint,
        prompts=opts.prompts,
        out=out,
        sampling=opts.sampling,
        sampler=cfg.sampler,
        trainer=cfg.trainer,
    )
    try:
        if info is None:
            check_probe_options(probe)
            check_engine_installed(cfg.sampler)
            return
        check_against_checkpoint(probe, info)
        if cfg.trainer.replay_routes and not info.is_moe:
            raise UsageError(
                f"{REPLAY_KEY} needs a mixture-of-experts checkpoint, and {info.path} is dense",
                hint="drop the variant, or diagnose an MoE checkpoint",
            )
    except MismatchscopeError as e:
        if name == "baseline":
            raise
        raise type(e)(f"variant {name!r}: {Exception.__str__(e)}", hint=e.hint) from None


def _check_outputs(opts: DiagnoseOptions) -> None:
    """--out a new or empty folder outside any run; --html and --plots (and the picture's file) on no input."""
    from ..outputs import check_all, check_run_out

    inputs = [opts.checkpoint, opts.prompts, opts.matrix]
    if Path(opts.checkpoint).is_dir():  # a checkpoint's files are inputs too: --html CKPT/config.json would replace one
        inputs += sorted(Path(opts.checkpoint).iterdir())
    known = check_all(files=[(opts.html, "--html")], dirs=[(opts.plots, "--plots")], inputs=inputs)
    check_run_out(opts.out, "--out", known)
    _check_empty_out(opts.out)
    if opts.plots is not None or opts.html is not None:
        from ..outputs import require_matplotlib
        from .cost import PARETO_NAME

        require_matplotlib()
        known.refuse(Path(opts.plots or opts.out) / f"{PARETO_NAME}.png", "--plots")


def _check_empty_out(out: Path) -> None:
    if out.exists() and not rundir.is_empty_dir(out):
        raise UsageError(f"{out} exists and is not empty", hint="choose a new --out")


def run_diagnose(opts: DiagnoseOptions, progress: Progress | None = None) -> dict[str, Any]:
    """The whole diagnose. When it stops without a result (an error, an interrupt) it removes what it wrote,
    so the same command can run again into the same ``--out``."""
    progress = progress or Progress()
    info = check_options(opts)
    existed = opts.out.exists()
    try:
        with rundir.lock_run(opts.out):  # one diagnose per --out; checked again under the lock
            _check_empty_out(opts.out)
            return _diagnose_locked(opts, info, progress)
    except BaseException:
        _remove_partial(opts.out, existed)
        raise


def _remove_partial(out: Path, existed: bool) -> None:
    """Everything this diagnose wrote under ``out`` (it was new, or empty, when it started)."""
    import shutil

    if (out / "diagnose.json").exists():
        return
    if not existed:
        shutil.rmtree(out, ignore_errors=True)
        return
    for child in list(out.iterdir()) if out.is_dir() else []:
        if child.is_dir() and not child.is_symlink():
            shutil.rmtree(child, ignore_errors=True)
        else:
            child.unlink(missing_ok=True)


def _diagnose_locked(opts: DiagnoseOptions, info, progress: Progress) -> dict[str, Any]:
    """Sample the baseline in a process that stays up to serve timing rounds, then the rest; the process is
    closed whatever happens."""
    opts = replace(opts, sampling=replace(opts.sampling, max_tokens=_max_tokens(opts, info)))
    if opts.locate is not None:
        from .locate.run import fit_budget

        opts = replace(opts, locate=fit_budget(opts.locate, info.config))
    t_start = time.perf_counter()
    base_cfg = Configuration(opts.sampler, opts.trainer, dict(opts.env))

    progress.note(
        f"baseline: sampler {opts.sampler.kind}/{opts.sampler.dtype}, trainer {opts.trainer.dtype} (own process)"
    )
    base_dir = opts.out / "baseline"
    base, base_server = _sampler_run(opts, base_cfg, base_dir, repeat=opts.determinism, prefill=True, serve=True)
    try:
        return _diagnose_served(opts, info, progress, base, base_server, t_start)
    finally:
        if base_server is not None:
            base_server.close()


def _diagnose_served(opts, info, progress: Progress, base, base_server, t_start: float) -> dict[str, Any]:
    """The diagnose past the baseline's sampling, while its sampler process serves timing rounds."""
    from ..probe.trainer import HFTrainer
    from .reference import load_reference

    base_cfg = Configuration(opts.sampler, opts.trainer, dict(opts.env))
    base_dir = opts.out / "baseline"
    if base["status"] != "ok":
        raise SamplerError(
            f"the baseline sampler failed ({base['stage']}): {base['reason']}",
            hint="nothing was kept; `mismatchscope probe` with the same options shows the engine's own output",
        )
    base_tokens = load_tokens(base_dir)

    progress.note("reference forward of the baseline's tokens")
    t0 = time.perf_counter()
    reference = load_reference(info, trust_remote_code=opts.trainer.trust_remote_code, dtype=opts.reference_dtype)
    prompt_ids = _prompt_ids(base_dir)
    ref_lp, ref_routes = _reference_lp(reference, base_tokens, prompt_ids, opts.sampling)
    reference_s = time.perf_counter() - t0

    configs: dict[str, dict[str, Any]] = {}
    configs["baseline"] = _config_record(
        "baseline", base_dir, base_tokens, (ref_lp, ref_routes), reference, base, opts, paired=False
    )
    decomposition = dict(configs["baseline"]["gaps"])
    decomposition["sampler_decode_vs_prefill"] = _self_consistency(opts, base, base_tokens)
    decomposition["shares"] = configs["baseline"]["decomposition"]
    decomposition["routes"] = configs["baseline"]["routes"]

    determinism: dict[str, Any] = {}
    if opts.determinism:
        progress.note("determinism: repeat sampling, prefill and trainer batch invariance")
        determinism.update(sampler_checks(base, base_tokens, _engine_name(opts.sampler)))
        trainer = HFTrainer(info, opts.trainer)
        determinism.update(trainer_checks(trainer, _requests(base_dir, prompt_ids), opts.sampling, opts.bootstrap.seed))
        determinism["trainer_alone_vs_batch"]["compared"] = determinism["trainer_shuffled_vs_batch"]["compared"] = (
            f"trainer logprobs ({opts.trainer.dtype} model, fp32 log-softmax)"
        )
        del trainer

    variants_out = []
    timer = Timer(base_server, info, opts.trainer, _requests(base_dir, prompt_ids), opts.sampling)
    for v in opts.variants:
        if v.skip_reason:
            variants_out.append(
                {"name": v.name, "side": v.side, "changes": v.changes, "status": "skipped", "reason": v.skip_reason}
            )
            continue
        progress.note(f"variant {v.name} ({v.side} side)")
        variants_out.append(
            _variant(opts, base_cfg, v, configs, base_tokens, (ref_lp, ref_routes), reference, prompt_ids, timer)
        )

    payload = {
        "checkpoint": str(info.path),
        "out": str(opts.out),
        "device": _device(),
        "reference": {
            "dtype": reference.dtype,
            "note": reference.note,
            "seconds": reference_s,
            "moe_layers": reference.moe_layers,
        },
        "baseline": {
            "sampler": opts.sampler.to_dict(),
            "trainer": opts.trainer.to_dict(),
            "env": opts.env,
            "sampling": opts.sampling.to_dict(),
            "run_dir": str(base_dir),
            "metrics": configs["baseline"]["metrics"],
            "throughput": configs["baseline"]["throughput"],
            "certified": configs["baseline"]["certified"],
        },
        "decomposition": decomposition,
        "variants": variants_out,
        "determinism": determinism,
        "wall_s": time.perf_counter() - t_start,
    }
    if opts.locate is not None:  # last: it changes no number computed above
        from .locate.configurations import locate_all

        payload["locate"] = locate_all(opts, info, reference, variants_out, progress)
    rank(payload)
    from .price import zero_price

    payload["zero_price"] = zero_price(payload)
    finish(payload)
    write_document(opts.out, payload)
    return payload


def write_document(out: Path, payload: dict[str, Any]) -> None:
    """``OUT/diagnose.json``: the typed document of ``payload``, as ``--format json`` prints it."""
    from ..documents import document
    from .document import DiagnoseDocument

    text = json.dumps(_jsonable(document(DiagnoseDocument.of(payload))), indent=2, allow_nan=False) + "\n"
    rundir.atomic_write_bytes(out / "diagnose.json", text.encode())


# ------------------------------------------------------------ configurations


def _sampler_run(
    opts: DiagnoseOptions, cfg: Configuration, out: Path, *, repeat: bool, prefill: bool, serve: bool = False
) -> tuple[dict[str, Any], SamplerServer | None]:
    """One sampler configuration in a fresh interpreter (see :mod:`.worker`); with ``serve``, the process is
    kept up, its engine warm, to time sampling rounds (:mod:`.timing`), and returned when it started."""
    out.parent.mkdir(parents=True, exist_ok=True)
    spec_path = out.parent / f"{out.name}.spec.json"
    result_path = out.parent / f"{out.name}.result.json"
    log_path = out.parent / f"{out.name}.log"
    spec = {
        "checkpoint": str(opts.checkpoint),
        "prompts": str(opts.prompts),
        "out": str(out),
        "sampling": opts.sampling.to_dict(),
        "sampler": cfg.sampler.to_dict(),
        "trainer": cfg.trainer.to_dict(),
        "env": cfg.env,
        "repeat": repeat,
        "prefill": prefill,
        "result": str(result_path),
        "seed": opts.bootstrap.seed,
    }
    if opts.locate is not None:
        budget, n = opts.locate.budget, opts.locate.sequences
        spec["locate"] = {"sequences": n, "budget": budget, "path": str(out.parent / f"{out.name}.locate.npz")}
    t0 = time.perf_counter()
    server = None
    with open(log_path, "w") as log:
        if serve:
            server, code = _start_server(spec, spec_path, log)
        else:
            rundir.atomic_write_bytes(spec_path, json.dumps(spec, indent=2).encode())
            try:
                proc = subprocess.run(
                    [sys.executable, "-m", "mismatchscope.diagnose.worker", str(spec_path)],
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    timeout=WORKER_TIMEOUT_S,
                )
                code = proc.returncode
            except subprocess.TimeoutExpired:
                code = None
    wall = time.perf_counter() - t0
    result: dict[str, Any]
    if result_path.is_file():
        result = json.loads(result_path.read_text())
    elif code is None:
        result = {"status": "failed", "stage": "timeout", "reason": f"no result within {WORKER_TIMEOUT_S} s"}
    else:
        result = {
            "status": "failed",
            "stage": "engine process",
            "reason": f"the sampler process died (exit code {code}): {_last_line(log_path)}",
        }
    if result.get("stage") == "engine start-up":  # the worker's whole output is the log: the cause is there
        from ..probe.engine_log import cause_in_log

        result["reason"] = cause_in_log(log_path, result["reason"])
    result["process_wall_s"] = wall
    result["log"] = str(log_path)
    return result, server


def _start_server(spec: dict, spec_path: Path, log) -> tuple[SamplerServer | None, int | None]:
    """Start the worker as a timing server; wait until it has written its result (or ended)."""
    read_end, write_end = SamplerServer.pipe()
    spec["reply_fd"] = write_end
    rundir.atomic_write_bytes(spec_path, json.dumps(spec, indent=2).encode())
    proc = subprocess.Popen(
        [sys.executable, "-m", "mismatchscope.diagnose.worker", str(spec_path)],
        stdin=subprocess.PIPE,
        stdout=log,
        stderr=subprocess.STDOUT,
        pass_fds=(write_end,),
        text=True,
    )
    os.close(write_end)
    server = SamplerServer(proc, os.fdopen(read_end))
    if server.wait_ready(WORKER_TIMEOUT_S):
        return server, 0
    server.close()
    return None, proc.returncode


def _last_line(path: Path) -> str:
    lines = [ln.strip() for ln in path.read_text(errors="replace").splitlines() if ln.strip()]
    return lines[-1][:300] if lines else "no output"


def _variant(
    opts, base_cfg, v: Variant, configs, base_tokens, base_ref, reference, prompt_ids, timer: Timer
) -> dict[str, Any]:
    from ..probe.rescore import rescore

    cfg = apply(base_cfg, v)
    out = opts.out / "variants" / directory_name(v.name)
    record: dict[str, Any] = {"name": v.name, "side": v.side, "changes": v.changes, "run_dir": str(out)}
    if v.side == "trainer":
        why = replay_unavailable(opts.out / "baseline", cfg.sampler.kind) if cfg.trainer.replay_routes else None
        if why:
            return {**record, "status": "failed", "reason": why}
        t0 = time.perf_counter()
        try:
            rescore(opts.out / "baseline", out, cfg.trainer)
        except Exception as e:  # a trainer that cannot load this setting is a result for this variant only
            return {**record, "status": "failed", "reason": f"{type(e).__name__}: {e}".splitlines()[0]}
        run = {"status": "ok", "startup_s": None, "wall_s": time.perf_counter() - t0}
        timing = timer.trainer(cfg.trainer, configs["baseline"]["throughput"])
        tokens = load_tokens(out)
        ref = base_ref
    else:
        run, server = _sampler_run(opts, cfg, out, repeat=False, prefill=False, serve=timer.server is not None)
        timing = timer.sampler(server, configs["baseline"]["throughput"])
        if run["status"] != "ok":
            return {
                **record,
                "status": "failed",
                "stage": run.get("stage"),
                "reason": run["reason"],
                "log": run.get("log"),
            }
        tokens = load_tokens(out)
        ref = _reference_lp(reference, tokens, prompt_ids, opts.sampling)
    why = replay_failed(out) if cfg.trainer.replay_routes else None
    if why:  # a trainer that ignored the request would show routing owning nothing
        return {**record, "status": "failed", "reason": why}
    same = same_tokens(base_tokens, tokens)
    rec = _config_record(v.name, out, tokens, ref, reference, run, opts, paired=v.side == "trainer")
    # paired whenever the variant scored the very tokens the baseline scored: a trainer-side variant always,
    # a sampler-side one that happened to sample them all again
    rec["throughput"]["timing"] = timing
    rec["delta"] = deltas(configs["baseline"]["result"], rec.pop("result"), same, opts.bootstrap)
    rec["tokens_changed_share"] = changed_share(base_tokens, tokens, v.side)
    configs[v.name] = rec
    return {**record, "status": "ok", **rec}


def _config_record(name, run_dir: Path, tokens, ref, reference, run: dict, opts, paired: bool) -> dict[str, Any]:
    """Total gap (report metrics), the reference gaps and decomposition, each side's route flips against the
    reference, and the costs of one configuration. ``ref``: the reference's logprobs and routes of these tokens."""
    from ..analysis.engine import AnalysisRequest, analyse

    ref_lp, ref_routes = ref
    pairs_dir = opts.out / "pairs" / directory_name(name)
    lq, lp = tokens["sampler_logprob"], tokens["trainer_logprob"]
    meta = {"diagnose_configuration": name, "reference_dtype": reference.dtype}
    s_dir = write_pair_run(
        pairs_dir / "sampler_vs_reference", tokens, lq, ref_lp, {**meta, "pair": "sampler_vs_reference"}
    )
    t_dir = write_pair_run(
        pairs_dir / "trainer_vs_reference", tokens, ref_lp, lp, {**meta, "pair": "trainer_vs_reference"}
    )
    total = analyse(str(run_dir), AnalysisRequest(report=True))
    gaps = {
        "total": _gap(total, run_dir),
        "sampler_vs_reference": _gap(analyse(str(s_dir), AnalysisRequest(report=True)), s_dir),
        "trainer_vs_reference": _gap(analyse(str(t_dir), AnalysisRequest(report=True)), t_dir),
    }
    timings = (rundir.read_manifest(run_dir) or {}).get("timings", {})
    sampling_s = timings.get("sampling_seconds") or None
    scoring_s = timings.get("scoring_seconds") or None
    n = int(timings.get("tokens", lq.size))
    if paired and sampling_s is None:  # a trainer-side variant keeps the baseline's sampler, and its cost
        sampling_s = (rundir.read_manifest(opts.out / "baseline") or {}).get("timings", {}).get("sampling_seconds")
    throughput = {
        "tokens": n,
        "startup_s": run.get("startup_s"),
        "sampler_tokens_per_s": n / sampling_s if sampling_s else None,
        "trainer_tokens_per_s": n / scoring_s if scoring_s else None,
        "sampling_s": sampling_s,
        "scoring_s": scoring_s,
        "wall_s": run.get("wall_s"),
    }
    from ..certify import certified_or_false

    return {
        "metrics": gaps["total"]["metrics"],
        "gaps": gaps,
        "decomposition": decompose(lq, lp, ref_lp),
        "routes": flips_against_reference(run_dir, ref_routes, reference.moe_layers),
        "throughput": throughput,
        "certified": certified_or_false(run_dir),
        "result": total,
    }


def _gap(result, path: Path) -> dict[str, Any]:
    return {
        "run_dir": str(path),
        "tokens": result.tokens,
        "sequences": result.sequences,
        "metrics": to_json(result.report.metrics),
    }


def _self_consistency(opts: DiagnoseOptions, base: dict, tokens) -> dict[str, Any]:
    """Decode-time logprobs against the same engine's prefill of the same sequences, like with like."""
    from ..analysis.engine import AnalysisRequest, analyse

    s = opts.sampling
    truncates = s.top_p < 1.0 or (s.top_k or 0) > 0
    comparable = (
        s.logprobs_mode == "raw_logprobs"
        or (abs(s.temperature - 1.0) < 1e-12 and not truncates)
        or s.temperature < 1e-5
    )
    note = (
        "vLLM's prompt (prefill) logprobs are raw: T = 1 over the full vocabulary, in either logprobs mode; "
        "decode-time logprobs are compared with them only when they mean the same "
        "(raw_logprobs, or T = 1 without top-k/top-p, or greedy)"
    )
    if "prefill" not in base:
        return {"status": "skipped", "reason": "the sampler has no prefill scoring"}
    if not comparable:
        return {
            "status": "skipped",
            "note": note,
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
    out["note"] = note
    return {"status": "ok", **out}


def _aligned(keys, values, tokens, n: int) -> np.ndarray:
    """Per-sequence lists keyed by (prompt_index, sample_index) laid out as the token rows."""
    by_seq = {p * n + k: v for (p, k), v in zip(keys, values)}
    out = np.empty(tokens["sequence_id"].size)
    for sid, sl in sequence_slices(tokens["sequence_id"]):
        out[sl] = by_seq[sid]
    return out


# ------------------------------------------------------------ helpers


def _max_tokens(opts: DiagnoseOptions, info) -> int:
    """``--max-tokens 0`` resolved once, as probe resolves it, so every configuration asks for the same length."""
    from ..probe.prompts import load_prompts
    from ..probe.sampling import AUTO_MAX_TOKENS
    from ..probe.tokenizer import load_tokenizer, tokenize_prompts

    if opts.sampling.max_tokens:
        return opts.sampling.max_tokens
    tokenizer = load_tokenizer(info.path, trust_remote_code=opts.trainer.trust_remote_code)
    max_len = opts.sampler.max_model_len or info.max_model_len
    ids = tokenize_prompts(tokenizer, [p.text for p in load_prompts(opts.prompts)], max_model_len=max_len, max_tokens=1)
    return min(AUTO_MAX_TOKENS, max_len - max(len(p) for p in ids))


def _prompt_ids(run_dir: Path) -> list[list[int]]:
    from ..probe.writer import RunDir

    return [r["prompt_token_ids"] for r in RunDir(run_dir).read_prompts().to_pylist()]


def _requests(run_dir: Path, prompt_ids) -> list[ScoreRequest]:
    from ..probe.writer import RunDir

    done = sorted(RunDir(run_dir).read_samples(), key=lambda c: (c.prompt_index, c.sample_index))
    return [ScoreRequest(prompt_ids[c.prompt_index], c.token_ids, c.topk_ids) for c in done]


def _reference_lp(reference, tokens, prompt_ids, sampling: SamplingConfig) -> tuple[np.ndarray, dict[int, np.ndarray]]:
    """The reference's logprob of every token row, and (MoE) its routes: sequence id -> [input position, layer, k]."""
    slices = sequence_slices(tokens["sequence_id"])
    prompts = [prompt_ids[int(tokens["prompt_id"][sl.start])] for _, sl in slices]
    comps = [tokens["token_id"][sl].tolist() for _, sl in slices]
    out = np.empty(tokens["sequence_id"].size)
    routes: list[np.ndarray] = []
    for (_, sl), lp in zip(slices, reference.score(prompts, comps, sampling, routes=routes)):
        out[sl] = lp
    return out, {int(sid): r for (sid, _), r in zip(slices, routes)}


def _engine_name(sampler: SamplerConfig) -> str:
    return {"vllm": "vLLM", "hf": "transformers generate"}.get(sampler.kind, sampler.kind)


def _device() -> str:
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def _jsonable(x):
    from ..outputs import jsonable

    return jsonable(x)
