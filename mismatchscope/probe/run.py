"""Orchestration of ``probe`` and ``rescore``: sample, teacher-force, record.

Order of work, chosen so a killed probe loses nothing it finished:

1. check the options, the checkpoint, tokenizer and prompts, and the trainer's
   own checkpoint when it has one (cheap, before any engine starts), and reach
   a ``vllm-server`` (its model list): all before the run directory exists;
2. per sampling round (all prompts by default: one ``generate`` batch, as a
   serving engine would see them), sample and persist the raw completions;
3. score completions with the trainer shard by shard, writing each token shard
   as soon as it is scored;
4. mark the manifest complete.

``--resume`` skips rounds already sampled and sequences already scored. A run
that fails before its first round is sampled takes back what it wrote, so the
same command can simply be run again.
Sequence ids are ``prompt_id * n + sample_index``, so a resumed run can
neither duplicate nor lose a sequence.
"""

from __future__ import annotations

import sys
import time
from dataclasses import fields, replace
from pathlib import Path
from typing import Any

import numpy as np

from .. import rundir
from .._version import __version__
from ..errors import UsageError
from ..redact import redact_command, redact_obj, redact_url
from .options import (
    SERVER_KINDS,
    ProbeOptions,
    canonical_options,
    canonical_trainer,
    check_against_checkpoint,
    check_engine_installed,
    check_options,
    check_rescore_out,
    check_trainer,
)
from .policy_lag import TrainerCheckpoint, check_resume, open_trainer_checkpoint, recorded_trainer_checkpoint
from .prompts import Prompt, file_sha256, load_prompts
from .rewards import group_advantages, load_reward_fn
from .routes import (
    RoundRoutes,
    check_replay_probe,
    check_replay_source,
    routing_manifest,
    sampler_side,
    save_sampler_round,
)
from .run_dir import RunDir, finish, open_session, save_progress, token_shards
from .samplers.base import check_prompts
from .types import Completion, SamplerConfig, SamplingConfig, Scored, ScoreRequest, TrainerConfig

AUTO_MAX_TOKENS = 256


class Progress:
    """Callbacks the CLI wires to progress bars (no-ops by default)."""

    def stage(self, name: str, total: int) -> None: ...

    def advance(self, name: str, amount: int) -> None: ...

    def note(self, message: str) -> None: ...


def semantics(sampling: SamplingConfig) -> dict[str, Any]:
    """What the two logprob columns mean for this run, recorded in every shard."""
    truncates = sampling.top_p < 1.0 or sampling.top_k > 0
    if sampling.logprobs_mode == "processed_logprobs":
        return {
            "sampler_logprob": "after temperature, top-k and top-p (renormalised over the kept set)",
            "trainer_logprob": f"logits / T (T={sampling.temperature:g})"
            + (", renormalised over the kept set" if truncates else ""),
            "sampler_kept_logmass": "log of the trainer's full-vocabulary mass on the kept set" if truncates else None,
        }
    return {
        "sampler_logprob": "raw logits, before temperature and truncation (T = 1, full vocabulary)",
        "trainer_logprob": "raw logits (T = 1, full vocabulary)",
        "sampler_kept_logmass": None,
    }


def _fingerprint(
    opts: ProbeOptions, ckpt_sha: str, prompts_sha: str, trainer_ckpt: TrainerCheckpoint
) -> dict[str, Any]:
    s = opts.sampler
    return {
        **_lag_fingerprint(trainer_ckpt),
        **({"sampler_prefill": True} if opts.sampler_prefill else {}),
        **({"full_vocab": True} if opts.full_vocab else {}),
        "checkpoint_sha256": ckpt_sha,
        "prompts_sha256": prompts_sha,
        "sampling": opts.sampling.to_dict(),
        "sampler": {
            "kind": s.kind,
            "dtype": s.dtype,
            "fp32_lm_head": s.fp32_lm_head,
            "engine_args": _safe_engine_args(s),
            "tensor_parallel_size": s.tensor_parallel_size,
            "url": redact_url(s.url),
            **({"zero": True} if s.zero else {}),
        },
        "trainer": opts.trainer.to_dict(),
        "round_prompts": opts.round_prompts,
        "reward_fn": opts.reward_fn,
    }


