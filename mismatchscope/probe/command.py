"""``probe``: sample with a real engine, teacher-force with a real trainer, record.

Order of work, chosen so a killed probe loses nothing it finished:

1. check the options, the checkpoint, tokenizer and prompts, and the trainer's
   own checkpoint when it has one (cheap, before any engine starts), and reach
   a ``vllm-server`` (its model list): all before the run directory exists;
2. per sampling round (all prompts by default: one ``generate`` batch, as a
   serving engine would see them), sample and persist the raw completions;
3. score completions with the trainer shard by shard, writing each token shard
   as soon as it is scored (``scoring.py``);
4. mark the manifest complete.

``--resume`` skips rounds already sampled and sequences already scored. A run
that fails before its first round is sampled takes back what it wrote, so the
same command can simply be run again.
Sequence ids are ``prompt_id * n + sample_index``, so a resumed run can
neither duplicate nor lose a sequence.

What the checks produce travels as one :class:`ProbeSession`, not as a dozen
positional values.
"""

from __future__ import annotations

import contextlib
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._version import __version__
from ..documents import flatten, json_edge, to_json
from ..errors import UsageError
from ..progress import Progress
from ..redact import redact_command, redact_obj, redact_url
from ..routing.io import Shape
from .checkpoint import CheckpointInfo
from .options import ProbeOptions, canonical_options, check_against_checkpoint, check_engine_installed, check_options
from .policy_lag import TrainerCheckpoint
from .prompts import Prompt, file_sha256, load_prompts
from .provenance import record_side, refresh_fallbacks, sampler_side, trainer_side
from .rewards import DEFAULT_REWARD, RewardFn, load_reward_fn
from .routes import RoundRoutes, check_replay_probe, routing_manifest, save_sampler_round
from .routes import sampler_side as route_side
from .samplers.base import Sampler, check_prompts
from .scoring import (
    Scoring,
    lag_fingerprint,
    load_trainer,
    score_round,
    semantics,
    trainer_checkpoint,
    write_prompts_once,
)
from .turns import TurnsRecord
from .types import Completion, SamplerConfig
from .writer import RunDir, finish, open_session, save_progress

if TYPE_CHECKING:
    from .turns import Conversations

AUTO_MAX_TOKENS = 256


@dataclass
class ProbeSession:
    """What a probe has checked and opened before its rounds run, carried whole through them."""

    opts: ProbeOptions
    """canonical, with ``max_tokens`` resolved when it was 0 (auto)."""
    info: CheckpointInfo
    """the sampler's checkpoint."""
    tokenizer: Any
    prompts: list[Prompt]
    prompt_ids: list[list[int]]
    reward_fn: RewardFn
    progress: Progress
    run: RunDir
    sampler: Sampler | None
    """the engine: the caller's, or the probe's own once started (None until then)."""
    owned: bool
    """whether the probe started the sampler (and closes it); a caller's engine is left open."""
    conversations: Conversations | None = None
    """``--turns``: the chat template's view of the conversations (None: one turn)."""


def run_probe(opts: ProbeOptions, progress: Progress | None = None, sampler: Sampler | None = None) -> Path:
    """Run a probe into ``opts.out``. ``sampler``: an engine the caller already
    started (and closes itself), for callers that use it again afterwards."""
    s = _prepare(opts, progress or Progress(), sampler)
    if s.owned and _server_first(s.opts, s.run, len(s.prompts)):  # unreachable, refused, another model: before
        _started_sampler(s)  # the run exists
    try:
        with s.run.lock():  # before anything reads what the directory holds: a second writer is refused here
            return _probe_locked(s)
    finally:
        if s.owned and s.sampler is not None:
            s.sampler.close()  # idempotent: _sample_and_score closes an engine it started itself


