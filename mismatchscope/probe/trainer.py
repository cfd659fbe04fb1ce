"""The trainer side: a teacher-forced transformers forward pass over the sampled ids.

What an RL trainer computes for the policy loss is ``log pi(y_t | prefix)``
for each sampled token, recomputed from the same ids the sampler produced.
:class:`HFTrainer` does that, the way trainers do it at scale:

* requests are batched by a token budget (rows x padded length), padded on
  the right. Attention is causal, so padding after a sequence cannot change
  it; the tests pin that scoring alone equals scoring in a batch;
* the decoder body runs once per batch, then only the hidden states that
  predict a completion token are kept and the lm_head is applied chunk by
  chunk (``lm_head_chunk`` rows), each chunk's logits upcast to fp32. This
  never builds the ``[batch, length, vocab]`` fp32 tensor (TRL's
  ``selective_log_softmax`` and verl's ``logprobs_from_logits_v2`` bound
  memory the same way);
* the logprob is taken over the distribution the sampler reported
  (:class:`~mismatchscope.probe.token_scoring.Processing`): T-scaled and
  renormalised over the kept set for ``processed_logprobs``, raw otherwise.

Models that transform their logits after the lm_head (Gemma's
``final_logit_softcapping``, Cohere's ``logit_scale``, Granite's
``logits_scaling``) get the same transform here; any other difference from
the model's own ``forward`` is caught by a one-time check on the first
request and refused rather than recorded as mismatch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from mismatchscope.errors import CheckpointError, InputError, UsageError
from mismatchscope.probe.checkpoint import CheckpointInfo, text_config
from mismatchscope.probe.hf_model import load_causal_lm, model_description
from mismatchscope.probe.routes import TrainerRoutes
from mismatchscope.probe.token_scoring import Processing, score_positions
from mismatchscope.probe.types import SamplingConfig, Scored, ScoreRequest, TrainerConfig
from mismatchscope.probe.zero import experts_implementation
from mismatchscope.progress import Advance

from ..documents import json_edge, to_json

if TYPE_CHECKING:
    import torch

SELF_CHECK_TOKENS = 64
"""length of the sequence the head path is checked on against ``model(...)``."""
SELF_CHECK_TOL = {"float32": 1e-3}
SELF_CHECK_TOL_LOW_PRECISION = 0.25


@dataclass(frozen=True)
class LogitTransform:
    """What a model does to its logits after the lm_head, read from its config."""

    softcap: float | None = None
    scale: float = 1.0

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> LogitTransform:
        text = text_config(config)
        softcap = text.get("final_logit_softcapping")
        scale = 1.0
        if text.get("logit_scale") not in (None, 1, 1.0):  # Cohere: logits * logit_scale
            scale *= float(text["logit_scale"])
        if text.get("logits_scaling") not in (None, 1, 1.0):  # Granite: logits / logits_scaling
            scale /= float(text["logits_scaling"])
        return cls(softcap=float(softcap) if softcap else None, scale=scale)

    def __call__(self, logits):
        import torch

        if self.scale != 1.0:
            logits = logits * self.scale
        if self.softcap:
            logits = torch.tanh(logits / self.softcap) * self.softcap
        return logits

    @json_edge
    def to_dict(self) -> dict[str, Any]:
        return {"final_logit_softcapping": self.softcap, "logit_scale": self.scale}


class HFTrainer:
    """Teacher-forced logprobs of sampled completions from a transformers model."""

    def __init__(self, info: CheckpointInfo, cfg: TrainerConfig):
        import torch

        self.info = info
        self.cfg = cfg
        if cfg.batch_tokens < 1 or cfg.lm_head_chunk < 1:
            raise UsageError(
                f"batch_tokens={cfg.batch_tokens} and lm_head_chunk={cfg.lm_head_chunk} must both be positive"
            )
        if info.pickle_weights and not cfg.allow_pickle:
            raise CheckpointError(
                f"{str(info.path)!r} holds only pickle weights and the trainer was not allowed to load them",
                hint="pass --allow-pickle (allow_pickle=True) if you trust the checkpoint's source",
            )
        self.transform = LogitTransform.from_config(info.config)
        self.model = load_causal_lm(
            info,
            dtype=cfg.dtype,
            device=cfg.device,
            device_map=cfg.device_map,
            attn_implementation=cfg.attn_implementation,
            trust_remote_code=cfg.trust_remote_code,
            experts_implementation=experts_implementation(info, cfg.zero),
        )
        decoder = self.model.get_decoder()
        head = self.model.get_output_embeddings()
        if decoder is None or decoder is self.model or head is None:
            raise CheckpointError(
                f"{type(self.model).__name__} exposes no decoder/lm_head (get_decoder, "
                "get_output_embeddings), so it cannot be scored chunk by chunk"
            )
        self.decoder = decoder
        self.head = head
        self.vocab_size = self.head.weight.shape[0]
        self._input_device = cast("torch.Tensor", self.model.get_input_embeddings().weight).device
        self._head_fp32: tuple[torch.Tensor, torch.Tensor | None] | None = None
        if cfg.fp32_lm_head:
            self._head_fp32 = (
                self.head.weight.detach().to(torch.float32),
                None if getattr(self.head, "bias", None) is None else self.head.bias.detach().float(),
            )
        self._checked = False
        self.routes = TrainerRoutes.attach(self.model, info) if cfg.record_routes else TrainerRoutes()

    # ------------------------------------------------------------ public

    def score(
        self,
        requests: list[ScoreRequest],
        sampling: SamplingConfig,
        on_progress: Advance | None = None,
    ) -> list[Scored]:
        """One :class:`Scored` per request, in order. ``on_progress(n)``: n more requests done."""
        import torch

        self._validate(requests)
        processing = Processing.from_sampling(sampling)
        results: list[Scored | None] = [None] * len(requests)
        with torch.inference_mode():
            if not self._checked and requests:
                self._check_head_path(requests[0])
            for batch in self._batches(requests) if not self.cfg.zero else [[i] for i in range(len(requests))]:
                reqs = [requests[i] for i in batch]
                scored = (
                    [self._score_zero(reqs[0], processing, sampling)]
                    if self.cfg.zero
                    else self._score_batch(reqs, processing, sampling.top_k_logprobs)
                )
                for i, s in zip(batch, scored, strict=True):
                    results[i] = s
                if on_progress is not None:
                    on_progress(len(batch))
        return results  # type: ignore[return-value]

    @json_edge
    def describe(self) -> dict[str, Any]:
        """Versions, device, dtype and scoring options, for the run manifest."""
        return {
            "engine": "transformers",
            **to_json(model_description(self.model)),
            "requested_dtype": self.cfg.dtype,
            "fp32_lm_head": self.cfg.fp32_lm_head,
            "batch_tokens": self.cfg.batch_tokens,
            "lm_head_chunk": self.cfg.lm_head_chunk,
            "logit_transform": self.transform.to_dict(),
        }

    # ------------------------------------------------------------ batching

    def _validate(self, requests: list[ScoreRequest]) -> None:
        for i, req in enumerate(requests):
            if not req.prompt_token_ids:
                raise InputError(f"score request {i} has an empty prompt: nothing predicts its first token")
            if req.sampler_topk_ids and len(req.sampler_topk_ids) != len(req.completion_token_ids):
                raise InputError(
                    f"score request {i}: {len(req.sampler_topk_ids)} listed-id rows for "
                    f"{len(req.completion_token_ids)} completion tokens"
                )
            ids = [*req.prompt_token_ids, *req.completion_token_ids]
            ids += [t for row in req.sampler_topk_ids for t in row]
            bad = next((t for t in ids if not 0 <= t < self.vocab_size), None)
            if bad is not None:
                raise InputError(
                    f"score request {i} holds token id {bad}, outside the model's vocabulary "
                    f"(0..{self.vocab_size - 1})",
                    hint="the sampler and the trainer are not using the same tokenizer/checkpoint",
                )

    def _batches(self, requests: list[ScoreRequest]) -> list[list[int]]:
        """Indices grouped so that rows x longest length <= batch_tokens (at least one row).

        Longest first, so rows of similar length share a batch and padding stays small.
        """
        order = sorted(range(len(requests)), key=lambda i: -_length(requests[i]))
        batches: list[list[int]] = []
        for i in order:
            if batches:
                current = batches[-1]
                longest = _length(requests[current[0]])
                if (len(current) + 1) * longest <= self.cfg.batch_tokens:
                    current.append(i)
                    continue
            batches.append([i])
        return batches

    # ------------------------------------------------------------ scoring

    def _hidden(self, rows: list[list[int]]):
        """Final hidden states [B, L, H] of right-padded rows."""
        import torch

        width = max(len(r) for r in rows)
        ids = torch.zeros((len(rows), width), dtype=torch.long)
        mask = torch.zeros((len(rows), width), dtype=torch.long)
        for r, row in enumerate(rows):
            ids[r, : len(row)] = torch.tensor(row, dtype=torch.long)
            mask[r, : len(row)] = 1
        out = self.decoder(
            input_ids=ids.to(self._input_device), attention_mask=mask.to(self._input_device), use_cache=False
        )
        return out.last_hidden_state if hasattr(out, "last_hidden_state") else out[0]

    def logits(self, hidden, *, fp32_head: bool | None = None):
        """fp32 logits of hidden rows [N, H], after the model's own logit transform."""
        import torch.nn.functional as F

        use_fp32 = self._head_fp32 is not None if fp32_head is None else fp32_head
        if use_fp32:
            assert self._head_fp32 is not None  # no caller asks for the fp32 head without one
            weight, bias = self._head_fp32
            logits = F.linear(hidden.to(weight.device, weight.dtype), weight, bias)
        else:
            logits = self.head(hidden.to(self.head.weight.device)).float()
        return self.transform(logits)

    def _score_batch(self, reqs: list[ScoreRequest], processing: Processing, k: int) -> list[Scored]:
        import torch

        seqs = [[*r.prompt_token_ids, *r.completion_token_ids] for r in reqs]
        if self.routes.tap is not None:
            self.routes.begin(seqs, [r.forced_routes for r in reqs])
        hidden = self._hidden(seqs)
        routes = self.routes.end(seqs) if self.routes.tap is not None else [None] * len(reqs)
        rows, cols, labels, listed, listed_len = [], [], [], [], []
        for b, r in enumerate(reqs):
            start = len(r.prompt_token_ids) - 1  # the hidden state at t predicts token t + 1
            n = len(r.completion_token_ids)
            rows += [b] * n
            cols += range(start, start + n)
            labels += r.completion_token_ids
            topk_rows = r.sampler_topk_ids or [[] for _ in range(n)]
            listed += topk_rows
            listed_len += [len(x) for x in topk_rows]
        if not labels:
            return [_with_routes(_empty_scored(processing.truncates(self.vocab_size)), r) for r in routes]
        width = max(max(listed_len), 1)
        # one tensor build, not one per position (id 0 pads; padded columns are never read back)
        listed_t = torch.tensor(
            [ids if len(ids) == width else [*ids, *([0] * (width - len(ids)))] for ids in listed], dtype=torch.long
        )
        picked = hidden[torch.tensor(rows, device=hidden.device), torch.tensor(cols, device=hidden.device)]
        labels_t = torch.tensor(labels, dtype=torch.long)
        parts, full = [], []
        chunk = self.cfg.lm_head_chunk
        keep = any(r.sampler_rows is not None for r in reqs)
        for s in range(0, len(labels), chunk):
            logits = self.logits(picked[s : s + chunk])
            dev = logits.device
            parts.append(
                score_positions(logits, labels_t[s : s + chunk].to(dev), listed_t[s : s + chunk].to(dev), k, processing)
            )
            if keep:  # --full-vocab: this side's whole rows, compared below with the sampler's
                from mismatchscope.probe.token_scoring import row_logprobs

                full.append(row_logprobs(logits, processing).cpu().numpy())
        scored = _split(parts, [len(r.completion_token_ids) for r in reqs], listed_len, processing)
        if keep:
            _add_row_columns(reqs, scored, full)
        return [_with_routes(s, r) for s, r in zip(scored, routes, strict=True)]

    def _score_zero(self, req: ScoreRequest, processing: Processing, sampling: SamplingConfig) -> Scored:
        """The zero profile: the sequence alone at its fixed width, through the sampler's own program
        (:func:`~mismatchscope.probe.zero.zero_logits`), every row scored, the completion's rows kept."""
        import torch

        from mismatchscope.probe.zero import width, zero_logits

        seq = [*req.prompt_token_ids, *req.completion_token_ids]
        size = width(len(req.prompt_token_ids), sampling)
        if len(seq) > size:
            raise InputError(
                f"a completion of {len(req.completion_token_ids)} tokens is longer than max_tokens "
                f"({sampling.max_tokens}): the zero profile scores at the width the sampler decoded at"
            )
        padded = seq + [0] * (size - len(seq))
        if self.routes.tap is not None:
            self.routes.begin([padded], [req.forced_routes])
        logits = zero_logits(self.model, self.transform, seq, size)
        routes = _first_rows(self.routes.end([padded])[0], len(seq) - 1) if self.routes.tap is not None else None
        start, n = len(req.prompt_token_ids) - 1, len(req.completion_token_ids)
        labels = torch.zeros(size, dtype=torch.long)
        labels[start : start + n] = torch.tensor(req.completion_token_ids, dtype=torch.long)
        listed_rows = req.sampler_topk_ids or [[] for _ in range(n)]
        m = max([len(x) for x in listed_rows] + [1])
        listed = torch.zeros((size, m), dtype=torch.long)
        for i, row in enumerate(listed_rows):
            listed[start + i, : len(row)] = torch.tensor(row, dtype=torch.long)
        dev = logits.device
        part = score_positions(logits, labels.to(dev), listed.to(dev), sampling.top_k_logprobs, processing)
        scored = _split([part.rows(start, start + n)], [n], [len(x) for x in listed_rows], processing)[0]
        if req.sampler_rows is not None:
            from mismatchscope.probe.full_rows import row_columns
            from mismatchscope.probe.token_scoring import row_logprobs

            mine = row_logprobs(logits[start : start + n], processing).cpu().numpy()
            scored.row_columns = row_columns(req.sampler_rows, mine)
        return _with_routes(scored, routes)

    def _check_head_path(self, req: ScoreRequest) -> None:
        """Refuse a model whose ``forward`` does something to logits that we don't.

        Compares log_softmax of the model's own logits with the decoder +
        lm_head path on one short sequence, once per trainer.
        """
        import torch

        ids = [*req.prompt_token_ids, *req.completion_token_ids][:SELF_CHECK_TOKENS]
        x = torch.tensor([ids], device=self._input_device)
        reference = self.model(input_ids=x, use_cache=False).logits[0].float().log_softmax(-1)
        ours = self.logits(self._hidden([ids])[0], fp32_head=False).log_softmax(-1)
        if not bool(torch.isfinite(reference).any(-1).all()):  # every logprob of a position NaN or inf
            raise CheckpointError(
                f"{type(self.model).__name__}: the model's own forward gives non-finite logits (NaN or inf) "
                "on the first sequence: its weights hold non-finite values, or overflow in this dtype",
                hint="check the checkpoint (a diverged or damaged save), or score in float32",
            )
        diff = (reference - ours.to(reference.device)).abs().max().item()
        tol = SELF_CHECK_TOL.get(self.cfg.dtype, SELF_CHECK_TOL_LOW_PRECISION)
        if not diff <= tol:
            raise CheckpointError(
                f"{type(self.model).__name__}: the decoder + lm_head path differs from the model's own "
                f"forward by {diff:.3g} in logprob (tolerance {tol}); the model transforms its logits in "
                "a way mismatchscope does not reproduce",
                hint="report the model type so the transform can be added",
            )
        self._checked = True