def _lag_fingerprint(trainer_ckpt: TrainerCheckpoint) -> dict[str, Any]:
    """Only a run with other trainer weights carries the key, so runs recorded before it resume as before."""
    return {} if trainer_ckpt.same_as_sampler else {"trainer_checkpoint_sha256": trainer_ckpt.info.sha256}


def _trainer_checkpoint(
    path: Path | None, run: RunDir, resume: bool, info, tokenizer, texts: list[str], trainer: TrainerConfig
) -> TrainerCheckpoint:
    """The trainer's weights; a resumed run keeps the recorded ones (another choice is refused)."""
    recorded = recorded_trainer_checkpoint(run.read_manifest().get("config") or {}) if resume and run.exists() else None
    if path is None and recorded is not None and not recorded.get("same_as_sampler"):
        path = Path(recorded["path"])
    chosen = open_trainer_checkpoint(
        path, info, tokenizer, texts, allow_pickle=trainer.allow_pickle, trust_remote_code=trainer.trust_remote_code
    )
    if recorded is not None:
        check_resume(recorded, chosen, run.path)
    return chosen


def _safe_engine_args(s: SamplerConfig) -> dict[str, Any]:
    """Engine options as recorded: credential-named keys and URL credentials redacted."""
    from .samplers.base import manifest_safe

    return redact_obj(manifest_safe(s.engine_args))


def run_probe(opts: ProbeOptions, progress: Progress | None = None, sampler=None) -> Path:
    """Run a probe into ``opts.out``. ``sampler``: an engine the caller already
    started (and closes itself), for callers that use it again afterwards."""
    from .checkpoint import (
        check_tokenizer,
        check_weights_cover_config,
        inspect_checkpoint,
        load_tokenizer,
        tokenize_prompts,
    )

    progress = progress or Progress()
    check_options(opts)  # before any file is written or engine started
    if opts.sampler_prefill and not opts.sampler.zero:  # the zero profile's prefill is its decode's own program
        from .sampler_prefill import check_sampler_prefill

        check_sampler_prefill(opts.sampler.kind, opts.sampling)
    opts = canonical_options(opts)
    prompts = load_prompts(opts.prompts)
    info = inspect_checkpoint(
        opts.checkpoint, allow_pickle=opts.trainer.allow_pickle, trust_remote_code=opts.trainer.trust_remote_code
    )
    check_against_checkpoint(opts, info)
    check_replay_probe(opts.trainer.replay, info, opts.sampler.kind)
    check_weights_cover_config(info, trust_remote_code=opts.trainer.trust_remote_code)
    tokenizer = load_tokenizer(info.path, trust_remote_code=opts.trainer.trust_remote_code)
    other = (
        load_tokenizer(opts.sampler_tokenizer, trust_remote_code=opts.trainer.trust_remote_code)
        if opts.sampler_tokenizer
        else None
    )
    check_tokenizer(tokenizer, info, [p.text for p in prompts], other=other)
    max_len = opts.sampler.max_model_len or info.max_model_len
    if opts.sampling.max_tokens == 0:  # auto: as long as the context allows, up to AUTO_MAX_TOKENS
        prompt_ids = tokenize_prompts(tokenizer, [p.text for p in prompts], max_model_len=max_len, max_tokens=1)
        room = max_len - max(len(p) for p in prompt_ids)
        opts = replace(opts, sampling=replace(opts.sampling, max_tokens=min(AUTO_MAX_TOKENS, room)))
    prompt_ids = tokenize_prompts(
        tokenizer, [p.text for p in prompts], max_model_len=max_len, max_tokens=opts.sampling.max_tokens
    )
    check_prompts(prompt_ids, opts.sampling)  # what every engine would refuse, refused before the run exists
    reward_fn = load_reward_fn(opts.reward_fn)
    check_engine_installed(opts.sampler)

    run = RunDir(opts.out)
    owned = sampler is None
    if owned and _server_first(opts, run, len(prompts)):  # unreachable, refused, another model: before the run exists
        from .samplers import make_sampler

        progress.note(f"starting sampler {opts.sampler.kind} ({opts.sampler.dtype})")
        sampler = make_sampler(opts.sampler, info, sampling=opts.sampling)
    try:
        with run.lock():  # before anything reads what the directory holds: a second writer is refused here
            return _probe_locked(opts, run, info, tokenizer, prompts, prompt_ids, reward_fn, progress, sampler, owned)
    finally:
        if owned and sampler is not None:
            sampler.close()  # idempotent: _probe_locked closes an engine it started itself


