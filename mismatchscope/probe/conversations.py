"""``probe --turns N``: a round's conversations sampled turn by turn, and scored as the trainer sees them.

Turn 0 samples each prompt ``n`` times, as a single-turn probe does; every
later turn continues each of the ``prompts x n`` conversations once (``n =
1``, the seed moved on by the turn), from the prompt :class:`~.turns.Conversations`
makes of it. Each turn's completions are saved as soon as they are sampled
(``samples/turns/``), so a killed probe goes on from the next turn; once the
round's last turn is in, its conversations are saved as the round's samples
(the turns' sampled ids laid end to end, each token's turn beside it) and
scored. A conversation whose next prompt would leave no room for
``--max-tokens`` in the context ends there (counted in the manifest).

Scoring: the trainer scores each conversation's final ids in one forward
(:meth:`~.turns.Conversations.trainer_ids`), and each turn's sampled tokens are
paired with the trainer's tokens of that turn.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from ..errors import SamplerError
from .columns import Rewards, token_columns
from .types import Completion, SamplingConfig, Scored, ScoreRequest

if TYPE_CHECKING:
    from .prompts import Prompt
    from .samplers.base import Sampler
    from .turns import Conversations
    from .writer import RunDir

Key = tuple[int, int]
"""(prompt index, sample index): one conversation."""


def sample_round(
    run: RunDir,
    r: int,
    prompts: list[Prompt],
    prompt_ids: list[list[int]],
    indices: list[int],
    sampling: SamplingConfig,
    conv: Conversations,
    max_len: int,
    start: Callable[[], Sampler],
    progress: Any,
    timings: dict[str, Any],
) -> tuple[list[Completion], int]:
    """Round ``r``'s conversations (one :class:`Completion` each, every turn in it) and how many ended early."""
    turns: dict[Key, list[Completion]] = {}
    contexts: dict[Key, list[int]] = {}
    ended = 0
    for t in range(conv.cfg.turns):
        if t == 0:
            keys = [(p, k) for p in indices for k in range(sampling.n)]
            requests = {(p, 0): prompt_ids[p] for p in indices}
        else:
            requests = {}
            for key in list(turns):
                if len(turns[key]) < t:
                    continue  # ended earlier
                ids = conv.next_prompt(prompts[key[0]].text, contexts[key], [c.token_ids for c in turns[key]])
                if len(ids) + sampling.max_tokens > max_len:
                    ended += 1
                    continue
                requests[key] = ids
            keys = list(requests)
        if not keys:
            break
        done = _turn(run, r, t, requests, sampling, start, progress, timings)
        for c in done:
            key = (c.prompt_index, c.sample_index)
            turns.setdefault(key, []).append(c)
            contexts[key] = requests[(key[0], 0) if t == 0 else key]
    return [_joined(key, parts) for key, parts in sorted(turns.items())], ended


def _turn(
    run: RunDir,
    r: int,
    t: int,
    requests: dict[Key, list[int]],
    sampling: SamplingConfig,
    start: Callable[[], Sampler],
    progress: Any,
    timings: dict[str, Any],
) -> list[Completion]:
    """Turn ``t`` of round ``r``: read back when it was saved, else sampled and saved now. Completions carry
    their conversation's (prompt index, sample index)."""
    if run.turn_samples_path(r, t).exists():
        return run.read_samples(path=run.turn_samples_path(r, t))
    keys = list(requests)
    asked = sampling if t == 0 else replace(sampling, n=1, seed=sampling.seed + t)
    total = len(keys) * asked.n
    progress.stage("sampling" if t == 0 else f"sampling turn {t}", total)
    t0 = time.perf_counter()
    stage = "sampling" if t == 0 else f"sampling turn {t}"
    out = []
    for batch in prefill_batches(keys, requests, asked.n):
        local = start().sample([requests[k] for k in batch], asked, on_progress=lambda k: progress.advance(stage, k))
        if t == 0:  # each prompt n times, as a single-turn probe samples it
            out += [replace(c, prompt_index=batch[c.prompt_index][0]) for c in local]
        else:  # each conversation once
            out += [
                replace(c, prompt_index=batch[c.prompt_index][0], sample_index=batch[c.prompt_index][1]) for c in local
            ]
    timings["sampling_seconds"] += time.perf_counter() - t0
    wanted = [(p, k) for p, _ in keys for k in range(asked.n)] if t == 0 else keys
    if sorted((c.prompt_index, c.sample_index) for c in out) != sorted(wanted):
        raise SamplerError(f"the sampler returned {len(out)} completions for the {total} asked for at turn {t}")
    run.write_samples(r, out, path=run.turn_samples_path(r, t))
    return out


