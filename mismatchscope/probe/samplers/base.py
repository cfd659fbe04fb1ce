"""What every sampler promises, and the logprob bookkeeping they share.

A sampler turns prompt ids into completions with, per generated token, the
logprob it gave the sampled token and its top-k list. Engines report the
sampled token and the top-k in one mapping (vLLM: up to k+1 entries, the
sampled token first); :func:`split_topk` turns that into the two things the
file format stores apart.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Protocol, cast, runtime_checkable

from mismatchscope.probe.types import Completion, SamplingConfig
from mismatchscope.progress import Advance
from mismatchscope.schema import LOGPROB_SENTINEL

from ...documents import json_edge


@runtime_checkable
class Sampler(Protocol):
    """A rollout engine under test."""

    def sample(
        self,
        prompts: list[list[int]],
        sampling: SamplingConfig,
        on_progress: Advance | None = None,
    ) -> list[Completion]:
        """One :class:`Completion` per (prompt, sample), prompt-major, ``sample_index`` in 0..n-1."""
        ...

    @json_edge
    def describe(self) -> dict[str, Any]:
        """Engine name and version, dtype, devices, effective engine args (never a secret)."""
        ...

    def close(self) -> None:
        """Release the engine (idempotent)."""
        ...


def manifest_safe(value: Any) -> Any:
    """A JSON-safe copy of engine options for the run manifest, the values of credential-named options
    (``hf_token``, ``api_key``, ``client_secret``: :func:`~mismatchscope.redact.is_secret_name`) redacted,
    and every text through :func:`~mismatchscope.redact.redact_obj` (a URL with credentials in any value)."""
    from mismatchscope.redact import REDACTED, is_secret_name, redact_obj

    if isinstance(value, dict):
        return {str(k): REDACTED if is_secret_name(str(k)) else manifest_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [manifest_safe(v) for v in value]
    if isinstance(value, str):
        return redact_obj(value)
    if isinstance(value, (int, float, bool)) or value is None:
        return value
    return redact_obj(repr(value))


def from_sentinel(value: float | None) -> float:
    """An OpenAI-style logprob back to a float: ``-9999.0`` (and None) mean -inf."""
    if value is None or value <= LOGPROB_SENTINEL:
        return -math.inf
    return float(value)


def split_topk(
    sampled_id: int,
    entries: Sequence[tuple[int, float, int | None]],
    k: int,
) -> tuple[float, list[int], list[float]]:
    """(sampled logprob, top-k ids, top-k logprobs) from an engine's per-position entries.

    ``entries`` are (token id, logprob, rank or None) in the engine's order,
    which for vLLM is the sampled token first, then the top-k by rank. The
    sampled token is part of the top-k only when it is ranked there: with
    ``k + 1`` entries it was not, and the first entry is dropped from the
    top-k. Ranks, when known, order the top-k; otherwise the logprob does
    (stable, so engine order breaks ties).
    """
    by_id = {tid: lp for tid, lp, _ in entries}
    if sampled_id not in by_id:
        raise ValueError(f"the engine did not report the sampled token {sampled_id}")
    listed = list(entries)
    if len(listed) > k and listed and listed[0][0] == sampled_id:
        listed = listed[1:]
    if all(rank is not None for _, _, rank in listed):
        listed.sort(key=lambda e: cast(int, e[2]))  # every rank is known here
    else:
        listed.sort(key=lambda e: -e[1])
    listed = listed[:k]
    return by_id[sampled_id], [e[0] for e in listed], [e[1] for e in listed]


def request_layout(n_prompts: int, sampling: SamplingConfig) -> tuple[list[int], int]:
    """(prompt index of each engine request, n per request).

    vLLM refuses ``n > 1`` with greedy sampling (T < 1e-5), so greedy
    prompts are sent n times with ``n=1`` instead; otherwise each prompt is
    one request with ``n``. Either way request j's output o is sample
    ``j % copies + o`` of prompt ``layout[j]``.
    """
    from mismatchscope.probe.token_scoring import GREEDY_EPS

    copies = sampling.n if sampling.temperature < GREEDY_EPS else 1
    return [p for p in range(n_prompts) for _ in range(copies)], sampling.n // copies


def sample_index(request: int, output: int, sampling: SamplingConfig, per_request_n: int) -> int:
    """Which of the n samples output ``output`` of engine request ``request`` is (see request_layout)."""
    copies = sampling.n // per_request_n
    return request % copies + output


def check_prompts(prompts: list[list[int]], sampling: SamplingConfig) -> None:
    """Fail early, with the CLI's error types, on inputs every engine would reject."""
    from mismatchscope.errors import PromptError, UsageError

    if not prompts:
        raise PromptError("there are no prompts to sample from")
    for i, ids in enumerate(prompts):
        if not ids:
            raise PromptError(f"prompt {i} has no tokens")
    if sampling.n < 1 or sampling.max_tokens < 1:
        raise UsageError(f"n={sampling.n} and max_tokens={sampling.max_tokens} must both be >= 1")
    if sampling.top_k_logprobs < 0:
        raise UsageError("top_k_logprobs must be >= 0 (0: the sampled token only)")
    if not 0.0 < sampling.top_p <= 1.0:
        raise UsageError(f"top_p={sampling.top_p} must be in (0, 1]")
    if sampling.temperature < 0:
        raise UsageError(f"temperature={sampling.temperature} must be >= 0")