def _rounds(n_prompts: int, round_prompts: int) -> list[list[int]]:
    """Prompt indices of each sampling round (one round of all prompts by default)."""
    size = round_prompts or n_prompts
    return [list(range(i, min(i + size, n_prompts))) for i in range(0, n_prompts, size)]


def _server_first(opts: ProbeOptions, run: RunDir, n_prompts: int) -> bool:
    """Whether to reach the ``vllm-server`` before the run directory is made.

    Starting it costs one ``GET /v1/models``, so a wrong URL, a refused key or
    another served model stop the probe before anything is written. A resumed
    run whose rounds are all sampled does not need the server at all.
    """
    if opts.sampler.kind not in SERVER_KINDS:
        return False
    if not opts.resume:
        return True
    return not all(run.samples_path(r).exists() for r in range(len(_rounds(n_prompts, opts.round_prompts))))


def _probe_locked(
    opts: ProbeOptions,
    run: RunDir,
    info,
    tokenizer,
    prompts: list[Prompt],
    prompt_ids: list[list[int]],
    reward_fn,
    progress: Progress,
    sampler,
    owned: bool,
) -> Path:
    trainer_ckpt = _trainer_checkpoint(
        opts.trainer_checkpoint, run, opts.resume, info, tokenizer, [p.text for p in prompts], opts.trainer
    )
    prompts_sha = file_sha256(opts.prompts)
    manifest = run.open(_fingerprint(opts, info.sha256, prompts_sha, trainer_ckpt), opts.resume)
    try:
        return _sample_and_score(
            opts,
            run,
            manifest,
            info,
            tokenizer,
            prompts,
            prompt_ids,
            reward_fn,
            progress,
            sampler,
            owned,
            trainer_ckpt,
            prompts_sha,
        )
    except BaseException:
        run.discard_unstarted()  # failed before a round was sampled: nothing to keep, nothing to block a re-run
        raise