def _prepare(opts: ProbeOptions, progress: Progress, sampler: Sampler | None) -> ProbeSession:
    """Every check that needs no engine, in the order a user meets them; the session they leave."""
    check_options(opts)  # before any file is written or engine started
    if opts.sampler_prefill and not opts.sampler.zero:  # the zero profile's prefill is its decode's own program
        from .sampler_prefill import check_sampler_prefill

        check_sampler_prefill(opts.sampler.kind, opts.sampling)
    opts = canonical_options(opts)
    if opts.turns is not None:  # a conversation's routes are not recorded (nor replayed: refused above)
        opts = replace(opts, trainer=replace(opts.trainer, record_routes=False))
    prompts = load_prompts(opts.prompts)
    info = _checked_checkpoint(opts)
    tokenizer = _checked_tokenizer(opts, info, prompts)
    conversations = None
    if opts.turns is not None:
        from .turns import Conversations

        conversations = Conversations(tokenizer, opts.turns, info.path)  # the template, before any engine
        opts, prompt_ids = _conversation_prompts(opts, info, conversations, prompts)
    else:
        opts, prompt_ids = _tokenized(opts, info, tokenizer, prompts)
    reward_fn = load_reward_fn(opts.reward_fn)
    check_engine_installed(opts.sampler)
    return ProbeSession(
        opts,
        info,
        tokenizer,
        prompts,
        prompt_ids,
        reward_fn,
        progress,
        RunDir(opts.out),
        sampler,
        sampler is None,
        conversations,
    )


def _checked_checkpoint(opts: ProbeOptions) -> CheckpointInfo:
    """The sampler's checkpoint, checked against the options and against its own config."""
    from .checkpoint import check_weights_cover_config, inspect_checkpoint

    trust = opts.trainer.trust_remote_code
    info = inspect_checkpoint(opts.checkpoint, allow_pickle=opts.trainer.allow_pickle, trust_remote_code=trust)
    check_against_checkpoint(opts, info)
    check_replay_probe(opts.trainer.replay, info, opts.sampler.kind)
    check_weights_cover_config(info, trust_remote_code=trust)
    return info


def _checked_tokenizer(opts: ProbeOptions, info: CheckpointInfo, prompts: list[Prompt]) -> Any:
    """The checkpoint's tokenizer, checked (and against ``--sampler-tokenizer`` when one is given)."""
    from .tokenizer import check_tokenizer, load_tokenizer

    trust = opts.trainer.trust_remote_code
    tokenizer = load_tokenizer(info.path, trust_remote_code=trust)
    other = load_tokenizer(opts.sampler_tokenizer, trust_remote_code=trust) if opts.sampler_tokenizer else None
    check_tokenizer(tokenizer, info, [p.text for p in prompts], other=other)
    return tokenizer


def _tokenized(
    opts: ProbeOptions, info: CheckpointInfo, tokenizer: Any, prompts: list[Prompt]
) -> tuple[ProbeOptions, list[list[int]]]:
    """The prompts' ids, and the options with ``--max-tokens 0`` (auto) resolved against the context length."""
    from .tokenizer import tokenize_prompts

    texts = [p.text for p in prompts]
    max_len = opts.sampler.max_model_len or info.max_model_len
    if opts.sampling.max_tokens == 0:  # auto: as long as the context allows, up to AUTO_MAX_TOKENS
        prompt_ids = tokenize_prompts(tokenizer, texts, max_model_len=max_len, max_tokens=1)
        room = max_len - max(len(p) for p in prompt_ids)
        opts = replace(opts, sampling=replace(opts.sampling, max_tokens=min(AUTO_MAX_TOKENS, room)))
    prompt_ids = tokenize_prompts(tokenizer, texts, max_model_len=max_len, max_tokens=opts.sampling.max_tokens)
    check_prompts(prompt_ids, opts.sampling)  # what every engine would refuse, refused before the run exists
    return opts, prompt_ids


