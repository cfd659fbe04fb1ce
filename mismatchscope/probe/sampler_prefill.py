"""``probe --sampler-prefill``: the sampler's logprobs a second time, from a prefill of prompt + completion.

A decode step and a prefill of the same tokens run different kernels (one
query row against a KV cache, or the whole sequence at once), so the same
engine can give the same token two logprobs. With both recorded, ``certify``
places a gap: in the sampler's decode path (prefill equals the trainer,
decode does not), in its forward (prefill differs from the trainer too), or
nowhere. The prefill is scored on the token ids the sampler itself produced.

Prefill logprobs are raw: vLLM's prompt logprobs are ``log_softmax`` of the
raw logits (T = 1, full vocabulary) in either logprobs mode, and the
transformers sampler's forward is scored the same way. They are comparable
with the decode and trainer logprobs only where those are raw too: raw
logprobs, or T = 1 without top-k/top-p (or greedy), so other settings are
refused rather than recorded as mismatch.
"""

from __future__ import annotations

from dataclasses import replace

from ..errors import UsageError
from .token_scoring import GREEDY_EPS
from .types import Completion, SamplingConfig


def check_sampler_prefill(kind: str, sampling: SamplingConfig) -> None:
    """Refuse ``--sampler-prefill`` where it cannot give a logprob of the same distribution."""
    from .samplers import capabilities_of, kinds_with

    if not capabilities_of(kind).can_prefill:  # a server's prompt logprobs are not wired in
        raise UsageError(
            f"--sampler-prefill is not available with --sampler {kind}",
            hint=f"use --sampler {' or --sampler '.join(kinds_with('can_prefill'))}",
        )
    raw = (
        sampling.logprobs_mode == "raw_logprobs"
        or sampling.temperature < GREEDY_EPS
        or (sampling.temperature == 1.0 and sampling.top_p >= 1.0 and not (sampling.top_k and sampling.top_k > 0))
    )
    if not raw:
        raise UsageError(
            "--sampler-prefill records raw prefill logprobs (T = 1, full vocabulary), which the "
            f"sampling settings (T={sampling.temperature:g}, top-p {sampling.top_p:g}, "
            f"top-k {sampling.top_k}) do not report",
            hint="add --logprobs-mode raw_logprobs, or sample at T=1 without --top-p/--top-k",
        )


def with_sampler_prefill(
    sampler, prompt_ids: list[list[int]], completions: list[Completion], sampling: SamplingConfig
) -> list[Completion]:
    """The completions with ``sampler_prefill_logprobs`` filled in by the sampler's own prefill."""
    todo = [c for c in completions if c.token_ids]
    scored = (
        sampler.prefill_logprobs([prompt_ids[c.prompt_index] for c in todo], [c.token_ids for c in todo], sampling)
        if todo
        else []
    )
    by_key = {(c.prompt_index, c.sample_index): lps for c, lps in zip(todo, scored, strict=True)}
    out = []
    for c in completions:
        lps = by_key.get((c.prompt_index, c.sample_index), [])
        if len(lps) != len(c.token_ids):
            raise UsageError(
                f"the sampler's prefill returned {len(lps)} logprobs for the {len(c.token_ids)} "
                f"tokens of prompt {c.prompt_index} sample {c.sample_index}"
            )
        out.append(replace(c, sampler_prefill_logprobs=[float(x) for x in lps]))
    return out