def _sample_and_score(
    opts: ProbeOptions,
    run: RunDir,
    manifest: dict,
    info,
    tokenizer,
    prompts: list[Prompt],
    prompt_ids: list[list[int]],
    reward_fn,
    progress: Progress,
    sampler,
    owned: bool,
    trainer_ckpt: TrainerCheckpoint,
    prompts_sha: str,
) -> Path:
    config = {
        "mismatchscope_version": __version__,
        "checkpoint": info.record(),
        "trainer_checkpoint": trainer_ckpt.record(),
        "prompts": {"path": str(opts.prompts), "sha256": prompts_sha, "count": len(prompts)},
        "sampling": opts.sampling.to_dict(),
        "semantics": {**semantics(opts.sampling), **trainer_ckpt.semantics(info)},
        "sampler": {
            **opts.sampler.to_dict(),
            "kind": opts.sampler.kind,
            "url": redact_url(opts.sampler.url),
            "engine_args": _safe_engine_args(opts.sampler),
        },
        "trainer": opts.trainer.to_dict(),
        "reward_fn": opts.reward_fn or "exact_match(answer)",
        "round_prompts": opts.round_prompts,
    }
    manifest.update(
        {"config": config, "status": "running", "command": redact_command(sys.argv[1:]) if sys.argv else None}
    )
    session = open_session(manifest, opts.resume)
    run.write_manifest(manifest)
    _write_prompts_once(run, prompts, prompt_ids)

    n = opts.sampling.n
    rounds = _rounds(len(prompts), opts.round_prompts)
    done = run.scored_sequences() if opts.resume else set()
    todo_rounds = [r for r in range(len(rounds)) if any(p * n + k not in done for p in rounds[r] for k in range(n))]
    if opts.resume:
        progress.note(f"resuming: {len(done)} sequences already scored, {len(todo_rounds)} round(s) left")

    if sampler is not None:  # an engine the caller started, or the server reached before the run
        manifest["sampler_info"] = sampler.describe()
    trainer = None
    try:
        for r in todo_rounds:
            if run.samples_path(r).exists():
                completions = run.read_samples(r)
            else:
                if sampler is None:
                    from .samplers import make_sampler

                    progress.note(f"starting sampler {opts.sampler.kind} ({opts.sampler.dtype})")
                    sampler = make_sampler(opts.sampler, info, sampling=opts.sampling)
                progress.stage("sampling", len(rounds[r]) * n)
                if opts.full_vocab:
                    sampler.keep_rows = True  # type: ignore[attr-defined]  # the hf samplers; checked before the run
                t0 = time.perf_counter()
                local = sampler.sample(
                    [prompt_ids[p] for p in rounds[r]],
                    opts.sampling,
                    on_progress=lambda k: progress.advance("sampling", k),
                )
                session["sampling_seconds"] += time.perf_counter() - t0
                completions = [replace(c, prompt_index=rounds[r][c.prompt_index]) for c in local]
                if opts.sampler_prefill:
                    from .sampler_prefill import with_sampler_prefill

                    completions = with_sampler_prefill(sampler, prompt_ids, completions, opts.sampling)
                _check_completions(completions, rounds[r], n)
                save_sampler_round(
                    run.path, r, completions, n
                )  # before the samples: a round's samples imply its routes
                run.write_samples(r, completions)
                manifest["sampler_info"] = sampler.describe()  # saved with the round: a killed run keeps it
                save_progress(run, manifest)
            if trainer is None:
                from .trainer import HFTrainer

                progress.note(f"loading trainer ({opts.trainer.dtype}{_lag_label(trainer_ckpt)})")
                trainer = HFTrainer(trainer_ckpt.info, opts.trainer)
                manifest["trainer_info"] = trainer.describe()
                side = sampler_side(sampler, opts.sampler.kind) if sampler is not None else None
                shape = routing_manifest(manifest, trainer, side, opts.trainer.replay, progress.note)
            routes = RoundRoutes.of_probe_round(shape, run.path, r, opts.trainer.replay)
            session["scoring_seconds"] += _score_round(
                run,
                r,
                completions,
                prompts,
                prompt_ids,
                tokenizer,
                reward_fn,
                trainer,
                opts.sampling,
                done,
                config,
                progress,
                routes,
            )
            save_progress(run, manifest)
    finally:
        if sampler is not None and owned:
            sampler.close()
    finish(run, manifest)
    return run.path


def _lag_label(trainer_ckpt: TrainerCheckpoint) -> str:
    return "" if trainer_ckpt.same_as_sampler else f", weights of {trainer_ckpt.info.path}"


def _write_prompts_once(run: RunDir, prompts: list[Prompt], prompt_ids: list[list[int]]) -> None:
    """The prompts as token ids, written once per run directory (a resumed run keeps the first)."""
    if not run.prompts.exists():
        run.write_prompts(
            [p.prompt_id for p in prompts], prompt_ids, [p.text for p in prompts], [p.answer for p in prompts]
        )


