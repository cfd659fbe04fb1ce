"""The ``hf`` sampler: transformers ``generate`` with its KV cache.

A sampler with no vLLM in it. It separates "the inference engine differs"
from "incremental decoding differs from a teacher-forced pass": with the same
dtype as the trainer, its mismatch is what KV-cached decoding, left padding
and batch shape alone cost (the tests pin it at rounding error in fp32).

Logprobs follow vLLM's modes: ``raw_logprobs`` is ``log_softmax`` of the raw
logits (``output_logits``), ``processed_logprobs`` of the scores after the
temperature/top-k/top-p warpers (``output_scores``), which HF computes with
the same kept-set rule as vLLM.

``engine_args`` accepted here: ``attn_implementation``, ``trust_remote_code``
and ``batch_size`` (rows per ``generate`` call; default ``max_num_seqs`` or 64).
Sampling is seeded once per ``sample`` call with ``torch.manual_seed``, so the
draws depend on the batch layout; the logprobs do not.
"""

from __future__ import annotations

from typing import Any

from mismatchscope.probe.checkpoint import CheckpointInfo
from mismatchscope.probe.engine_checks import HF_ENGINE_ARGS, check_hf_engine_args
from mismatchscope.probe.hf_model import load_causal_lm, model_description
from mismatchscope.probe.samplers.base import check_prompts
from mismatchscope.probe.token_scoring import GREEDY_EPS
from mismatchscope.probe.types import Completion, SamplerConfig, SamplingConfig
from mismatchscope.probe.zero import experts_implementation
from mismatchscope.progress import Advance

from ...documents import json_edge, to_json

ENGINE_ARGS = HF_ENGINE_ARGS
DEFAULT_BATCH = 64


class HFGenerateSampler:
    """Samples with ``model.generate`` from the checkpoint's transformers model."""

    name = "hf"

    def __init__(self, cfg: SamplerConfig, info: CheckpointInfo, *, sampling: SamplingConfig | None = None):
        from transformers import GenerationConfig

        check_hf_engine_args(cfg.engine_args, cfg.device)  # the probe checked them already; direct callers too
        self.cfg = cfg
        self.info = info
        self.batch_size = int(cfg.engine_args.get("batch_size") or cfg.max_num_seqs or DEFAULT_BATCH)
        # Any: transformers' stubs type the loaded model without ``generate``; close() sets it to None
        self.model: Any = load_causal_lm(
            info,
            dtype=cfg.dtype,
            device=cfg.device,
            attn_implementation=cfg.engine_args.get("attn_implementation"),
            trust_remote_code=bool(cfg.engine_args.get("trust_remote_code", False)),
            experts_implementation=experts_implementation(info, cfg.zero),
        )
        self.eos_ids, self.pad_id = _special_ids(self.model)
        # A fresh generation config: the checkpoint's own (repetition penalty,
        # top_k=50 defaults, ...) must not silently change the distribution.
        self.model.generation_config = GenerationConfig(eos_token_id=self.eos_ids, pad_token_id=self.pad_id)
        self._device = self.model.get_input_embeddings().weight.device
        from mismatchscope.probe.routes import attach_tap

        self.tap, self.routes_why = attach_tap(self.model, info, margins=False)
        self.keep_rows = False
        """``probe --full-vocab``: keep each decode step's whole float32 log-prob row on the completions."""

    def sample(
        self,
        prompts: list[list[int]],
        sampling: SamplingConfig,
        on_progress: Advance | None = None,
    ) -> list[Completion]:
        """Each prompt repeated n times, left-padded, ``batch_size`` rows per ``generate``."""
        import torch

        check_prompts(prompts, sampling)
        rows = [(p, s) for p in range(len(prompts)) for s in range(sampling.n)]
        torch.manual_seed(sampling.seed)
        completions: list[Completion] = []
        with torch.inference_mode():
            for start in range(0, len(rows), self.batch_size):
                chunk = rows[start : start + self.batch_size]
                completions += self._generate(chunk, [prompts[p] for p, _ in chunk], sampling)
                if on_progress is not None:
                    on_progress(len(chunk))
        return completions

    def _generate(self, rows: list[tuple[int, int]], prompts: list[list[int]], sampling: SamplingConfig):
        import torch

        width = max(len(p) for p in prompts)
        ids = torch.full((len(prompts), width), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(prompts), width), dtype=torch.long)
        for r, p in enumerate(prompts):
            ids[r, width - len(p) :] = torch.tensor(p, dtype=torch.long)
            mask[r, width - len(p) :] = 1
        if self.tap is not None:
            self.tap.take()
        out = self.model.generate(
            input_ids=ids.to(self._device),
            attention_mask=mask.to(self._device),
            generation_config=self._generation_config(sampling),
        )
        steps = out.logits if sampling.logprobs_mode == "raw_logprobs" else out.scores
        new = out.sequences[:, width:].cpu()
        lengths = [self._length(row) for row in new.tolist()]
        sampled, top_ids, top_lps, full = _step_logprobs(steps, new, sampling.top_k_logprobs, self.keep_rows)
        routes = self._routes([len(p) for p in prompts], width, [n for n, _ in lengths])
        result = []
        for r, ((p, s), (n, finish)) in enumerate(zip(rows, lengths, strict=True)):
            result.append(
                Completion(
                    prompt_index=p,
                    sample_index=s,
                    token_ids=new[r, :n].tolist(),
                    sampler_logprobs=sampled[r, :n].tolist(),
                    topk_ids=top_ids[r, :n].tolist(),
                    topk_logprobs=top_lps[r, :n].tolist(),
                    finish_reason=finish,
                    routes=routes[r] if routes is not None else None,
                    rows=full[r, :n].numpy() if full is not None else None,
                )
            )
        return result

    def _routes(self, prompt_lengths: list[int], width: int, lengths: list[int]):
        """Each row's routes from this ``generate`` call (None: a dense model, or they could not be read)."""
        if self.tap is None:
            return None
        from mismatchscope.probe.routes import generate_routes

        routes = generate_routes(self.tap.take(), self.tap.layers.moe_layers, prompt_lengths, width, lengths)
        if isinstance(routes, str):
            self.routes_why = routes
            return None
        return routes

    def routes_status(self):
        """Whether this sampler's routes are recorded (ids and gate weights), and if not why."""
        from mismatchscope.routing.layout import SideRoutes

        if self.tap is None or self.routes_why:
            return SideRoutes(False, why=self.routes_why)
        return SideRoutes(True, weights=True)

    def _generation_config(self, sampling: SamplingConfig):
        from transformers import GenerationConfig

        greedy = sampling.temperature < GREEDY_EPS
        return GenerationConfig(
            do_sample=not greedy,
            temperature=1.0 if greedy else sampling.temperature,
            top_p=1.0 if greedy else sampling.top_p,
            top_k=0 if greedy or sampling.top_k <= 0 else sampling.top_k,
            max_new_tokens=sampling.max_tokens,
            num_return_sequences=1,
            eos_token_id=self.eos_ids,
            pad_token_id=self.pad_id,
            output_scores=sampling.logprobs_mode != "raw_logprobs",
            output_logits=sampling.logprobs_mode == "raw_logprobs",
            return_dict_in_generate=True,
        )

    def prefill_logprobs(
        self, prompts: list[list[int]], completions: list[list[int]], sampling: SamplingConfig
    ) -> list[list[float]]:
        """This model's own forward over each prompt + completion: raw logprob of each completion token.

        One sequence per forward, without padding, so no batch composition
        enters; the fp32 ``log_softmax`` of the logits is the one its decode
        steps take (raw, T = 1, full vocabulary, as vLLM's prompt logprobs).
        """
        import torch

        out = []
        with torch.inference_mode():
            for p, c in zip(prompts, completions, strict=True):
                ids = torch.tensor([[*p, *c]], dtype=torch.long, device=self._device)
                logits = self.model(input_ids=ids, use_cache=False).logits[0, len(p) - 1 : len(p) - 1 + len(c)]
                logprobs = logits.float().log_softmax(-1).cpu()
                out.append(logprobs.gather(-1, torch.tensor(c, dtype=torch.long)[:, None]).squeeze(-1).tolist())
        return out

    def _length(self, tokens: list[int]) -> tuple[int, str]:
        """Tokens up to and including the first EOS (vLLM keeps the EOS too), and why it ended."""
        for i, t in enumerate(tokens):
            if t in self.eos_ids:
                return i + 1, "stop"
        return len(tokens), "length"

    @json_edge
    def describe(self) -> dict[str, Any]:
        return {
            "engine": "transformers-generate",
            **to_json(model_description(self.model)),
            "requested_dtype": self.cfg.dtype,
            "batch_size": self.batch_size,
            "eos_token_ids": self.eos_ids,
        }

    def provenance(self):
        """This sampler's side: the transformers model it generates with (the probe adds the identities)."""
        from mismatchscope.execution.record import Numerics
        from mismatchscope.probe.hf_model import canonical_dtype
        from mismatchscope.probe.provenance import model_side

        requested = Numerics(
            weights_dtype=canonical_dtype(self.cfg.dtype),
            attention_backend=self.cfg.engine_args.get("attn_implementation"),
        )
        desc = self.describe()
        return model_side(
            self.model,
            desc["engine"],
            requested,
            desc["device_names"],
            moe=self.info.is_moe,
            max_batch_sequences=self.batch_size,
        )

    def close(self) -> None:
        if self.tap is not None:
            self.tap.close()
        self.model = None