def _with_routes(scored: Scored, routes) -> Scored:
    scored.routes = routes
    return scored


def _add_row_columns(reqs: list[ScoreRequest], scored: list[Scored], full: list) -> None:
    """``--full-vocab``: each completion's row columns from the trainer's rows (in request order) and the sampler's."""
    import numpy as np

    from mismatchscope.probe.full_rows import row_columns

    rows, pos = np.concatenate(full), 0
    for req, s in zip(reqs, scored, strict=True):
        n = len(req.completion_token_ids)
        if req.sampler_rows is not None:
            s.row_columns = row_columns(req.sampler_rows, rows[pos : pos + n])
        pos += n


def _first_rows(routes, rows: int):
    """A sequence's routes over its own input positions, not the padding after it."""
    from mismatchscope.routing.io import SeqRoutes

    def cut(a):
        return None if a is None else a[:rows]

    return SeqRoutes(routes.ids[:rows], cut(routes.weights), cut(routes.margin))


def _length(req: ScoreRequest) -> int:
    return len(req.prompt_token_ids) + len(req.completion_token_ids)


def _empty_scored(truncates: bool) -> Scored:
    return Scored([], [], [], [], [], [] if truncates else None)


def _split(parts, lengths: list[int], listed_len: list[int], processing: Processing) -> list[Scored]:
    """Concatenate chunk results and cut them back into one Scored per request."""
    import torch

    def cat(name):
        return torch.cat([getattr(p, name) for p in parts]).cpu()

    logprob, at_listed, top_ids, top_lp, entropy = (
        cat(n).tolist() for n in ("logprob", "at_listed", "top_ids", "top_logprobs", "entropy")
    )
    kept = cat("kept_logmass").tolist() if parts[0].kept_logmass is not None else None
    out, pos = [], 0
    for n in lengths:
        sl = slice(pos, pos + n)
        out.append(
            Scored(
                trainer_logprobs=logprob[sl],
                logprobs_at_sampler_topk=[row[:m] for row, m in zip(at_listed[sl], listed_len[sl], strict=True)],
                topk_ids=top_ids[sl],
                topk_logprobs=top_lp[sl],
                entropy=entropy[sl],
                kept_logmass=kept[sl] if kept is not None else None,
            )
        )
        pos += n
    return out