def _check_completions(completions: list[Completion], prompt_indices: list[int], n: int) -> None:
    got = sorted((c.prompt_index, c.sample_index) for c in completions)
    want = sorted((p, k) for p in prompt_indices for k in range(n))
    if got != want:
        raise UsageError(f"the sampler returned {len(got)} completions for {len(want)} requested (prompts x n)")
    for c in completions:
        if not (len(c.token_ids) == len(c.sampler_logprobs) == len(c.topk_ids) == len(c.topk_logprobs)):
            raise UsageError(
                f"the sampler returned misaligned lists for prompt {c.prompt_index} sample {c.sample_index}"
            )


def _rewards(
    completions: list[Completion], prompts: list[Prompt], tokenizer, reward_fn, n: int
) -> dict[tuple[int, int], tuple[float, float]]:
    """(prompt, sample) -> (reward, advantage), advantages normalised within each prompt's group."""
    by_prompt: dict[int, list[Completion]] = {}
    for c in completions:
        by_prompt.setdefault(c.prompt_index, []).append(c)
    out = {}
    for p, group in by_prompt.items():
        group.sort(key=lambda c: c.sample_index)
        rewards = np.array(
            [
                float(
                    reward_fn(
                        prompt=prompts[p].text,
                        completion=tokenizer.decode(c.token_ids, skip_special_tokens=True),
                        answer=prompts[p].answer,
                    )
                )
                for c in group
            ]
        )
        adv = group_advantages(rewards)
        for c, rw, a in zip(group, rewards, adv):
            out[(p, c.sample_index)] = (float(rw), float(a))
    return out


def _score_round(
    run: RunDir,
    r: int,
    completions,
    prompts,
    prompt_ids,
    tokenizer,
    reward_fn,
    trainer,
    sampling: SamplingConfig,
    done: set[int],
    config: dict,
    progress: Progress,
    routes: RoundRoutes | None = None,
) -> float:
    n = sampling.n
    has_answers = any(p.answer is not None for p in prompts) or config["reward_fn"] != "exact_match(answer)"
    rewards = _rewards(completions, prompts, tokenizer, reward_fn, n) if has_answers else {}
    todo = [
        c
        for c in sorted(completions, key=lambda c: (c.prompt_index, c.sample_index))
        if c.prompt_index * n + c.sample_index not in done
    ]
    shards = token_shards(todo, lambda c: len(c.token_ids))
    progress.stage("scoring", sum(len(c.token_ids) for c in todo))
    existing = len(list(run.tokens.glob(f"part-{r:05d}-*.parquet")))
    elapsed = 0.0
    for b, shard in enumerate(shards):
        reqs = [
            ScoreRequest(
                prompt_ids[c.prompt_index],
                c.token_ids,
                c.topk_ids,
                forced_routes=routes.forced(c.prompt_index * n + c.sample_index) if routes else None,
                sampler_rows=c.rows,
            )
            for c in shard
        ]
        t0 = time.perf_counter()
        scored = trainer.score(reqs, sampling)
        elapsed += time.perf_counter() - t0
        if routes is not None:  # before the token shard: a scored shard implies its routes
            routes.write(run.path, r, existing + b, shard, prompt_ids, n, scored)
        cols = token_columns(shard, scored, rewards, n)
        if any(sc.row_columns is not None for sc in scored):
            from .full_rows import COLUMNS as ROW_COLUMNS

            for name in ROW_COLUMNS:  # --full-vocab: each completion's rows, in the shard's order
                cols[name] = [v for sc in scored for v in (sc.row_columns or {}).get(name, [])]
        run.write_tokens(r, existing + b, cols, config)
        progress.advance("scoring", sum(len(c.token_ids) for c in shard))
    return elapsed


