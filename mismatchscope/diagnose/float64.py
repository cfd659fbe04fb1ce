"""A transformers model made to compute in float64 from end to end.

``model.to(torch.float64)`` widens the weights, but several steps of the
decoder families the project supports stay in float32 by design (they are
written for bfloat16 training, where float32 is the safe upcast): RMSNorm
casts its input to float32, the rotary angles come from float32 inverse
frequencies and positions, the eager attention's softmax and the MoE
router's softmax take ``dtype=torch.float32``, and the default grouped-matmul
experts refuse float64 operands. Each leaves a float32 rounding (about 1e-6
in logprob on the bundled model) in a forward meant to be the yardstick for
errors of that size.

:func:`widen` replaces exactly those steps on one loaded model instance (its
modules' ``forward`` and the model's attention choice), leaving the classes
and every other model untouched. What it replaced is returned, so the
reference can say what ran in float64.
"""

from __future__ import annotations

import types
from dataclasses import dataclass
from typing import Any

ATTENTION = "mismatchscope_float64"
"""the attention implementation registered with transformers for the reference: eager attention in float64."""
NORM_OFFSET = {"gemma": 1.0, "gemma2": 1.0, "gemma3_text": 1.0}
"""model types whose RMSNorm scales by ``1 + weight`` (the rest: ``weight``)."""
FLOAT64_ROPE = ("default", "linear")
"""rope types whose inverse frequencies are recomputed in float64 here; others are widened from float32."""
DYNAMIC_ROPE = ("dynamic", "longrope")
"""rope types that change their frequencies with the sequence length: their own forward is kept (float32 angles)."""


@dataclass
class Widened:
    """What :func:`widen` replaced: counts of modules, the rotary angles' precision, the experts' implementation."""

    norms: int = 0
    rotary: int = 0
    routers: int = 0
    rotary_inv_freq: str = "float64"
    experts: str | None = None
    """``eager`` where the experts' grouped matmul was switched to the plain loop; None where there are none."""


def widen(model: Any, model_type: str) -> Widened:
    """Switch ``model`` (already ``.to(torch.float64)``) to float64 norms, rotary, attention, router and experts.

    Returns what was replaced and the rotary angles' precision, for the reference's note."""
    import torch

    model.to(torch.float64)
    offset = NORM_OFFSET.get(model_type, 0.0)
    done = Widened()
    for module in model.modules():
        name = type(module).__name__
        if name.endswith("RMSNorm"):
            eps = getattr(module, "variance_epsilon", getattr(module, "eps", None))
            if eps is None or getattr(module, "weight", None) is None:
                raise NotImplementedError(f"{name}: no weight or epsilon to compute it in float64")
            module.forward = types.MethodType(_norm_forward(float(eps), offset), module)
            done.norms += 1
        elif name.endswith("RotaryEmbedding"):
            if _rope_type(module) in DYNAMIC_ROPE:
                done.rotary_inv_freq = "float32 (dynamic rope, transformers' own)"
                continue
            exact = _set_float64_inv_freq(module)
            module.forward = types.MethodType(_rotary_forward, module)
            done.rotary += 1
            if not exact:
                done.rotary_inv_freq = "float32 (widened)"
        elif name.endswith("TopKRouter"):
            module.forward = types.MethodType(_router_forward, module)
            done.routers += 1
    _register_attention()
    model.config._attn_implementation = ATTENTION  # transformers' own switch of a loaded model's attention
    if any(hasattr(m, "gate_up_proj") and hasattr(m, "num_experts") for m in model.modules()):
        model.set_experts_implementation("eager")  # the python loop over experts: plain float64 matmuls
        done.experts = "eager"
    return done


def _norm_forward(eps: float, offset: float):
    import torch

    def forward(self, x):
        x = x.to(torch.float64)
        y = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
        return y * (self.weight.to(torch.float64) + offset)

    return forward


def _set_float64_inv_freq(module) -> bool:
    """Recompute the inverse frequencies in float64 where the rope type is plain; True when that was possible."""
    import torch

    cfg = module.config
    rope = getattr(cfg, "rope_parameters", None) or {}
    kind = _rope_type(module)
    theta = rope.get("rope_theta", getattr(cfg, "rope_theta", None))
    if kind not in FLOAT64_ROPE or theta is None:
        module.inv_freq64 = module.inv_freq.to(torch.float64)
        return False
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    dim = int(head_dim * rope.get("partial_rotary_factor", getattr(cfg, "partial_rotary_factor", 1.0)))
    inv = 1.0 / (float(theta) ** (torch.arange(0, dim, 2, dtype=torch.float64, device=module.inv_freq.device) / dim))
    if kind == "linear":
        inv = inv / float(rope["factor"])
    if inv.shape != module.inv_freq.shape:
        module.inv_freq64 = module.inv_freq.to(torch.float64)
        return False
    module.inv_freq64 = inv
    return True


def _rope_type(module) -> str:
    return (getattr(module.config, "rope_parameters", None) or {}).get("rope_type", "default")


def _rotary_forward(self, x, position_ids):
    import torch

    angles = position_ids[..., None].to(torch.float64) * self.inv_freq64.to(x.device)
    emb = torch.cat((angles, angles), dim=-1)
    scale = float(getattr(self, "attention_scaling", 1.0))
    return (emb.cos() * scale).to(x.dtype), (emb.sin() * scale).to(x.dtype)


def _router_forward(self, hidden_states):
    """Softmax over the experts, top-k, optional renormalisation: all in float64 (ties break as topk does)."""
    import torch

    h = hidden_states.reshape(-1, self.hidden_dim)
    logits = torch.nn.functional.linear(h, self.weight)
    probs = logits.to(torch.float64).softmax(-1)
    top, index = probs.topk(self.top_k, dim=-1)
    if getattr(self, "norm_topk_prob", False):
        top = top / top.sum(-1, keepdim=True)
    return logits, top.to(logits.dtype), index


def _attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, softcap=None, **kwargs):
    """Eager attention with the softmax in the inputs' dtype (float64 here), grouped heads repeated."""
    import torch

    if scaling is None:
        scaling = module.head_dim**-0.5
    groups = query.shape[1] // key.shape[1]
    key = key.repeat_interleave(groups, dim=1)
    value = value.repeat_interleave(groups, dim=1)
    scores = torch.matmul(query, key.transpose(2, 3)) * scaling
    if softcap is not None:
        scores = torch.tanh(scores / softcap) * softcap
    if attention_mask is not None:
        scores = scores + attention_mask[:, :, :, : key.shape[-2]]
    weights = scores.softmax(-1)
    return torch.matmul(weights, value).transpose(1, 2).contiguous(), weights


def _register_attention() -> None:
    """Registered once per process; the mask is the eager one (an additive mask in the model's dtype)."""
    from transformers import AttentionInterface
    from transformers.masking_utils import (
        ALL_MASK_ATTENTION_FUNCTIONS,
        AttentionMaskInterface,
    )

    AttentionInterface.register(ATTENTION, _attention)
    AttentionMaskInterface.register(ATTENTION, ALL_MASK_ATTENTION_FUNCTIONS["eager"])
