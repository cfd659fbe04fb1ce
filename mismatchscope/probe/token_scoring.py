"""From a block of trainer logits to the numbers a probe records per position.

The sampler reports logprobs of *some* distribution: with vLLM's
``raw_logprobs`` that is ``softmax(logits)``; with ``processed_logprobs`` it is
``softmax(logits / T)`` renormalised over the tokens top-k/top-p kept. The
trainer side must compute the same distribution from its own logits, or the
probe reports a definition difference as numerical mismatch (docs/probe.md). :class:`Processing` says which
distribution; :func:`score_positions` computes it for a chunk of rows.

The kept set follows vLLM's reference implementation
(``apply_top_k_top_p_pytorch`` in ``vllm/v1/sample/ops/topk_topp_sampler.py``;
HF's ``TopKLogitsWarper``/``TopPLogitsWarper`` agree): top-k keeps logits
``>=`` the k-th largest (ties kept), then top-p sorts ascending, takes the
cumulative softmax and drops every token whose cumulative mass is ``<= 1 - p``,
always keeping the largest.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from mismatchscope.probe.types import SamplingConfig

if TYPE_CHECKING:  # pragma: no cover
    import torch

GREEDY_EPS = 1e-5
"""vLLM treats ``temperature < 1e-5`` as greedy (``_SAMPLING_EPS``): no scaling, no top-k/top-p."""


@dataclass(frozen=True)
class Processing:
    """The distribution the sampler's logprobs are over, as seen from the trainer."""

    temperature: float = 1.0
    """divide logits by this before the softmax (1.0: raw, or greedy)."""
    top_k: int = 0
    """keep the k largest logits (0: all)."""
    top_p: float = 1.0
    """keep the smallest top set with mass >= p (1.0: all)."""

    @classmethod
    def from_sampling(cls, sampling: SamplingConfig) -> Processing:
        """``raw_logprobs`` -> T=1, full vocabulary; ``processed_logprobs`` -> T and the kept set.

        Greedy sampling (T < 1e-5) is compared at T=1 over the full
        vocabulary in both modes, because that is what vLLM returns then.
        """
        if sampling.logprobs_mode == "raw_logprobs" or sampling.temperature < GREEDY_EPS:
            return cls()
        top_k = sampling.top_k if sampling.top_k and sampling.top_k > 0 else 0
        return cls(temperature=float(sampling.temperature), top_k=top_k, top_p=float(sampling.top_p))

    def truncates(self, vocab_size: int) -> bool:
        """Whether top-k/top-p can drop tokens at all for this vocabulary."""
        return self.top_p < 1.0 or 0 < self.top_k < vocab_size


@dataclass
class PositionScores:
    """Per-row results of :func:`score_positions` (fp32 tensors on the logits' device)."""

    logprob: torch.Tensor
    """[N] log p of the label under the processed distribution (-inf if not kept)."""
    kept_logmass: torch.Tensor | None
    """[N] log of the full-vocabulary (T-scaled) mass on the kept set; None without truncation."""
    at_listed: torch.Tensor
    """[N, M] log p of each listed id (meaningless where the listed mask is False)."""
    top_ids: torch.Tensor
    """[N, k] the trainer's own top-k ids."""
    top_logprobs: torch.Tensor
    """[N, k]."""
    entropy: torch.Tensor
    """[N] entropy in nats of the same processed distribution."""

    def rows(self, start: int, stop: int) -> PositionScores:
        """The scores of rows ``start .. stop - 1`` only."""
        kept = None if self.kept_logmass is None else self.kept_logmass[start:stop]
        cut = (self.logprob, self.at_listed, self.top_ids, self.top_logprobs, self.entropy)
        logprob, at_listed, top_ids, top_logprobs, entropy = (t[start:stop] for t in cut)
        return PositionScores(logprob, kept, at_listed, top_ids, top_logprobs, entropy)