def token_columns(completions: list[Completion], scored: list[Scored], rewards: dict, n: int) -> dict[str, list]:
    """Flatten completions and their scores into analysis-format columns (strictly aligned)."""
    if len(completions) != len(scored):
        raise ValueError(f"{len(completions)} completions but {len(scored)} scores")
    cols: dict[str, list] = {
        k: []
        for k in (
            "sequence_id",
            "position",
            "token_id",
            "sampler_logprob",
            "trainer_logprob",
            "prompt_id",
            "sample_index",
            "sampler_topk_ids",
            "sampler_topk_logprobs",
            "trainer_logprobs_at_sampler_topk",
            "trainer_topk_ids",
            "trainer_topk_logprobs",
            "trainer_entropy",
        )
    }
    with_rewards = bool(rewards)
    with_kept = any(s.kept_logmass is not None for s in scored)
    with_prefill = any(c.sampler_prefill_logprobs is not None for c in completions)
    if with_prefill:
        cols["sampler_prefill_logprob"] = []
    if with_rewards:
        cols["advantage"], cols["reward"] = [], []
    if with_kept:
        cols["sampler_kept_logmass"] = []
    for c, s in zip(completions, scored):
        L = len(c.token_ids)
        lengths = {
            len(c.sampler_logprobs),
            len(s.trainer_logprobs),
            len(s.logprobs_at_sampler_topk),
            len(s.topk_ids),
            len(s.topk_logprobs),
            len(s.entropy),
            len(c.topk_ids),
        }
        if lengths != {L}:
            raise ValueError(
                f"misaligned lengths for prompt {c.prompt_index} sample {c.sample_index}: {sorted(lengths)} vs {L}"
            )
        cols["sequence_id"] += [c.prompt_index * n + c.sample_index] * L
        cols["position"] += range(L)
        cols["token_id"] += c.token_ids
        cols["sampler_logprob"] += c.sampler_logprobs
        cols["trainer_logprob"] += s.trainer_logprobs
        cols["prompt_id"] += [c.prompt_index] * L
        cols["sample_index"] += [c.sample_index] * L
        cols["sampler_topk_ids"] += c.topk_ids
        cols["sampler_topk_logprobs"] += c.topk_logprobs
        cols["trainer_logprobs_at_sampler_topk"] += s.logprobs_at_sampler_topk
        cols["trainer_topk_ids"] += s.topk_ids
        cols["trainer_topk_logprobs"] += s.topk_logprobs
        cols["trainer_entropy"] += s.entropy
        if with_rewards:
            rw, a = rewards[(c.prompt_index, c.sample_index)]
            cols["reward"] += [rw] * L
            cols["advantage"] += [a] * L
        if with_kept:
            cols["sampler_kept_logmass"] += s.kept_logmass if s.kept_logmass is not None else [0.0] * L
        if with_prefill:
            cols["sampler_prefill_logprob"] += c.sampler_prefill_logprobs or [float("nan")] * L
    return cols


def rescore(
    run_path: Path,
    out: Path,
    trainer_cfg: TrainerConfig,
    resume: bool = False,
    progress: Progress | None = None,
    trainer_checkpoint: Path | None = None,
    temperature: float | None = None,
) -> Path:
    """Score a recorded run's samples again with other trainer settings; the sampler is not touched.

    ``trainer_checkpoint`` scores them with other weights (policy lag); without
    it the trainer runs the sampler's checkpoint, whatever the recorded run used.
    An imported run (:mod:`.rescore_import`) is scored with ``trainer_checkpoint``
    at ``temperature``, the sampler's, which its dump does not record.
    """
    from .rescore_import import is_imported, rescore_imported

    progress = progress or Progress()
    check_trainer(trainer_cfg)
    trainer_cfg = canonical_trainer(trainer_cfg)
    check_rescore_out(run_path, out, resume)
    if is_imported(run_path):
        return rescore_imported(run_path, out, trainer_cfg, trainer_checkpoint, temperature, resume, progress)
    _refuse_other_runs(run_path)
    if temperature is not None:
        raise UsageError(
            f"--temperature: {run_path} is a probe run; a rescore keeps the sampling it recorded",
            hint="--temperature is for imported runs, whose dumps do not record it",
        )
    src = RunDir(run_path)
    if not src.exists():
        raise UsageError(f"{run_path} is not a probe run directory (no {src.manifest_path.name})")
    _check_complete_source(run_path)
    old = src.read_manifest()
    check_replay_source(run_path, old, trainer_cfg.replay)
    _check_recorded_config(src, old)
    if not list(src.samples.glob("round-*.parquet")):
        raise UsageError(f"{run_path} has no recorded samples to rescore")
    dst = RunDir(out)
    with dst.lock():
        return _rescore_locked(src, dst, old, trainer_cfg, resume, progress, trainer_checkpoint)