def _step_logprobs(steps, new, k: int, keep_rows: bool = False):
    """Sampled logprob [B, T] and top-k ids/logprobs [B, T, k] from per-step [B, V] logits/scores,
    and with ``keep_rows`` the whole rows [B, T, V] (``--full-vocab``; else None).

    One step at a time, so the fp32 log-softmax spans [B, T, V] only when the rows are asked for.
    """
    import torch

    k = min(k, steps[0].shape[-1])
    sampled = torch.empty(new.shape, dtype=torch.float32)
    top_ids = torch.empty((*new.shape, k), dtype=torch.long)
    top_lps = torch.empty((*new.shape, k), dtype=torch.float32)
    rows = torch.empty((*new.shape, steps[0].shape[-1]), dtype=torch.float32) if keep_rows else None
    for t, step in enumerate(steps):
        logprobs = step.float().log_softmax(-1).cpu()
        if rows is not None:
            rows[:, t] = logprobs
        sampled[:, t] = logprobs.gather(-1, new[:, t : t + 1]).squeeze(-1)
        top = torch.topk(logprobs, k, dim=-1)
        top_ids[:, t], top_lps[:, t] = top.indices, top.values
    return sampled, top_ids, top_lps, rows


def _special_ids(model) -> tuple[list[int], int]:
    """EOS ids (the checkpoint's generation config, else its config) and a pad id."""
    eos = model.generation_config.eos_token_id
    if eos is None:
        eos = getattr(model.config, "eos_token_id", None)
    eos_ids = [eos] if isinstance(eos, int) else list(eos or [])
    pad = model.generation_config.pad_token_id
    if pad is None:
        pad = getattr(model.config, "pad_token_id", None)
    if pad is None:
        pad = eos_ids[0] if eos_ids else 0
    return eos_ids, int(pad)
