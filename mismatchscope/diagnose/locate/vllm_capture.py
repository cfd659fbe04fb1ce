"""The vLLM side, inside the real engine: forward hooks on the engine's own model modules.

The engine must run in this process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``, as
diagnose's sampler processes and the tests run it): ``LLM.apply_model`` then
hands over the very model the scheduler runs, and hooks registered on it see
every forward. Each sequence is scored alone by a prefill of prompt +
completion (``max_tokens=1, prompt_logprobs=0``), with the prefix cache reset
first so every position is computed.

vLLM fuses the residual add into the next RMSNorm: a layer's input norm and
its MLP-side norm are called as ``norm(x, residual)`` and return
``(normed, x + residual)``. So on this side ``attn_residual`` is the residual
the MLP-side norm returns, and a layer's ``output`` is the residual returned
by the next layer's input norm (by the final norm for the last layer): the
sums vLLM itself computes, never recomputed here. The experts run as one
fused kernel (``mlp`` is their weighted sum; ``router`` the gate's logits).
The logits are the logits processor's output for the prompt rows (its last
call in the step: the sampled position's call comes first), and the
log-softmax is taken in float32 as vLLM's sampler takes it; :func:`capture_vllm`
checks it against the engine's own prompt logprobs.

Forward hooks do not run inside a compiled graph: ``enforce_eager=False``
(torch.compile, CUDA graphs) is refused with that reason.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ...errors import SamplerError
from .hf_capture import add_head, first_output, layer_roles, rows_at
from .points import Sequence, SideCapture

NOTE = (
    "vLLM engine: its fused add+RMSNorm returns (normed, residual), so attn_residual is the residual the "
    "MLP-side norm returns and each layer's output the residual the next norm returns (vLLM's own sums); "
    "mlp is the fused experts' output for MoE layers, router the gate's logits; logits from the logits "
    "processor, log-softmax in float32"
)


def _register(model, state: dict) -> list:
    """Hooks on the engine's model, writing into ``state['raw']`` (point -> tensor rows)."""
    inner = model.model
    layers = list(inner.layers)

    def keep(point, value):
        if state.get("on"):
            state["raw"][point] = rows_at(value, state["pos"])
            state["rows"][point] = value.shape[-2]

    def final(o, last=len(layers) - 1):
        keep("final_norm", first_output(o))
        if isinstance(o, tuple):
            keep(f"layers.{last}.output", o[1])

    def logits(o):  # every call in a step: the prompt rows' call is the last
        pos = state["pos"]
        if state.get("on") and (pos.numel() == 0 or o.shape[0] > int(pos.max())):
            state["logits"] = o[pos].detach().clone()

    handles = [inner.embed_tokens.register_forward_hook(_hook(lambda o: keep("embed", o)))]
    for i, layer in enumerate(layers):
        handles += _layer_hooks(layer, i, keep)
    handles.append(inner.norm.register_forward_hook(_hook(final)))
    handles.append(model.logits_processor.register_forward_hook(_hook(logits)))
    return handles


def _hook(fn):
    return lambda module, args, output: fn(output)


def _layer_hooks(layer, i: int, keep) -> list:
    """One decoder layer's hooks; a fused norm's second output is the residual sum (see the module's docstring).
    A module the layer lacks is skipped: its points are reported as not captured on this side."""

    def in_norm(o):
        keep(f"layers.{i}.input_norm", first_output(o))
        if isinstance(o, tuple):
            keep(f"layers.{i - 1}.output", o[1])

    def mlp_norm(o):
        keep(f"layers.{i}.mlp_norm", first_output(o))
        if isinstance(o, tuple):
            keep(f"layers.{i}.attn_residual", o[1])

    roles = layer_roles(layer)
    gate = getattr(roles.mlp, "gate", None)
    fns = {
        "input_norm": in_norm,
        "attn": lambda o: keep(f"layers.{i}.attn", first_output(o)),
        "mlp_norm": mlp_norm,
        "mlp": lambda o: keep(f"layers.{i}.mlp", first_output(o)),
    }
    handles = [roles.module(r).register_forward_hook(_hook(fn)) for r, fn in fns.items() if roles.module(r) is not None]
    if gate is not None and hasattr(gate, "register_forward_hook"):
        handles.append(gate.register_forward_hook(_hook(lambda o: keep(f"layers.{i}.router", first_output(o)))))
    return handles


def capture_vllm(llm, sequences: list[Sequence], positions: list[np.ndarray], label: str) -> tuple[SideCapture, float]:
    """Every capture point the engine exposes, at the kept positions; and the largest |difference| between the
    captured ``logprob`` point and the engine's own prompt logprobs of the same tokens (0 when the chain closes)."""
    import torch
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt

    if not llm.llm_engine.vllm_config.model_config.enforce_eager:
        raise SamplerError(
            "--locate needs the vLLM engine in eager mode: forward hooks do not run inside a compiled graph",
            hint="locate this configuration with sampler.enforce_eager=true",
        )
    tp = llm.llm_engine.vllm_config.parallel_config.tensor_parallel_size
    if tp > 1:
        raise SamplerError(
            f"--locate hooks the engine's model in this process, and tensor_parallel_size={tp} splits it over "
            "worker processes",
            hint="localise with --tensor-parallel-size 1 (the same kernels, one shard)",
        )
    state: dict[str, Any] = {"raw": {}}
    handles = llm.apply_model(lambda model: _register(model, state))[0]
    capture, worst = SideCapture(label, missing={}), 0.0
    params = SamplingParams(max_tokens=1, prompt_logprobs=0, temperature=1.0)
    try:
        for i, (seq, pos) in enumerate(zip(sequences, positions, strict=True)):
            llm.reset_prefix_cache()
            state.update(raw={}, rows={}, logits=None, on=True, pos=torch.as_tensor(pos, dtype=torch.long))
            out = llm.generate([TokensPrompt(prompt_token_ids=seq.ids)], params, use_tqdm=False)[0]
            state["on"] = False
            worst = max(worst, _take(capture, i, state, seq, pos, out))
    finally:
        for h in handles:
            h.remove()
    return capture, worst


def _take(capture: SideCapture, i: int, state: dict, seq: Sequence, pos: np.ndarray, out) -> float:
    """Move one sequence's raw rows into ``capture``; the chain-closure check of its logprobs."""
    raw, n = state["raw"], len(seq.ids)
    if "embed" not in raw:
        raise SamplerError("--locate: the engine's forward ran none of the capture hooks (a compiled model?)")
    if state["rows"]["embed"] < n:
        raise SamplerError(
            f"--locate: the engine computed {state['rows']['embed']} of the {n} positions in one step "
            "(a chunked or cached prefill); it needs the whole sequence in one forward"
        )
    for point, rows in raw.items():
        capture.add(point, i, rows)
    add_head(capture, i, state["logits"], seq, pos)
    engine = np.array([out.prompt_logprobs[p + 1][seq.ids[p + 1]].logprob for p in pos])
    return float(np.max(np.abs(capture.values["logprob"][i][:, 0] - engine))) if len(pos) else 0.0