def _check_recorded_config(src: RunDir, manifest: dict[str, Any]) -> None:
    """The parts of a recorded manifest rescore reads, each of its type: an edited or damaged manifest is one
    line naming the field, not a crash halfway through setting up the trainer."""

    def bad(field: str, value: Any, want: str) -> UsageError:
        shown = repr(value) if len(repr(value)) <= 40 else repr(value)[:37] + "..."
        return UsageError(
            f"{src.manifest_path}: {field} is {shown}, not {want}",
            hint="the manifest was edited or damaged; restore it from a copy of the run",
        )

    cfg = manifest.get("config")
    if not isinstance(cfg, dict):
        raise bad("config", cfg, "a table")
    for key in ("sampling", "checkpoint"):
        if not isinstance(cfg.get(key), dict):
            raise bad(f"config.{key}", cfg.get(key), "a table")
    for f in fields(SamplingConfig):
        value = cfg["sampling"].get(f.name, f.default)
        want = type(f.default)
        ok = (isinstance(value, want) and not isinstance(value, bool)) or (
            want is float and isinstance(value, int) and not isinstance(value, bool)
        )
        if not ok:
            raise bad(f"config.sampling.{f.name}", value, {int: "an integer", float: "a number"}.get(want, "a string"))
    for key in ("path", "sha256"):
        if not isinstance(cfg["checkpoint"].get(key), str):
            raise bad(f"config.checkpoint.{key}", cfg["checkpoint"].get(key), "a string")
    if not isinstance(manifest.get("fingerprint", {}), dict):
        raise bad("fingerprint", manifest["fingerprint"], "a table")
    if cfg.get("semantics") is not None and not isinstance(cfg["semantics"], dict):
        raise bad("config.semantics", cfg["semantics"], "a table")


def _refuse_other_runs(run_path: Path) -> None:
    """An import without routes or a Recorder run holds no prompts to score again: say so, not that its
    manifest looks damaged (it lacks a probe's ``config`` because it is not a probe run)."""
    manifest = rundir.read_manifest(run_path) or {}
    if isinstance(manifest.get("source"), dict):
        raise UsageError(
            f"{run_path} is an import without its prompt tokens, which a rescore needs",
            hint="import the dump again with --routes (it records each sequence's prompt and completion ids)",
        )
    if manifest.get("writer") == "recorder":
        raise UsageError(
            f"{run_path} is a Recorder run: it holds logprob pairs, not the prompts a rescore scores again",
            hint="rescore runs of probe, or imports made with --routes",
        )


def _check_complete_source(run_path: Path) -> None:
    """A killed or still-running probe has only some rounds: rescoring it would silently score part of a run."""
    c = rundir.completion(run_path)
    if c is not None and not c.complete:
        raise UsageError(
            f"{run_path} is an incomplete run ({c.reason}); rescore needs a complete one",
            hint=f"finish it first with the same probe command and --resume --out {run_path}",
        )


