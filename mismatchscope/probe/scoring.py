"""Scoring a run's rounds with the trainer: what ``probe`` and ``rescore`` of a probe run share.

A round's completions are scored shard by shard (``writer.token_shards``),
and each token shard is written as soon as it is scored, after its routes: a
killed run keeps every shard it finished, and ``--resume`` skips the
sequences already scored.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ..documents import json_edge
from ..progress import Progress
from .columns import Rewards, token_columns, with_row_columns
from .policy_lag import TrainerCheckpoint, check_resume, open_trainer_checkpoint, recorded_trainer_checkpoint
from .prompts import Prompt
from .rewards import DEFAULT_REWARD, RewardFn, group_advantages
from .routes import RoundRoutes
from .types import Completion, SamplingConfig, ScoreRequest, TrainerConfig
from .writer import RunDir, token_shards

if TYPE_CHECKING:
    from .checkpoint import CheckpointInfo
    from .trainer import HFTrainer
    from .turns import Conversations


@dataclass(frozen=True)
class Scoring:
    """What scoring a run's rounds reads, the same for a probe and a rescore of one."""

    run: RunDir
    """the run directory the token shards go to."""
    prompts: list[Prompt]
    prompt_ids: list[list[int]]
    tokenizer: Any
    """the checkpoint's tokenizer: decodes completions for the reward function."""
    reward_fn: RewardFn
    trainer: HFTrainer
    sampling: SamplingConfig
    done: set[int]
    """sequence ids already scored (a resumed run): skipped."""
    config: dict[str, Any]
    """the manifest's ``config``, recorded in every shard."""
    progress: Progress
    conversations: Conversations | None = None
    """``probe --turns``: the conversations' template view; each completion is then a whole conversation."""


@dataclass(frozen=True)
class Semantics:
    """What the two logprob columns mean for a run (``config.semantics``, with :class:`PolicyLag`'s keys)."""

    sampler_logprob: str
    trainer_logprob: str
    sampler_kept_logmass: str | None


def semantics(sampling: SamplingConfig) -> Semantics:
    """What the two logprob columns mean for this run, recorded in every shard."""
    truncates = sampling.top_p < 1.0 or sampling.top_k > 0
    if sampling.logprobs_mode == "processed_logprobs":
        return Semantics(
            sampler_logprob="after temperature, top-k and top-p (renormalised over the kept set)",
            trainer_logprob=f"logits / T (T={sampling.temperature:g})"
            + (", renormalised over the kept set" if truncates else ""),
            sampler_kept_logmass="log of the trainer's full-vocabulary mass on the kept set" if truncates else None,
        )
    return Semantics(
        sampler_logprob="raw logits, before temperature and truncation (T = 1, full vocabulary)",
        trainer_logprob="raw logits (T = 1, full vocabulary)",
        sampler_kept_logmass=None,
    )


def trainer_checkpoint(
    path: Path | None,
    run: RunDir,
    resume: bool,
    info: CheckpointInfo,
    tokenizer: Any,
    texts: list[str],
    trainer: TrainerConfig,
) -> TrainerCheckpoint:
    """The trainer's weights; a resumed run keeps the recorded ones (another choice is refused)."""
    recorded = recorded_trainer_checkpoint(run.read_manifest().get("config") or {}) if resume and run.exists() else None
    if path is None and recorded is not None and not recorded.same_as_sampler:
        assert recorded.path is not None  # a run with other trainer weights records where they were
        path = Path(recorded.path)
    chosen = open_trainer_checkpoint(
        path, info, tokenizer, texts, allow_pickle=trainer.allow_pickle, trust_remote_code=trainer.trust_remote_code
    )
    if recorded is not None:
        check_resume(recorded, chosen, run.path)
    return chosen


@json_edge
def lag_fingerprint(trainer_ckpt: TrainerCheckpoint) -> dict[str, Any]:
    """Only a run with other trainer weights carries the key, so runs recorded before it resume as before."""
    return {} if trainer_ckpt.same_as_sampler else {"trainer_checkpoint_sha256": trainer_ckpt.info.sha256}


