"""verl: the keyword arguments of ``Monitor.add`` / ``Recorder.add`` from one PPO batch (a ``DataProto``).

In verl (checked against 0.9.1) the driver's ``RayPPOTrainer.fit()`` holds
the whole step's batch: with ``actor_rollout_ref.rollout.calculate_log_probs=True``
``batch.batch`` carries the rollout engine's ``rollout_log_probs`` next to
the actor's recomputed ``old_log_probs`` (both ``[B, response_length]``),
with ``response_mask``, ``responses`` and, once computed, ``advantages``;
``batch.non_tensor_batch["uid"]`` is the prompt's id (the GRPO group).
verl itself computes ``training/rollout_probs_diff_*`` from the same pair.

Only ``batch.batch[key]`` and ``batch.non_tensor_batch[key]`` are read, so
this module needs neither verl nor torch.
"""

from __future__ import annotations

from typing import Any, Required, TypedDict


class VerlStep(TypedDict, total=False):
    """The keyword arguments of ``Monitor.add``/``Recorder.add`` one verl ``DataProto`` gives (its tensors as
    verl holds them; ``advantages`` and ``group_ids`` where the batch has them)."""

    sampler_logprobs: Required[Any]
    trainer_logprobs: Required[Any]
    mask: Required[Any]
    token_ids: Required[Any]
    advantages: Any
    group_ids: Any


def verl_step(batch: Any) -> VerlStep:
    """``monitor.add(step, **verl_step(batch))``: the tensors of one verl ``DataProto``.

    Raises a clear error when the rollout logprobs are absent (the rollout
    was not asked for them) or are the actor's own (bypass mode: nothing to
    measure).
    """
    from ..errors import RecorderInputError

    b = batch.batch
    keys = set(b.keys())
    if "rollout_log_probs" not in keys:
        raise RecorderInputError(
            "the verl batch has no rollout_log_probs", hint="set actor_rollout_ref.rollout.calculate_log_probs=True"
        )
    if "old_log_probs" not in keys:
        raise RecorderInputError(
            "the verl batch has no old_log_probs yet",
            hint="record after the actor's compute_log_prob (after batch.union(old_log_prob))",
        )
    if b["old_log_probs"] is b["rollout_log_probs"]:
        raise RecorderInputError(
            "old_log_probs is rollout_log_probs (bypass mode): there is no trainer recompute to compare"
        )
    out: VerlStep = {
        "sampler_logprobs": b["rollout_log_probs"],
        "trainer_logprobs": b["old_log_probs"],
        "mask": b["response_mask"],
        "token_ids": b["responses"],
    }
    if "advantages" in keys:
        out["advantages"] = b["advantages"]
    uid = getattr(batch, "non_tensor_batch", {}).get("uid")
    if uid is not None:
        out["group_ids"] = uid
    return out
