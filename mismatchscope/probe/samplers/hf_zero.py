"""The ``hf`` sampler under ``--zero``: decoding by recomputation with the trainer's own program.

Each decode step runs :func:`~mismatchscope.probe.zero.zero_logits` over the
sequence so far (no KV cache, one sequence, fixed width) and draws the next
token from :func:`~mismatchscope.probe.token_scoring.row_logprobs` of the last
row; the reported logprob is that row's entry for the drawn token, the bytes
the trainer computes for it (:mod:`mismatchscope.probe.zero` says why).
Its prefill (``--sampler-prefill``) is the same forward over the final
sequence. Draws use one ``torch.Generator`` per ``sample`` call, seeded with
the sampling seed, so a run repeats itself.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from mismatchscope.probe.samplers.base import check_prompts
from mismatchscope.probe.samplers.hf_generate import HFGenerateSampler
from mismatchscope.probe.token_scoring import GREEDY_EPS, Processing, row_logprobs
from mismatchscope.probe.trainer import LogitTransform
from mismatchscope.probe.types import Completion, SamplingConfig
from mismatchscope.probe.zero import DECODE, width, zero_logits
from mismatchscope.progress import Advance

from ...documents import json_edge


class HFZeroSampler(HFGenerateSampler):
    """Samples one sequence at a time, recomputing the whole forward at every step."""

    name = "hf"

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.transform = LogitTransform.from_config(self.info.config)
        self.batch_size = 1

    def sample(
        self, prompts: list[list[int]], sampling: SamplingConfig, on_progress: Advance | None = None
    ) -> list[Completion]:
        import torch

        check_prompts(prompts, sampling)
        generator = torch.Generator().manual_seed(sampling.seed)
        processing = Processing.from_sampling(sampling)
        out = []
        with torch.inference_mode():
            for p, prompt in enumerate(prompts):
                for s in range(sampling.n):
                    out.append(self._one(p, s, prompt, sampling, processing, generator))
                    if on_progress is not None:
                        on_progress(1)
        return out

    def _one(self, p: int, s: int, prompt: list[int], sampling: SamplingConfig, processing, generator) -> Completion:
        import torch

        size = width(len(prompt), sampling)
        ids, lps, top_ids, top_lps, route_rows, kept = list(prompt), [], [], [], [], []
        finish = "length"
        k = sampling.top_k_logprobs
        for _ in range(sampling.max_tokens):
            if self.tap is not None:
                self.tap.take()
            rows = row_logprobs(zero_logits(self.model, self.transform, ids, size), processing)
            row = rows[len(ids) - 1]
            if self.tap is not None:
                route_rows.append(self._step_routes(len(ids), size, first=not lps))
            token = self._draw(row, sampling, generator)
            lps.append(float(row[token]))
            if self.keep_rows:
                kept.append(row.numpy().copy())
            top = torch.topk(row, min(k, row.shape[-1]))
            top_ids.append(top.indices.tolist())
            top_lps.append(top.values.tolist())
            ids.append(token)
            if token in self.eos_ids:
                finish = "stop"
                break
        return Completion(
            prompt_index=p,
            sample_index=s,
            token_ids=ids[len(prompt) :],
            sampler_logprobs=lps,
            topk_ids=top_ids,
            topk_logprobs=top_lps,
            finish_reason=finish,
            routes=self._seq_routes(route_rows),
            rows=np.stack(kept) if kept else None,
        )

    @staticmethod
    def _draw(row, sampling: SamplingConfig, generator) -> int:
        """The next token: the argmax when greedy, else a draw from the row's distribution."""
        import torch

        if sampling.temperature < GREEDY_EPS:
            return int(torch.argmax(row))
        return int(torch.multinomial(row.exp(), 1, generator=generator))

    def _step_routes(self, length: int, size: int, first: bool):
        """(ids, weights) of the rows this step decided: the whole prompt at the first step, then the last row."""
        tap = self.tap
        assert tap is not None  # called only with a tap attached
        captures = tap.take()
        rows = slice(0, length) if first else slice(length - 1, length)
        calls = [captures[m][0] for m in tap.layers.moe_layers]
        ids = np.stack([c.ids.numpy().reshape(size, -1)[rows] for c in calls], 1)
        w = np.stack([c.weights.numpy().reshape(size, -1)[rows] for c in calls], 1)
        return ids, w

    def _seq_routes(self, route_rows):
        """The completion's routes over prompt + n - 1 positions (its last token is never fed), or None."""
        if self.tap is None or not route_rows:
            return None
        from mismatchscope.routing.io import SeqRoutes

        ids = np.concatenate([r[0] for r in route_rows])
        w = np.concatenate([r[1] for r in route_rows]).astype(np.float32)
        return SeqRoutes(ids, w)

    def prefill_logprobs(
        self, prompts: list[list[int]], completions: list[list[int]], sampling: SamplingConfig
    ) -> list[list[float]]:
        """The same forward over each final sequence, at the same width: its own prefill."""
        import torch

        processing = Processing.from_sampling(sampling)
        out = []
        with torch.inference_mode():
            for p, c in zip(prompts, completions, strict=True):
                ids = [*p, *c]
                logits = zero_logits(self.model, self.transform, ids, width(len(p), sampling))
                rows = row_logprobs(logits, processing)
                out.append([float(rows[len(p) - 1 + i, t]) for i, t in enumerate(c)])
        return out

    @json_edge
    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "engine": "transformers-recompute", "decode": DECODE, "zero": True}
