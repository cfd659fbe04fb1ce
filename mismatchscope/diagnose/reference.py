"""The reference: the same weights, scored in float64, on the baseline's tokens.

Both sides' errors are measured against this forward pass (``e_s = lq - lr``,
``e_t = lp - lr``), so it must be far more precise than either: float64 where
the model fits (every tiny and small model), else float32 with an fp32 lm_head
(the output says which). The weights are loaded as the checkpoint stores them
(float32 here) and widened, which is exact. In float64 every step runs in
float64: embedding, RMSNorm, rotary angles, attention (eager: matmul and
softmax, no fused kernel), MoE router and experts, lm_head and log-softmax
(:mod:`.float64` replaces the steps transformers keeps in float32). The
logprob is taken over the same distribution the sampler reported (T-scaled,
renormalised over the kept set for ``processed_logprobs``).
"""

from __future__ import annotations

import contextlib
import os
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from ..probe.checkpoint import CheckpointInfo
from ..probe.token_scoring import Processing, kept_mask
from ..probe.types import SamplingConfig

if TYPE_CHECKING:
    from ..probe.trainer import LogitTransform

FIT_SHARE = 0.25
"""float64 is used when the float64 weights take at most this share of the device's memory."""
BATCH_TOKENS = 4096
LAYER = re.compile(r"(?:^|\.)layers\.(\d+)\.")
"""the decoder layer a module belongs to, from its qualified name (``model.layers.3.mlp.gate``)."""


@dataclass
class Reference:
    """A loaded reference model; :meth:`score` gives float64 logprobs per sequence."""

    model: Any  # a transformers causal LM, loaded lazily
    dtype: str
    transform: LogitTransform
    note: str
    routers: dict = field(default_factory=dict)
    """decoder layer -> its top-k router module (MoE models in float64; empty otherwise)."""
    _batch_shape: tuple[int, int] = field(default=(0, 0), init=False, repr=False)
    """(rows, padded width) of the batch being scored: the routers see it flattened."""

    @property
    def moe_layers(self) -> list[int]:
        """absolute indices of the decoder layers whose routes :meth:`score` records."""
        return sorted(self.routers)

    def score(
        self,
        prompts: list[list[int]],
        completions: list[list[int]],
        sampling: SamplingConfig,
        routes: list | None = None,
    ) -> list[np.ndarray]:
        """log p_ref of each completion token, one float64 array per sequence, in order.

        ``routes``, a list, receives for an MoE model one int array per sequence, in order: the expert ids
        the reference's router chose, ``[input_position, moe layer (as in moe_layers), k]``, for every
        input position (all tokens but the last)."""
        import torch

        processing = Processing.from_sampling(sampling)
        out: list[np.ndarray | None] = [None] * len(prompts)
        chosen: list[np.ndarray | None] = [None] * len(prompts)
        lengths = [len(p) + len(c) for p, c in zip(prompts, completions, strict=True)]
        batches: list[list[int]] = []
        for i in sorted(range(len(prompts)), key=lambda i: -lengths[i]):  # longest first: rows x longest <= budget
            if batches and (len(batches[-1]) + 1) * lengths[batches[-1][0]] <= BATCH_TOKENS:
                batches[-1].append(i)
            else:
                batches.append([i])
        with torch.inference_mode(), self._routes_recorded() as recorded:
            for batch in batches:
                recorded.clear()
                rows = self._score_batch([prompts[i] for i in batch], [completions[i] for i in batch], processing)
                for j, (i, lp) in enumerate(zip(batch, rows, strict=True)):
                    out[i] = lp
                    if recorded:
                        n = len(prompts[i]) + len(completions[i]) - 1
                        chosen[i] = np.stack([recorded[layer][j, :n] for layer in self.moe_layers], axis=1)
        if routes is not None and self.moe_layers:
            routes.extend(chosen)
        return out  # type: ignore[return-value]

    @contextlib.contextmanager
    def _routes_recorded(self):
        """layer -> [rows, width, k] expert ids of the batch just scored (empty for a dense model)."""
        recorded: dict[int, np.ndarray] = {}
        handles = []
        for layer, router in self.routers.items():

            def keep(module, args, output, layer=layer):  # output: (router logits, weights, expert ids)
                rows, width = self._batch_shape
                recorded[layer] = output[2].reshape(rows, width, -1).cpu().numpy()

            handles.append(router.register_forward_hook(keep))
        try:
            yield recorded
        finally:
            for h in handles:
                h.remove()

    def _score_batch(self, prompts, completions, processing: Processing) -> list[np.ndarray]:
        import torch

        rows = [[*p, *c] for p, c in zip(prompts, completions, strict=True)]
        width = max(len(r) for r in rows)
        ids = torch.zeros((len(rows), width), dtype=torch.long)
        mask = torch.zeros((len(rows), width), dtype=torch.long)
        for r, row in enumerate(rows):
            ids[r, : len(row)] = torch.tensor(row)
            mask[r, : len(row)] = 1
        self._batch_shape = (len(rows), width)
        device = self.model.get_input_embeddings().weight.device  # the reference runs on the GPU where there is one
        hidden = self.model.get_decoder()(
            input_ids=ids.to(device), attention_mask=mask.to(device), use_cache=False
        ).last_hidden_state
        head = self.model.get_output_embeddings()
        out = []
        for b, (p, c) in enumerate(zip(prompts, completions, strict=True)):
            if not c:
                out.append(np.zeros(0))
                continue
            h = hidden[b, len(p) - 1 : len(p) - 1 + len(c)]
            logits = self.transform(head(h.to(head.weight.dtype)))
            logits = logits.to(torch.float64) if self.dtype == "float64" else logits.float()
            if processing.temperature != 1.0:
                logits = logits / processing.temperature
            if processing.truncates(logits.shape[-1]):
                logits = logits.masked_fill(~kept_mask(logits, processing.top_k, processing.top_p), float("-inf"))
            lp = logits.log_softmax(-1).gather(-1, torch.tensor(c, device=logits.device).unsqueeze(-1)).squeeze(-1)
            out.append(lp.to(torch.float64).cpu().numpy().copy())
        return out