def _conversation_prompts(
    opts: ProbeOptions, info: CheckpointInfo, conv: Conversations, prompts: list[Prompt]
) -> tuple[ProbeOptions, list[list[int]]]:
    """``--turns``: each prompt as the chat template's first user message, and ``--max-tokens`` per turn, so that
    every turn and the tool spans between them fit the context (0: as long as they allow, up to
    AUTO_MAX_TOKENS)."""
    from ..errors import PromptError

    turns = conv.cfg.turns
    max_len = opts.sampler.max_model_len or info.max_model_len
    ids = []
    for i, p in enumerate(prompts):
        if not p.text:
            raise PromptError(f"prompt {i} is empty", hint="remove empty lines from the prompts file")
        ids.append(conv.first_prompt(p.text))
    spans = sum(len(conv.span(t)) for t in range(turns - 1))
    room = max_len - max(len(x) for x in ids) - spans
    per_turn = opts.sampling.max_tokens or min(AUTO_MAX_TOKENS, room // turns)
    if per_turn < 1 or per_turn * turns > room:
        raise PromptError(
            f"{turns} turns of {per_turn} tokens, {spans} tokens of tool spans and the longest prompt "
            f"({max(len(x) for x in ids)} tokens) need more than max_model_len={max_len}",
            hint="lower --turns or --max-tokens (0 sizes the turns to the context), or shorten --tool-response",
        )
    opts = replace(opts, sampling=replace(opts.sampling, max_tokens=per_turn))
    check_prompts(ids, opts.sampling)
    return opts, ids


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
    from .samplers import capabilities_of

    if not capabilities_of(opts.sampler.kind).remote:
        return False
    if not opts.resume:
        return True
    return not all(run.samples_path(r).exists() for r in range(len(_rounds(n_prompts, opts.round_prompts))))


def _started_sampler(s: ProbeSession) -> Sampler:
    """The session's engine, started on first use."""
    if s.sampler is None:
        from .samplers import make_sampler

        s.progress.note(f"starting sampler {s.opts.sampler.kind} ({s.opts.sampler.dtype})")
        s.sampler = make_sampler(s.opts.sampler, s.info, sampling=s.opts.sampling)
    return s.sampler


def _probe_locked(s: ProbeSession) -> Path:
    opts = s.opts
    texts = [p.text for p in s.prompts]
    trainer_ckpt = trainer_checkpoint(
        opts.trainer_checkpoint, s.run, opts.resume, s.info, s.tokenizer, texts, opts.trainer
    )
    prompts_sha = file_sha256(opts.prompts)
    manifest = s.run.open(_fingerprint(opts, s.info.sha256, prompts_sha, trainer_ckpt), opts.resume)
    try:
        return _sample_and_score(s, manifest, _config(s, trainer_ckpt, prompts_sha), trainer_ckpt)
    except BaseException:
        s.run.discard_unstarted()  # failed before a round was sampled: nothing to keep, nothing to block a re-run
        raise


@json_edge
def _fingerprint(
    opts: ProbeOptions, ckpt_sha: str, prompts_sha: str, trainer_ckpt: TrainerCheckpoint
) -> dict[str, Any]:
    """What a ``--resume`` must find unchanged: the inputs and every setting that changes a number."""
    s = opts.sampler
    return {
        **lag_fingerprint(trainer_ckpt),
        **({"sampler_prefill": True} if opts.sampler_prefill else {}),
        **({"full_vocab": True} if opts.full_vocab else {}),
        **({"turns": to_json(opts.turns.record())} if opts.turns is not None else {}),
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


@json_edge
def _safe_engine_args(s: SamplerConfig) -> dict[str, Any]:
    """Engine options as recorded: credential-named keys and URL credentials redacted."""
    from .samplers.base import manifest_safe

    return redact_obj(manifest_safe(s.engine_args))


@json_edge
def _config(s: ProbeSession, trainer_ckpt: TrainerCheckpoint, prompts_sha: str) -> dict[str, Any]:
    """The manifest's ``config``: what was run, recorded in every shard."""
    opts = s.opts
    return {
        "mismatchscope_version": __version__,
        "checkpoint": to_json(s.info.record()),
        "trainer_checkpoint": to_json(trainer_ckpt.record()),
        "prompts": {"path": str(opts.prompts), "sha256": prompts_sha, "count": len(s.prompts)},
        "sampling": opts.sampling.to_dict(),
        "semantics": {**to_json(semantics(opts.sampling)), **to_json(trainer_ckpt.semantics(s.info))},
        "sampler": {
            **opts.sampler.to_dict(),
            "kind": opts.sampler.kind,
            "url": redact_url(opts.sampler.url),
            "engine_args": _safe_engine_args(opts.sampler),
        },
        "trainer": opts.trainer.to_dict(),
        "reward_fn": opts.reward_fn or DEFAULT_REWARD,
        "round_prompts": opts.round_prompts,
        **({"turns": to_json(_turns_config(s))} if s.conversations is not None else {}),
    }


@dataclass(frozen=True)
class ConversationRecord:
    """``config.turns`` of a multi-turn probe: the options, the chat template and what the two sides score."""

    record: TurnsRecord = field(metadata=flatten())
    chat_template: str
    semantics: str


def _turns_config(s: ProbeSession) -> ConversationRecord:
    """``--turns``: what a conversation was, in the config every shard records."""
    assert s.conversations is not None  # called for a multi-turn probe only
    semantics = (
        "token in, token out: each turn's prompt is the previous prompt, the sampled ids and the template's tool "
        "span; the trainer scores those ids"
        if s.conversations.cfg.turn_ids == "tokens"
        else "decoded, re-rendered and encoded each turn; the trainer scores the final conversation encoded "
        "again (trainer_token_id where its ids differ)"
    )
    return ConversationRecord(s.conversations.cfg.record(), s.conversations.name, semantics)


def _sample_and_score(
    s: ProbeSession, manifest: dict[str, Any], config: dict[str, Any], trainer_ckpt: TrainerCheckpoint
) -> Path:
    """Each round not yet done: its samples (sampled now, or read back on a resume), then its scores."""
    manifest.update(
        {"config": config, "status": "running", "command": redact_command(sys.argv[1:]) if sys.argv else None}
    )
    timings = open_session(manifest, s.opts.resume)
    s.run.write_manifest(manifest)
    write_prompts_once(s.run, s.prompts, s.prompt_ids)
    rounds = _rounds(len(s.prompts), s.opts.round_prompts)
    done, todo = _todo(s, rounds)
    if s.sampler is not None:  # an engine the caller started, or the server reached before the run
        manifest["sampler_info"] = s.sampler.describe()
        _record_sampler(s, manifest, sampled=False)
    scoring: tuple[Scoring, Shape | None] | None = None
    try:
        for r in todo:
            completions = _round_completions(s, r, rounds[r], manifest, timings)
            if scoring is None:  # the trainer loads once, after the first round's samples
                scoring = _start_scoring(s, manifest, config, trainer_ckpt, done)
            routes = RoundRoutes.of_probe_round(scoring[1], s.run.path, r, s.opts.trainer.replay)
            timings["scoring_seconds"] += score_round(scoring[0], r, completions, routes)
            save_progress(s.run, manifest)
    finally:
        if s.sampler is not None and s.owned:
            s.sampler.close()
    refresh_fallbacks(manifest, "probe")
    finish(s.run, manifest)
    return s.run.path


def _record_sampler(s: ProbeSession, manifest: dict[str, Any], *, sampled: bool = True) -> None:
    assert s.sampler is not None
    side = sampler_side(
        s.sampler, s.info, s.opts.sampling, "probe", sampled=sampled, conversation=s.conversations is not None
    )
    record_side(manifest, "sampler", side)


def _todo(s: ProbeSession, rounds: list[list[int]]) -> tuple[set[int], list[int]]:
    """The sequences already scored (a resume), and the rounds with at least one sequence left."""
    n = s.opts.sampling.n
    done = s.run.scored_sequences() if s.opts.resume else set()
    todo = [r for r in range(len(rounds)) if any(p * n + k not in done for p in rounds[r] for k in range(n))]
    if s.opts.resume:
        s.progress.note(f"resuming: {len(done)} sequences already scored, {len(todo)} round(s) left")
    return done, todo


def _round_completions(
    s: ProbeSession, r: int, prompts: list[int], manifest: dict[str, Any], timings: dict[str, Any]
) -> list[Completion]:
    """Round ``r``'s completions: read back when its samples were saved, else sampled and saved now."""
    if s.run.samples_path(r).exists():
        return s.run.read_samples(r)
    opts = s.opts
    if s.conversations is not None:
        return _round_conversations(s, r, prompts, manifest, timings)
    sampler = _started_sampler(s)
    s.progress.stage("sampling", len(prompts) * opts.sampling.n)
    if opts.full_vocab:
        sampler.keep_rows = True  # type: ignore[attr-defined]  # the hf samplers; checked before the run
    t0 = time.perf_counter()
    local = sampler.sample(
        [s.prompt_ids[p] for p in prompts],
        opts.sampling,
        on_progress=lambda k: s.progress.advance("sampling", k),
    )
    timings["sampling_seconds"] += time.perf_counter() - t0
    completions = [replace(c, prompt_index=prompts[c.prompt_index]) for c in local]
    if opts.sampler_prefill:
        from .sampler_prefill import with_sampler_prefill

        completions = with_sampler_prefill(sampler, s.prompt_ids, completions, opts.sampling)
    _check_completions(completions, prompts, opts.sampling.n)
    save_sampler_round(s.run.path, r, completions, opts.sampling.n)  # before the samples: they imply its routes
    s.run.write_samples(r, completions)
    manifest["sampler_info"] = sampler.describe()  # saved with the round: a killed run keeps it
    _record_sampler(s, manifest)
    save_progress(s.run, manifest)
    return completions


def _round_conversations(
    s: ProbeSession, r: int, prompts: list[int], manifest: dict[str, Any], timings: dict[str, Any]
) -> list[Completion]:
    """``--turns``: round ``r``'s conversations, turn by turn (:mod:`.conversations`), then saved whole."""
    from .conversations import sample_round

    assert s.conversations is not None  # called for a multi-turn probe only
    max_len = s.opts.sampler.max_model_len or s.info.max_model_len
    completions, ended = sample_round(
        s.run,
        r,
        s.prompts,
        s.prompt_ids,
        prompts,
        s.opts.sampling,
        s.conversations,
        max_len,
        lambda: _started_sampler(s),
        s.progress,
        timings,
    )
    if ended:
        manifest["conversations_ended_early"] = manifest.get("conversations_ended_early", 0) + ended
    s.run.write_samples(r, completions)
    for t in range(s.conversations.cfg.turns):  # the round's samples hold every turn now
        s.run.turn_samples_path(r, t).unlink(missing_ok=True)
    with contextlib.suppress(OSError):
        s.run.turn_samples_path(r, 0).parent.rmdir()  # only when empty: another round may be under way
    if s.sampler is not None:
        manifest["sampler_info"] = s.sampler.describe()
        _record_sampler(s, manifest)  # what the engine received for this run's turns
    save_progress(s.run, manifest)
    return completions


def _start_scoring(
    s: ProbeSession, manifest: dict[str, Any], config: dict[str, Any], trainer_ckpt: TrainerCheckpoint, done: set[int]
) -> tuple[Scoring, Shape | None]:
    """Load the trainer, record it and the run's route layout; what scoring each round reads."""
    opts = s.opts
    trainer = load_trainer(trainer_ckpt, opts.trainer, s.progress)
    manifest["trainer_info"] = trainer.describe()
    record_side(manifest, "trainer", trainer_side(trainer, trainer_ckpt.info, opts.sampling, "probe"))
    side = route_side(s.sampler, opts.sampler.kind) if s.sampler is not None else None
    shape = routing_manifest(manifest, trainer, side, opts.trainer.replay, s.progress.note)
    scoring = Scoring(
        s.run,
        s.prompts,
        s.prompt_ids,
        s.tokenizer,
        s.reward_fn,
        trainer,
        opts.sampling,
        done,
        config,
        s.progress,
        s.conversations,
    )
    return scoring, shape


def _check_completions(completions: list[Completion], prompt_indices: list[int], n: int) -> None:
    """What the engine returned is what was asked for: every (prompt, sample) once, each list aligned."""
    got = sorted((c.prompt_index, c.sample_index) for c in completions)
    want = sorted((p, k) for p in prompt_indices for k in range(n))
    if got != want:
        raise UsageError(f"the sampler returned {len(got)} completions for {len(want)} requested (prompts x n)")
    for c in completions:
        if not (len(c.token_ids) == len(c.sampler_logprobs) == len(c.topk_ids) == len(c.topk_logprobs)):
            raise UsageError(
                f"the sampler returned misaligned lists for prompt {c.prompt_index} sample {c.sample_index}"
            )
