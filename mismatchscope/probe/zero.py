"""The zero-mismatch profile (``probe --zero``): one numerical program on both sides.

A sampler and a trainer report the same bytes for a token only when they
run the same float operations on the same shapes. The profile makes the
transformers sampler and the transformers trainer do exactly that:

* **one forward program**: every logprob, the sampler's at each decode step
  and the trainer's for the whole completion, comes from :func:`zero_logits`:
  one sequence per forward (the same batch composition on both sides: none),
  right-padded to the fixed width ``prompt + max_tokens``, the decoder, the
  lm_head over all ``width`` rows, and the model's logit transform;
* **decoding by recomputation**: each decode step runs that forward over the
  whole sequence so far, with no KV cache. Attention is causal, so row ``t``
  sees only tokens ``<= t``, and with the shapes fixed its bytes do not depend
  on what the later rows hold (pad ids while decoding, sampled tokens when
  the trainer scores). Measured on the bundled dense model: 0 of 256 tokens
  part between a decode step and the final sequence's forward;
* **one log-softmax**: the sampler draws from, and reports,
  :func:`~mismatchscope.probe.token_scoring.row_logprobs` of the step's
  logits; the trainer takes :func:`~mismatchscope.probe.token_scoring.score_positions`
  of the final logits; both run the same operations on ``[width, vocab]``;
* **MoE experts, one token at a time**: transformers' default
  (``grouped_mm``, and ``eager``) multiplies each expert's weights with the
  rows routed to it, and the number of those rows depends on the later
  tokens; the CPU's matmul gives a row other bytes when the row count
  changes (34 of 256 tokens parted on the bundled MoE). ``batched_mm``
  multiplies each token with its own experts: 0 of 256.

The price is the recomputation: a completion of ``n`` tokens costs ``n``
forwards of ``width`` rows instead of one prefill and ``n`` one-row steps.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..errors import UsageError

if TYPE_CHECKING:
    import torch

    from .checkpoint import CheckpointInfo
    from .types import SamplerConfig, SamplingConfig, TrainerConfig

ZERO_EXPERTS = "batched_mm"
"""transformers' experts implementation whose per-token result does not depend on the other rows."""
DECODE = "recompute"
"""how the zero sampler decodes, as its manifest says."""


def experts_implementation(info: CheckpointInfo, zero: bool) -> str | None:
    """The experts implementation to load with: ``batched_mm`` for an MoE under the profile, else the default."""
    return ZERO_EXPERTS if zero and info.is_moe else None


def width(prompt_len: int, sampling: SamplingConfig) -> int:
    """The fixed forward width of a sequence: its prompt plus the longest completion asked for."""
    return prompt_len + sampling.max_tokens


def zero_logits(model, transform, ids: list[int], size: int) -> torch.Tensor:
    """fp32 logits ``[size, vocab]`` of ``ids`` right-padded to ``size``, one sequence alone.

    The pad id (the config's, else 0) only fills rows no kept row can see.
    """
    import torch

    pad_id = getattr(model.config, "pad_token_id", None) or 0

    if len(ids) > size:
        raise ValueError(f"{len(ids)} tokens do not fit the fixed width {size}")
    device = model.get_input_embeddings().weight.device
    row = torch.full((1, size), pad_id, dtype=torch.long)
    row[0, : len(ids)] = torch.tensor(ids, dtype=torch.long)
    out = model.get_decoder()(input_ids=row.to(device), use_cache=False)
    hidden = out.last_hidden_state if hasattr(out, "last_hidden_state") else out[0]
    head = model.get_output_embeddings()
    return transform(head(hidden[0].to(head.weight.device)).float())


def check_zero(sampler: SamplerConfig, trainer: TrainerConfig) -> None:
    """Refuse a configuration that cannot run the one program on both sides, before anything loads."""
    if not (sampler.zero or trainer.zero):
        return
    if not (sampler.zero and trainer.zero):
        raise UsageError(
            "the zero profile needs both sides: sampler.zero and trainer.zero together",
            hint="use probe --zero, or diagnose --vary zero",
        )
    from .samplers import capabilities_of

    if not capabilities_of(sampler.kind).can_zero:
        raise UsageError(
            f"--zero runs on the transformers engines, not --sampler {sampler.kind}",
            hint="use --sampler hf: vLLM's kernels are another program than the trainer's",
        )
    if sampler.dtype != trainer.dtype:
        raise UsageError(
            f"--zero needs one dtype on both sides, got sampler {sampler.dtype} and trainer {trainer.dtype}",
            hint="pass the same --sampler-dtype and --trainer-dtype, float32 on a CPU",
        )
    engine_attn = sampler.engine_args.get("attn_implementation")
    if engine_attn != trainer.attn_implementation:
        raise UsageError(
            f"--zero needs one attention kernel on both sides, got sampler {engine_attn} and trainer "
            f"{trainer.attn_implementation}",
            hint="pass --attn-implementation NAME and --engine-arg attn_implementation=NAME, or neither",
        )
    if sampler.fp32_lm_head or trainer.fp32_lm_head:
        raise UsageError(
            "--zero runs the model's own lm_head on both sides; --fp32-lm-head would make it another program",
            hint="leave out --fp32-lm-head and score in float32 instead",
        )
