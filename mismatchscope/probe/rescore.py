"""``rescore``: score a recorded run's samples again with other trainer settings; the sampler is not touched.

Two paths, one command: a probe run is scored again round by round here
(``scoring.py`` writes the shards, as the probe did); an imported run (its
dump's token ids, ``sequences.parquet``) is scored by :mod:`.rescore_import`.
Everything that can be refused is refused before the new run directory exists.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from .. import rundir
from ..documents import json_edge, to_json
from ..errors import UsageError
from ..progress import Progress
from .checkpoint import CheckpointInfo
from .engine_checks import check_trainer
from .options import canonical_trainer, check_rescore_out
from .policy_lag import TrainerCheckpoint
from .prompts import Prompt
from .provenance import copy_sampler_side, record_side, refresh_fallbacks, trainer_side
from .rewards import DEFAULT_REWARD, load_reward_fn
from .routes import RoundRoutes, check_replay_source
from .scoring import (
    Scoring,
    lag_fingerprint,
    load_trainer,
    score_round,
    semantics,
    trainer_checkpoint,
    write_prompts_once,
)
from .turns import Conversations, TurnsConfig
from .types import SamplingConfig, TrainerConfig
from .writer import RunDir, finish, open_session, save_progress


@dataclass(frozen=True)
class RescoreSession:
    """What a rescore of a probe run has checked and opened before its rounds are scored again."""

    src: RunDir
    """the recorded run."""
    dst: RunDir
    """the new run directory."""
    old: dict[str, Any]
    """the recorded run's manifest, its parts checked (:func:`_check_recorded_config`)."""
    trainer_cfg: TrainerConfig
    resume: bool
    progress: Progress
    info: CheckpointInfo
    """the recorded checkpoint, unchanged since the run (its sha256 is checked)."""
    tokenizer: Any
    prompts: list[Prompt]
    prompt_ids: list[list[int]]
    trainer_ckpt: TrainerCheckpoint
    sampling: SamplingConfig
    """the recorded sampling: a rescore keeps it."""


def rescore(
    run_path: Path,
    out: Path,
    trainer_cfg: TrainerConfig,
    resume: bool = False,
    progress: Progress | None = None,
    trainer_checkpoint: Path | None = None,
    temperature: float | None = None,
    checkpoint: Path | None = None,
) -> Path:
    """Score a recorded run's samples again with other trainer settings; the sampler is not touched.

    ``trainer_checkpoint`` scores them with other weights (policy lag); without
    it the trainer runs the sampler's checkpoint, whatever the recorded run used.
    An imported run (:mod:`.rescore_import`) is scored with ``trainer_checkpoint``
    at ``temperature``, the sampler's, which its dump does not record.
    ``checkpoint``: where the sampler's checkpoint is now, when not where the run
    recorded it (:func:`recorded_checkpoint`; its sha256 is checked all the same).
    """
    from .rescore_import import is_imported, rescore_imported

    progress = progress or Progress()
    check_trainer(trainer_cfg)
    trainer_cfg = canonical_trainer(trainer_cfg)
    check_rescore_out(run_path, out, resume)
    if is_imported(run_path):
        if checkpoint is not None:
            raise UsageError(
                f"--checkpoint: {run_path} is an import, which records no checkpoint of its own",
                hint="score an imported run with --trainer-checkpoint CHECKPOINT",
            )
        return rescore_imported(run_path, out, trainer_cfg, trainer_checkpoint, temperature, resume, progress)
    src, old = _checked_source(run_path, trainer_cfg, temperature)
    dst = RunDir(out)
    with dst.lock():  # the recorded checkpoint and the trainer's weights are read while the new run is held
        located = recorded_checkpoint(run_path, old["config"], checkpoint)
        session = _open_session(src, dst, old, trainer_cfg, resume, progress, trainer_checkpoint, located)
        return _rescore_locked(session)


def recorded_checkpoint(run: Path, config: dict[str, Any], given: Path | None = None) -> Path:
    """Where the checkpoint a probe run sampled from is now: ``given`` (``--checkpoint``), else the path the run
    recorded. A relative path was recorded from the folder the probe ran in: from elsewhere it is looked for
    under the run's own parent folders (a run under ``D/runs/`` of a probe run in ``D``). The sha256 the run
    recorded is checked by the caller, so a folder found by name is never taken on its name alone."""
    if given is not None:
        return given
    recorded = Path(str((config.get("checkpoint") or {}).get("path", "")))
    if recorded.is_dir() or recorded.is_absolute():
        return recorded
    for base in Path(os.path.abspath(run)).parents:
        if (base / recorded).is_dir():
            return base / recorded
    raise UsageError(
        f"the checkpoint {run} was sampled from, {str(recorded)!r} (recorded relative to the folder its probe ran "
        "in), is neither here nor under the run's folders",
        hint="give its folder with --checkpoint PATH (its sha256 is checked against the run's)",
    )


def _checked_source(run_path: Path, trainer_cfg: TrainerConfig, temperature: float | None) -> tuple[RunDir, dict]:
    """The recorded probe run and its manifest, refused with one line when a rescore cannot use it."""
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
    return src, old


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