PREFILL_TOKENS = 2048
"""prompt tokens one engine call of a turn holds at most. Later turns' prompts are whole conversations: all at
once they outgrow vLLM's per-step token budget (4096 on the CPU), a prefill is then split over steps, and vLLM's
CPU build stops on any seeded request whose prefill was split ("CPU Generator does not use offset", as
``diagnose`` notes for chunked prefill). A call whose prompts fit half the budget is prefilled in its first step."""


def prefill_batches(keys: list[Key], requests: dict[Key, list[int]], n: int) -> list[list[Key]]:
    """``keys`` in order, cut into engine calls of at most :data:`PREFILL_TOKENS` prompt tokens (times ``n``)."""
    out: list[list[Key]] = [[]]
    size = 0
    for k in keys:
        tokens = len(requests[k]) * n
        if out[-1] and size + tokens > PREFILL_TOKENS:
            out.append([])
            size = 0
        out[-1].append(k)
        size += tokens
    return out


def _joined(key: Key, parts: list[Completion]) -> Completion:
    """One conversation: its turns' sampled tokens laid end to end, each token's turn beside it."""
    out = Completion(key[0], key[1], [], [], [], [], parts[-1].finish_reason, turns=[])
    for t, c in enumerate(parts):
        out.token_ids += c.token_ids
        out.sampler_logprobs += c.sampler_logprobs
        out.topk_ids += c.topk_ids
        out.topk_logprobs += c.topk_logprobs
        assert out.turns is not None  # made above
        out.turns += [t] * len(c.token_ids)
    return out


def split_turns(c: Completion) -> list[list[int]]:
    """A conversation's sampled ids, turn by turn."""
    turns: list[list[int]] = []
    for tok, t in zip(c.token_ids, c.turns or [0] * len(c.token_ids), strict=True):
        while len(turns) <= t:
            turns.append([])
        turns[t].append(tok)
    return turns


# ---- scoring ----------------------------------------------------------------------------------


def score_conversations(
    trainer: Any,
    conv: Conversations,
    shard: list[Completion],
    prompts: list[Prompt],
    prompt_ids: list[list[int]],
    sampling: SamplingConfig,
    rewards: Rewards,
    n: int,
) -> dict[str, list]:
    """The token-pair columns of a shard of conversations: each scored by the trainer in one forward over its
    final ids, each turn's sampled tokens paired with the trainer's tokens of the turn."""
    reqs, pairs = [], []
    for c in shard:
        turns = split_turns(c)
        ids, where = conv.trainer_ids(prompts[c.prompt_index].text, prompt_ids[c.prompt_index], turns)
        first = min((w[0] for w in where if w), default=len(ids))
        topk: list[list[int]] = [[] for _ in range(len(ids) - first)]
        rows = _rows(c, where)
        for i, j in rows:
            topk[j - first] = c.topk_ids[i]
        reqs.append(ScoreRequest(ids[:first], ids[first:], topk))
        pairs.append((rows, first, ids))
    scored = trainer.score(reqs, sampling)
    paired_c, paired_s = [], []
    for c, sc, (rows, first, ids) in zip(shard, scored, pairs, strict=True):
        keep = [i for i, _ in rows]
        at = [j - first for _, j in rows]
        paired_c.append(
            replace(
                c,
                token_ids=[c.token_ids[i] for i in keep],
                sampler_logprobs=[c.sampler_logprobs[i] for i in keep],
                topk_ids=[c.topk_ids[i] for i in keep],
                topk_logprobs=[c.topk_logprobs[i] for i in keep],
                turns=[(c.turns or [])[i] for i in keep],
                trainer_token_ids=[ids[j] for _, j in rows] if conv.cfg.turn_ids == "messages" else None,
            )
        )
        paired_s.append(
            Scored(
                trainer_logprobs=[sc.trainer_logprobs[a] for a in at],
                logprobs_at_sampler_topk=[sc.logprobs_at_sampler_topk[a] for a in at],
                topk_ids=[sc.topk_ids[a] for a in at],
                topk_logprobs=[sc.topk_logprobs[a] for a in at],
                entropy=[sc.entropy[a] for a in at],
                kept_logmass=[sc.kept_logmass[a] for a in at] if sc.kept_logmass is not None else None,
            )
        )
    return token_columns(paired_c, paired_s, rewards, n)


def _rows(c: Completion, where: list[list[int]]) -> list[tuple[int, int]]:
    """(index among the conversation's sampled tokens, index in the trainer's ids) of each pair: a turn's k-th
    sampled token with the trainer's k-th token of the turn, as far as both reach."""
    rows, offset = [], 0
    turns = split_turns(c)
    for t, sampled in enumerate(turns):
        trainer = where[t] if t < len(where) else []
        rows += [(offset + k, trainer[k]) for k in range(min(len(sampled), len(trainer)))]
        offset += len(sampled)
    return rows