def load_trainer(trainer_ckpt: TrainerCheckpoint, cfg: TrainerConfig, progress: Progress) -> HFTrainer:
    """The trainer, loaded with a note naming its dtype (and its weights when they are not the sampler's)."""
    from .trainer import HFTrainer

    lag = "" if trainer_ckpt.same_as_sampler else f", weights of {trainer_ckpt.info.path}"
    progress.note(f"loading trainer ({cfg.dtype}{lag})")
    return HFTrainer(trainer_ckpt.info, cfg)


def write_prompts_once(run: RunDir, prompts: list[Prompt], prompt_ids: list[list[int]]) -> None:
    """The prompts as token ids, written once per run directory (a resumed run keeps the first)."""
    if not run.prompts.exists():
        run.write_prompts(
            [p.prompt_id for p in prompts], prompt_ids, [p.text for p in prompts], [p.answer for p in prompts]
        )


def score_round(s: Scoring, r: int, completions: list[Completion], routes: RoundRoutes | None = None) -> float:
    """Score round ``r``'s unscored completions and write their token shards; the seconds the trainer took."""
    n = s.sampling.n
    has_answers = any(p.answer is not None for p in s.prompts) or s.config["reward_fn"] != DEFAULT_REWARD
    rewards = _rewards(s, completions) if has_answers else {}
    todo = [
        c
        for c in sorted(completions, key=lambda c: (c.prompt_index, c.sample_index))
        if c.prompt_index * n + c.sample_index not in s.done
    ]
    s.progress.stage("scoring", sum(len(c.token_ids) for c in todo))
    existing = len(list(s.run.tokens.glob(f"part-{r:05d}-*.parquet")))
    elapsed = 0.0
    for b, shard in enumerate(token_shards(todo, lambda c: len(c.token_ids))):
        elapsed += _score_shard(s, r, existing + b, shard, rewards, routes)
        s.progress.advance("scoring", sum(len(c.token_ids) for c in shard))
    return elapsed


def _score_shard(
    s: Scoring, r: int, b: int, shard: list[Completion], rewards: Rewards, routes: RoundRoutes | None
) -> float:
    """Score one token shard and write it (after its routes: a scored shard implies its routes)."""
    n = s.sampling.n
    if s.conversations is not None:  # whole conversations: one forward each over the trainer's ids
        from .conversations import score_conversations

        t0 = time.perf_counter()
        cols = score_conversations(s.trainer, s.conversations, shard, s.prompts, s.prompt_ids, s.sampling, rewards, n)
        elapsed = time.perf_counter() - t0
        s.run.write_tokens(r, b, cols, s.config)
        return elapsed
    reqs = [
        ScoreRequest(
            s.prompt_ids[c.prompt_index],
            c.token_ids,
            c.topk_ids,
            forced_routes=routes.forced(c.prompt_index * n + c.sample_index) if routes else None,
            sampler_rows=c.rows,
        )
        for c in shard
    ]
    t0 = time.perf_counter()
    scored = s.trainer.score(reqs, s.sampling)
    elapsed = time.perf_counter() - t0
    if routes is not None:
        routes.write(s.run.path, r, b, shard, s.prompt_ids, n, scored)
    cols = with_row_columns(token_columns(shard, scored, rewards, n), scored)
    s.run.write_tokens(r, b, cols, s.config)
    return elapsed


def _rewards(s: Scoring, completions: list[Completion]) -> Rewards:
    """(prompt, sample) -> (reward, advantage), advantages normalised within each prompt's group."""
    by_prompt: dict[int, list[Completion]] = {}
    for c in completions:
        by_prompt.setdefault(c.prompt_index, []).append(c)
    out = {}
    for p, group in by_prompt.items():
        group.sort(key=lambda c: c.sample_index)
        prompt = s.prompts[p]
        rewards = np.array(
            [
                float(
                    s.reward_fn(
                        prompt=prompt.text,
                        completion=s.tokenizer.decode(c.token_ids, skip_special_tokens=True),
                        answer=prompt.answer,
                    )
                )
                for c in group
            ]
        )
        adv = group_advantages(rewards)
        for c, rw, a in zip(group, rewards, adv, strict=True):
            out[(p, c.sample_index)] = (float(rw), float(a))
    return out
