"""TRL: record every GRPO generation batch, and log the Monitor's values with TRL's own metrics.

In TRL (checked against 1.16) the two logprob tensors meet in
``GRPOTrainer._generate_and_score_completions``: its output holds
``sampling_per_token_logps`` (the inference engine's logprobs: vLLM, or a
``rollout_func``'s ``"logprobs"``) and ``old_per_token_logps`` (the trainer's
recompute, made when vLLM importance-sampling correction is on or generation
and optimisation steps are misaligned), with ``completion_mask``
(times ``tool_mask`` for tool calls) and ``advantages``, all ``[B, T]`` /
``[B]`` on the trainer's device. :meth:`MismatchscopeCallback.attach` wraps
that method of one trainer; the callback opens the Recorder when training
begins (rank and world size from TRL's arguments) and closes it when training
ends. The Monitor's values go into TRL's metric buffer, so they are averaged
and logged with TRL's own (``mismatch/k3_mean`` next to
``sampling/importance_sampling_ratio/mean``) by every logger TRL reports to;
alerts are logged as warnings.

``transformers`` is imported only here; this module is not imported by the
package.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from transformers import TrainerCallback

from .monitor import Monitor
from .recorder import Recorder

log = logging.getLogger("mismatchscope")


class MismatchscopeCallback(TrainerCallback):
    """``trainer.add_callback(MismatchscopeCallback("runs/x").attach(trainer))``."""

    def __init__(self, out: str | Path, *, meta: dict | None = None, rules: list[str] | None = None):
        self.out = Path(out)
        self.meta = meta
        self.rules = rules
        self.recorder: Recorder | None = None
        self.monitor: Monitor | None = None
        self.batches = 0
        self.skipped = 0
        """generation batches without both logprob tensors (see the module docstring)."""
        self._trainer: Any = None

    def attach(self, trainer: Any) -> MismatchscopeCallback:
        """Wrap ``trainer._generate_and_score_completions`` so each batch it returns is recorded."""
        inner = trainer._generate_and_score_completions
        self._trainer = trainer

        def recorded(inputs):
            out = inner(inputs)
            self._record(out)
            return out

        trainer._generate_and_score_completions = recorded
        return self

    def on_train_begin(self, args, state, control, **kwargs):
        meta = {"framework": "trl", "trainer": type(self._trainer).__name__, **(self.meta or {})}
        self.recorder = Recorder(
            self.out, rank=args.process_index, world_size=args.world_size, meta=meta, resume=state.global_step > 0
        )
        self.monitor = Monitor(self.recorder, rules=self.rules)

    def on_train_end(self, args, state, control, **kwargs):
        if self.recorder is not None:
            self.recorder.close()

    def _record(self, out: dict) -> None:
        q, p = out.get("sampling_per_token_logps"), out.get("old_per_token_logps")
        if self.monitor is None or q is None or p is None:
            self.skipped += 1
            return
        mask = out["completion_mask"]
        if out.get("tool_mask") is not None:
            mask = mask * out["tool_mask"]
        step = self._trainer.state.global_step
        values = self.monitor.add(step, q, p, mask, advantages=out["advantages"], token_ids=out["completion_ids"])
        self.batches += 1
        metrics = self._trainer._metrics["train" if self._trainer.model.training else "eval"]
        for key, value in values.items():
            metrics[key].append(value)
        for alert in values.alerts:
            log.warning(alert.message)