def _rescore_locked(s: RescoreSession) -> Path:
    """Open the new run (its fingerprint: the recorded one with this trainer), then score every round into it."""
    fingerprint = {k: v for k, v in s.old.get("fingerprint", {}).items() if k != "trainer_checkpoint_sha256"}
    fingerprint.update(
        {**lag_fingerprint(s.trainer_ckpt), "trainer": s.trainer_cfg.to_dict(), "rescored_from": str(s.src.path)}
    )
    manifest = s.dst.open(fingerprint, s.resume)
    try:
        return _rescore_rounds(s, manifest)
    except BaseException:
        s.dst.discard_unstarted()  # the trainer did not load: nothing to keep, nothing to block a re-run
        raise


def _open_session(
    src: RunDir,
    dst: RunDir,
    old: dict,
    trainer_cfg: TrainerConfig,
    resume: bool,
    progress: Progress,
    trainer_checkpoint_path: Path | None,
    checkpoint: Path,
) -> RescoreSession:
    """The recorded checkpoint (unchanged, found at ``checkpoint``), its tokenizer, the recorded prompts and the
    trainer's weights."""
    from .checkpoint import check_weights_cover_config, inspect_checkpoint
    from .tokenizer import load_tokenizer

    cfg = old["config"]
    sampling = SamplingConfig(**cfg["sampling"])
    trust = trainer_cfg.trust_remote_code
    info = inspect_checkpoint(checkpoint, allow_pickle=trainer_cfg.allow_pickle, trust_remote_code=trust)
    if info.sha256 != cfg["checkpoint"]["sha256"]:
        raise UsageError(f"the checkpoint at {info.path} changed since {src.path} was recorded (sha256 differs)")
    check_weights_cover_config(info, trust_remote_code=trust)
    tokenizer = load_tokenizer(info.path, trust_remote_code=trust)
    prompts_table = src.read_prompts().to_pylist()
    prompts = [Prompt(r["prompt_id"], r["text"], r["answer"]) for r in prompts_table]
    prompt_ids = [r["prompt_token_ids"] for r in prompts_table]
    texts = [p.text for p in prompts]
    trainer_ckpt = trainer_checkpoint(trainer_checkpoint_path, dst, resume, info, tokenizer, texts, trainer_cfg)
    return RescoreSession(
        src, dst, old, trainer_cfg, resume, progress, info, tokenizer, prompts, prompt_ids, trainer_ckpt, sampling
    )


def _rescore_rounds(s: RescoreSession, manifest: dict[str, Any]) -> Path:
    """Every recorded round, scored again into the new run (its samples copied once)."""
    config = _config(s)
    manifest.update({"config": config, "status": "running", "sampler_info": s.old.get("sampler_info")})
    timings = open_session(manifest, s.resume)
    s.dst.write_manifest(manifest)
    write_prompts_once(s.dst, s.prompts, s.prompt_ids)
    recorded = s.old["config"].get("reward_fn")
    reward_fn = load_reward_fn(None if recorded in (None, DEFAULT_REWARD) else recorded)
    done = s.dst.scored_sequences() if s.resume else set()
    trainer = load_trainer(s.trainer_ckpt, s.trainer_cfg, s.progress)
    manifest["trainer_info"] = trainer.describe()
    copy_sampler_side(s.old, manifest)  # the samples are the recorded engine's
    record_side(manifest, "trainer", trainer_side(trainer, s.trainer_ckpt.info, s.sampling, "rescore"))
    routes = RoundRoutes.of_source(s.src.path, s.old, trainer, s.trainer_cfg.replay, manifest, s.progress.note)
    scoring = Scoring(
        s.dst,
        s.prompts,
        s.prompt_ids,
        s.tokenizer,
        reward_fn,
        trainer,
        s.sampling,
        done,
        config,
        s.progress,
        _conversations(s),
    )
    for p in sorted(s.src.samples.glob("round-*.parquet")):
        r = int(p.stem.split("-")[1])
        completions = s.src.read_samples(r)
        if not s.dst.samples_path(r).exists():
            s.dst.write_samples(r, completions)
        timings["scoring_seconds"] += score_round(scoring, r, completions, routes)
        save_progress(s.dst, manifest)
    refresh_fallbacks(manifest, "rescore")
    finish(s.dst, manifest)
    return s.dst.path


def _conversations(s: RescoreSession) -> Conversations | None:
    """A multi-turn probe run's conversations, as its probe made them (``config.turns``): scored again the same way."""
    recorded = s.old["config"].get("turns")
    if not recorded:
        return None
    cfg = TurnsConfig(recorded["turns"], recorded["tool_response"], recorded["turn_ids"])
    return Conversations(s.tokenizer, cfg, s.info.path)


@json_edge
def _config(s: RescoreSession) -> dict[str, Any]:
    """The recorded ``config`` with this rescore's trainer, weights and semantics."""
    cfg = s.old["config"]
    return {
        **cfg,
        "checkpoint": {**cfg["checkpoint"], "path": str(s.info.path)},  # where it was found (--checkpoint, or a search)
        "trainer": s.trainer_cfg.to_dict(),
        "rescored_from": str(s.src.path),
        "trainer_checkpoint": to_json(s.trainer_ckpt.record()),
        "semantics": {
            **(cfg.get("semantics") or to_json(semantics(s.sampling))),
            **to_json(s.trainer_ckpt.semantics(s.info)),
        },
    }
