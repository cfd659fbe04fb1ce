"""The token-pair columns of a probe's shard: completions and their scores, flattened and strictly aligned.

One row per completion token, in the analysis format (``schema.py``). The
optional columns appear only when the shard has something for them: rewards
when the prompts carry answers or a reward function was given, the kept mass
when the sampling truncates, the sampler's prefill with ``--sampler-prefill``,
the whole-row digests with ``--full-vocab``, the turn columns (and the trainer's
ids, where they may differ) with ``--turns``.
"""

from __future__ import annotations

from .types import Completion, Scored

BASE_COLUMNS = (
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
"""every probe shard's columns, in the order they are written."""

Rewards = dict[tuple[int, int], tuple[float, float]]
"""(prompt, sample) -> (reward, advantage)."""


def token_columns(completions: list[Completion], scored: list[Scored], rewards: Rewards, n: int) -> dict[str, list]:
    """Flatten completions and their scores into analysis-format columns (strictly aligned)."""
    if len(completions) != len(scored):
        raise ValueError(f"{len(completions)} completions but {len(scored)} scores")
    with_rewards = bool(rewards)
    with_kept = any(s.kept_logmass is not None for s in scored)
    with_prefill = any(c.sampler_prefill_logprobs is not None for c in completions)
    cols = _empty_columns(with_rewards=with_rewards, with_kept=with_kept, with_prefill=with_prefill)
    for c, s in zip(completions, scored, strict=True):
        _check_aligned(c, s)
        _append_pair(cols, c, s, n)
        L = len(c.token_ids)
        if with_rewards:
            rw, a = rewards[(c.prompt_index, c.sample_index)]
            cols["reward"] += [rw] * L
            cols["advantage"] += [a] * L
        if with_kept:
            cols["sampler_kept_logmass"] += s.kept_logmass if s.kept_logmass is not None else [0.0] * L
        if with_prefill:
            cols["sampler_prefill_logprob"] += c.sampler_prefill_logprobs or [float("nan")] * L
    if any(c.turns is not None for c in completions):
        cols["turn"], cols["turn_position"] = [], []
        for c in completions:
            turns = c.turns if c.turns is not None else [0] * len(c.token_ids)
            cols["turn"] += turns
            cols["turn_position"] += _within(turns)
    if any(c.trainer_token_ids is not None for c in completions):
        cols["trainer_token_id"] = [t for c in completions for t in (c.trainer_token_ids or c.token_ids)]
    return cols


def _within(turns: list[int]) -> list[int]:
    """Each token's index within its turn (turns laid end to end, in order)."""
    out, k, last = [], 0, None
    for t in turns:
        k = k + 1 if t == last else 0
        out.append(k)
        last = t
    return out


def _empty_columns(*, with_rewards: bool, with_kept: bool, with_prefill: bool) -> dict[str, list]:
    """The shard's columns, empty, in the order they are written."""
    cols: dict[str, list] = {k: [] for k in BASE_COLUMNS}
    if with_prefill:
        cols["sampler_prefill_logprob"] = []
    if with_rewards:
        cols["advantage"], cols["reward"] = [], []
    if with_kept:
        cols["sampler_kept_logmass"] = []
    return cols


def _check_aligned(c: Completion, s: Scored) -> None:
    """Every per-token list of a completion and its score has one entry per completion token."""
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


def _append_pair(cols: dict[str, list], c: Completion, s: Scored, n: int) -> None:
    """The base columns of one completion: its ids, both sides' logprobs, both top-k lists, the entropy."""
    L = len(c.token_ids)
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


def with_row_columns(cols: dict[str, list], scored: list[Scored]) -> dict[str, list]:
    """``--full-vocab``: each completion's whole-row digests, in the shard's order (the columns as they are else)."""
    if any(sc.row_columns is not None for sc in scored):
        from .full_rows import COLUMNS as ROW_COLUMNS

        for name in ROW_COLUMNS:
            cols[name] = [v for sc in scored for v in (sc.row_columns or {}).get(name, [])]
    return cols
