"""The transformers side (the trainer, or the float64 reference): forward hooks on the model's modules.

Each sequence runs alone through the decoder (batch of one, no padding, no
cache), so a position's activations depend on its own sequence only; every
hook keeps just the sampled positions' rows, copied out at once. The logits
and the log-softmax come from the caller's own head function (the trainer's
``_logits`` with its fp32-head option and logit transform; the reference's
float64 head), so the last point is the logprob that side reports.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from .points import Sequence, SideCapture


def rows_at(t, positions):
    """The kept positions' rows of a hidden-state tensor ``[1, L, H]`` or ``[L, H]``, widened exactly."""
    import torch

    t = t[0] if t.dim() == 3 else t
    out = t[positions].detach()
    return out.to(torch.float64 if out.dtype == torch.float64 else torch.float32).cpu().numpy().copy()


def first_output(x):
    return x[0] if isinstance(x, (tuple, list)) else x


ROLES = ("input_norm", "attn", "mlp_norm", "mlp")
"""a decoder layer's ops in forward order: the capture points ``layers.I.OP`` of its modules' outputs."""


@dataclass(frozen=True)
class LayerRoles:
    """The modules of one decoder layer by role (None where the layer has no such module)."""

    input_norm: Any
    attn: Any
    mlp_norm: Any
    mlp: Any

    def module(self, role: str) -> Any:
        """The module playing ``role`` (one of :data:`ROLES`), or None."""
        return getattr(self, role)


def layer_roles(layer) -> LayerRoles:
    """The modules of one decoder layer by role, by the names the supported families give them."""
    norm2 = getattr(layer, "pre_feedforward_layernorm", None) or getattr(layer, "post_attention_layernorm", None)
    mlp = next((getattr(layer, n) for n in ("mlp", "block_sparse_moe", "feed_forward") if hasattr(layer, n)), None)
    return LayerRoles(getattr(layer, "input_layernorm", None), getattr(layer, "self_attn", None), norm2, mlp)


def _hooks(model, model_type: str | None, state: dict, capture: SideCapture) -> list:
    """Register every capture hook; returns the handles."""
    from ...probe.route_capture import moe_layers_of

    decoder = model.get_decoder()
    if not hasattr(decoder, "layers") or not hasattr(decoder, "norm"):
        from ...errors import CheckpointError

        raise CheckpointError(
            f"--locate: {type(decoder).__name__} has no decoder layers and final norm to hook (layers, norm)"
        )
    moe = moe_layers_of(model, model_type)
    routers = moe.routers if moe is not None else {}
    handles = []

    def out_hook(point, pick=first_output):
        def hook(module, args, output):
            capture.add(point, state["seq"], rows_at(pick(output), state["pos"]))

        return hook

    def in_hook(point):
        def hook(module, args, kwargs):
            x = args[0] if args else kwargs["hidden_states"]
            capture.add(point, state["seq"], rows_at(x, state["pos"]))

        return hook

    handles.append(model.get_input_embeddings().register_forward_hook(out_hook("embed")))
    for i, layer in enumerate(decoder.layers):
        handles += _layer_hooks(layer, i, routers.get(i), out_hook, in_hook, capture)
    handles.append(decoder.norm.register_forward_hook(out_hook("final_norm")))
    return handles


def _layer_hooks(layer, i: int, router, out_hook, in_hook, capture: SideCapture) -> list:
    """One decoder layer's hooks: its ops' outputs, the MLP-side norm's input (the residual after attention),
    the router's logits (MoE) and the layer's output."""
    roles = layer_roles(layer)
    handles = []
    for op in ROLES:
        module = roles.module(op)
        if module is None:
            capture.missing[f"layers.{i}.{op}"] = f"{type(layer).__name__} has no {op} module"
        else:
            handles.append(module.register_forward_hook(out_hook(f"layers.{i}.{op}")))
    if roles.mlp_norm is not None:
        handles.append(roles.mlp_norm.register_forward_pre_hook(in_hook(f"layers.{i}.attn_residual"), with_kwargs=True))
    if router is not None:
        handles.append(router.register_forward_hook(out_hook(f"layers.{i}.router")))
    handles.append(layer.register_forward_hook(out_hook(f"layers.{i}.output")))
    return handles


def capture_hf(
    model,
    model_type: str | None,
    sequences: list[Sequence],
    positions: list[np.ndarray],
    logits_fn: Callable[[Any], Any],
    label: str,
) -> SideCapture:
    """Every capture point of ``model`` at the kept positions of each sequence.

    ``logits_fn``: final hidden rows ``[n, H]`` -> logits ``[n, V]`` as this side computes them (its head, its
    dtype, its logit transform); the log-softmax is taken in the logits' dtype."""
    import torch

    capture = SideCapture(label)
    state: dict[str, Any] = {}
    handles = _hooks(model, model_type, state, capture)
    device = model.get_input_embeddings().weight.device
    try:
        with torch.inference_mode():
            for i, (seq, pos) in enumerate(zip(sequences, positions, strict=True)):
                state.update(seq=i, pos=torch.as_tensor(pos, dtype=torch.long))
                ids = torch.tensor([seq.ids], dtype=torch.long, device=device)
                out = model.get_decoder()(input_ids=ids, use_cache=False)
                hidden = (out.last_hidden_state if hasattr(out, "last_hidden_state") else out[0])[0]
                add_head(capture, i, logits_fn(hidden[state["pos"].to(hidden.device)]), seq, pos)
    finally:
        for h in handles:
            h.remove()
    return capture


def add_head(capture: SideCapture, i: int, logits, seq: Sequence, pos: np.ndarray) -> None:
    """The ``logits`` and ``logprob`` points from a side's logits at the kept positions (log-softmax in their
    dtype, float32 at least: what every engine here reports)."""
    import torch

    logits = logits if logits.dtype == torch.float64 else logits.float()
    targets = torch.as_tensor(np.asarray(seq.ids)[pos + 1], dtype=torch.long, device=logits.device)
    lp = logits.log_softmax(-1).gather(-1, targets[:, None])
    capture.add("logits", i, rows_at(logits, torch.arange(len(pos))))
    capture.add("logprob", i, rows_at(lp, torch.arange(len(pos))))