def _rescore_locked(
    src: RunDir,
    dst: RunDir,
    old: dict,
    trainer_cfg: TrainerConfig,
    resume: bool,
    progress: Progress,
    trainer_checkpoint: Path | None,
) -> Path:
    from .checkpoint import check_weights_cover_config, inspect_checkpoint, load_tokenizer

    run_path = src.path
    cfg = old["config"]
    sampling = SamplingConfig(**cfg["sampling"])
    info = inspect_checkpoint(
        Path(cfg["checkpoint"]["path"]),
        allow_pickle=trainer_cfg.allow_pickle,
        trust_remote_code=trainer_cfg.trust_remote_code,
    )
    if info.sha256 != cfg["checkpoint"]["sha256"]:
        raise UsageError(f"the checkpoint at {info.path} changed since {run_path} was recorded (sha256 differs)")
    check_weights_cover_config(info, trust_remote_code=trainer_cfg.trust_remote_code)
    tokenizer = load_tokenizer(info.path, trust_remote_code=trainer_cfg.trust_remote_code)
    prompts_table = src.read_prompts().to_pylist()
    prompts = [Prompt(r["prompt_id"], r["text"], r["answer"]) for r in prompts_table]
    prompt_ids = [r["prompt_token_ids"] for r in prompts_table]
    trainer_ckpt = _trainer_checkpoint(
        trainer_checkpoint, dst, resume, info, tokenizer, [p.text for p in prompts], trainer_cfg
    )
    fingerprint = {k: v for k, v in old.get("fingerprint", {}).items() if k != "trainer_checkpoint_sha256"}
    fingerprint.update(
        {**_lag_fingerprint(trainer_ckpt), "trainer": trainer_cfg.to_dict(), "rescored_from": str(run_path)}
    )
    manifest = dst.open(fingerprint, resume)
    try:
        return _rescore_rounds(
            src,
            dst,
            manifest,
            old,
            trainer_cfg,
            resume,
            progress,
            info,
            tokenizer,
            prompts,
            prompt_ids,
            trainer_ckpt,
            sampling,
        )
    except BaseException:
        dst.discard_unstarted()  # the trainer did not load: nothing to keep, nothing to block a re-run
        raise


def _rescore_rounds(
    src: RunDir,
    dst: RunDir,
    manifest: dict,
    old: dict,
    trainer_cfg: TrainerConfig,
    resume: bool,
    progress: Progress,
    info,
    tokenizer,
    prompts: list[Prompt],
    prompt_ids: list[list[int]],
    trainer_ckpt: TrainerCheckpoint,
    sampling: SamplingConfig,
) -> Path:
    from .trainer import HFTrainer

    run_path, cfg = src.path, old["config"]
    config = {
        **cfg,
        "trainer": trainer_cfg.to_dict(),
        "rescored_from": str(run_path),
        "trainer_checkpoint": trainer_ckpt.record(),
        "semantics": {**(cfg.get("semantics") or semantics(sampling)), **trainer_ckpt.semantics(info)},
    }
    manifest.update({"config": config, "status": "running", "sampler_info": old.get("sampler_info")})
    session = open_session(manifest, resume)
    dst.write_manifest(manifest)
    _write_prompts_once(dst, prompts, prompt_ids)
    reward_fn = load_reward_fn(None if cfg.get("reward_fn") in (None, "exact_match(answer)") else cfg["reward_fn"])
    done = dst.scored_sequences() if resume else set()
    progress.note(f"loading trainer ({trainer_cfg.dtype}{_lag_label(trainer_ckpt)})")
    trainer = HFTrainer(trainer_ckpt.info, trainer_cfg)
    manifest["trainer_info"] = trainer.describe()
    routes = RoundRoutes.of_source(src.path, old, trainer, trainer_cfg.replay, manifest, progress.note)
    for p in sorted(src.samples.glob("round-*.parquet")):
        r = int(p.stem.split("-")[1])
        completions = src.read_samples(r)
        if not dst.samples_path(r).exists():
            dst.write_samples(r, completions)
        session["scoring_seconds"] += _score_round(
            dst,
            r,
            completions,
            prompts,
            prompt_ids,
            tokenizer,
            reward_fn,
            trainer,
            sampling,
            done,
            config,
            progress,
            routes,
        )
        save_progress(dst, manifest)
    finish(dst, manifest)
    return dst.path