def _memory_bytes() -> int:
    import torch

    if torch.cuda.is_available():
        return int(torch.cuda.mem_get_info()[1])
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):  # pragma: no cover - non-POSIX
        return 0


def _widen(model, info: CheckpointInfo) -> str:
    """The model widened to float64 in place; the note saying what runs in float64."""
    from .float64 import widen

    done = widen(model, info.model_type)
    return (
        "float64 forward of the same weights: norms, rotary angles, attention (eager), "
        + ("router, experts, " if done.routers or done.experts else "")
        + "lm_head and log-softmax in float64"
        + ("" if done.rotary_inv_freq == "float64" else f"; rotary inverse frequencies {done.rotary_inv_freq}")
    )


def _routers(model) -> dict[int, Any]:
    """decoder layer -> its top-k router module (MoE checkpoints), whose choices the reference records."""
    routers = {}
    for name, module in model.named_modules():
        found = LAYER.search(name)
        if found and type(module).__name__.endswith("TopKRouter"):
            routers[int(found.group(1))] = module
    return routers


def load_reference(info: CheckpointInfo, *, trust_remote_code: bool = False, dtype: str | None = None) -> Reference:
    """float64 if it fits (or ``dtype`` says so), else float32 with an fp32 lm_head."""
    from ..probe.hf_model import load_causal_lm, resolve_device
    from ..probe.trainer import LogitTransform

    model = load_causal_lm(
        info,
        dtype="float32",
        attn_implementation="eager",
        trust_remote_code=trust_remote_code,
        device=resolve_device(None),
    )
    n_params = sum(p.numel() for p in model.parameters())
    if dtype is None:
        dtype = "float64" if 8 * n_params <= FIT_SHARE * _memory_bytes() else "float32"
    if dtype == "float64":
        note, routers = _widen(model, info), _routers(model)
    else:
        size = f"{n_params / 1e9:.2f}B parameters"
        note = f"float32 forward with an fp32 lm_head: {size} do not fit in float64 on this device"
        routers = {}
    return Reference(
        model=model, dtype=dtype, transform=LogitTransform.from_config(info.config), note=note, routers=routers
    )


def reference_rows(
    reference: Reference, tokens, prompt_ids, sampling: SamplingConfig
) -> tuple[np.ndarray, dict[int, np.ndarray]]:
    """The reference's logprob of every token row, and (MoE) its routes: sequence id -> [input position, layer, k]."""
    from .pairs import sequence_slices

    slices = sequence_slices(tokens["sequence_id"])
    prompts = [prompt_ids[int(tokens["prompt_id"][sl.start])] for _, sl in slices]
    comps = [tokens["token_id"][sl].tolist() for _, sl in slices]
    out = np.empty(tokens["sequence_id"].size)
    routes: list[np.ndarray] = []
    for (_, sl), lp in zip(slices, reference.score(prompts, comps, sampling, routes=routes), strict=True):
        out[sl] = lp
    return out, {int(sid): r for (sid, _), r in zip(slices, routes, strict=False)}  # routes: empty for a dense model