def kept_mask(logits: torch.Tensor, top_k: int, top_p: float) -> torch.Tensor:
    """Boolean [N, V]: the tokens vLLM's top-k then top-p would keep (logits already divided by T)."""
    import torch

    masked = logits
    vocab = logits.shape[-1]
    if 0 < top_k < vocab:
        kth = torch.topk(logits, top_k, dim=-1).values[..., -1:]
        masked = logits.masked_fill(logits < kth, float("-inf"))
    if top_p < 1.0:
        sorted_logits, order = masked.sort(dim=-1, descending=False)
        cumulative = sorted_logits.softmax(dim=-1).cumsum(dim=-1)
        drop_sorted = cumulative <= 1.0 - top_p
        drop_sorted[..., -1] = False  # the largest is always kept
        drop = torch.zeros_like(drop_sorted).scatter_(-1, order, drop_sorted)
        masked = masked.masked_fill(drop, float("-inf"))
    return torch.isfinite(masked) if masked is not logits else torch.ones_like(logits, dtype=torch.bool)


def score_positions(
    logits: torch.Tensor,
    labels: torch.Tensor,
    listed_ids: torch.Tensor,
    k: int,
    processing: Processing,
) -> PositionScores:
    """Score N rows of fp32 logits [N, V] against their labels [N].

    ``listed_ids`` [N, M] are the ids the sampler reported per row (padded
    with any valid id). Memory: a few [N, V] fp32 temporaries, so the caller
    bounds N (the lm_head chunk).

    Without truncation (the common case) each row is centred once
    (``y = x - max``) and exponentiated once; the normaliser, and the entropy
    as ``log sum e^y - E_p[y]`` through a batched dot product, come from those
    two buffers; labels, listed ids and the top-k are read from ``y`` and
    shifted by ``log sum e^y``, so no [N, V] logprob tensor is built. This keeps scoring close to the cost of the lm_head matmul itself
    (``benchmarks/bench_probe.py``).
    """
    import torch

    source, shift, kept_logmass, entropy = _normalise(logits, processing)

    def logprob_of(ids: torch.Tensor) -> torch.Tensor:
        picked = source.gather(-1, ids)
        return picked if shift is None else picked - shift

    k = min(k, source.shape[-1])
    top = torch.topk(source, k, dim=-1) if k > 0 else None
    empty = source.new_empty((source.shape[0], 0))
    return PositionScores(
        logprob=logprob_of(labels.unsqueeze(-1)).squeeze(-1),
        kept_logmass=kept_logmass,
        at_listed=logprob_of(listed_ids),
        top_ids=top.indices if top is not None else empty.long(),
        top_logprobs=(top.values if shift is None else top.values - shift) if top is not None else empty,
        entropy=entropy,
    )


def _normalise(logits: torch.Tensor, processing: Processing):
    """(source, shift, kept_logmass, entropy): the logprob of id ``i`` in a row is ``source[i] - shift``
    (``shift`` None: ``source`` already holds logprobs). One function, so that :func:`score_positions`
    and :func:`row_logprobs` run the same float operations on the same row."""
    import torch

    scaled = logits / processing.temperature if processing.temperature != 1.0 else logits
    if processing.truncates(scaled.shape[-1]):
        full_lse = torch.logsumexp(scaled, dim=-1)
        keep = kept_mask(scaled, processing.top_k, processing.top_p)
        scaled = scaled.masked_fill(~keep, float("-inf"))
        lse = torch.logsumexp(scaled, dim=-1)
        logprobs = scaled - lse.unsqueeze(-1)
        entropy = torch.special.entr(logprobs.exp()).sum(dim=-1)
        return logprobs, None, lse - full_lse, entropy
    # centred logits y = x - max <= 0 keep fp32 precision: the entropy is
    # log(sum e^y) - E_p[y], two small terms, not lse - E_p[x] (two large ones)
    centred = scaled - scaled.amax(dim=-1, keepdim=True)
    unnorm = torch.exp(centred)
    total = unnorm.sum(dim=-1)
    log_total = torch.log(total)
    entropy = log_total - torch.bmm(unnorm.unsqueeze(1), centred.unsqueeze(2)).reshape(-1) / total
    return centred, log_total.unsqueeze(-1), None, entropy


def row_logprobs(logits: torch.Tensor, processing: Processing) -> torch.Tensor:
    """[N, V] logprob rows of fp32 logits, each element the bytes :func:`score_positions` gives that id.

    A sampler that draws from these rows and reports ``row[token]`` reports
    what the trainer computes for the same logits: ``source[i] - shift`` is one
    rounded subtraction whether it is taken before or after the gather.
    """
    source, shift, _, _ = _normalise(logits, processing)
    return source if shift is None else source - shift
