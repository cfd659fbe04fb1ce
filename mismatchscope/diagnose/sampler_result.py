"""What a sampler process is told and what it tells back, typed; JSON only where it crosses the process boundary.

Each sampler configuration of a diagnose runs in its own interpreter
(:mod:`.worker`): it reads a :class:`WorkerSpec` from a JSON file and writes a
:class:`SamplerResult` to another. Both are converted right at that edge
(``message`` when written, ``of_message`` when read back), so everything on
either side works on the types.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Literal

from ..documents import json_edge
from ..probe.types import SamplerConfig, SamplingConfig, TrainerConfig
from .locate.capture import CaptureFailed, LocateSpec, SamplerCapture, capture_of_message


@dataclass(frozen=True)
class WorkerSpec:
    """One sampler configuration's process: what to run, where to write, what to measure besides."""

    checkpoint: str
    prompts: str
    out: str
    sampling: SamplingConfig
    sampler: SamplerConfig
    trainer: TrainerConfig
    env: dict[str, str]
    repeat: bool
    prefill: bool
    result: str
    """the result file the process writes (:class:`SamplerResult`)."""
    seed: int
    locate: LocateSpec | None = None
    reply_fd: int | None = None
    """the pipe's end a process kept up for timing rounds replies on (:mod:`.timing`)."""

    @json_edge
    def message(self) -> dict[str, Any]:
        """The spec file's JSON."""
        out: dict[str, Any] = {
            "checkpoint": self.checkpoint,
            "prompts": self.prompts,
            "out": self.out,
            "sampling": self.sampling.to_dict(),
            "sampler": self.sampler.to_dict(),
            "trainer": self.trainer.to_dict(),
            "env": self.env,
            "repeat": self.repeat,
            "prefill": self.prefill,
            "result": self.result,
            "seed": self.seed,
        }
        if self.locate is not None:
            out["locate"] = self.locate.message()
        if self.reply_fd is not None:
            out["reply_fd"] = self.reply_fd
        return out

    @classmethod
    def of_message(cls, data: dict[str, Any]) -> WorkerSpec:
        locate = data.get("locate")
        return cls(
            checkpoint=data["checkpoint"],
            prompts=data["prompts"],
            out=data["out"],
            sampling=SamplingConfig(**data["sampling"]),
            sampler=SamplerConfig(**data["sampler"]),
            trainer=TrainerConfig(**data["trainer"]),
            env=dict(data.get("env") or {}),
            repeat=bool(data.get("repeat")),
            prefill=bool(data.get("prefill")),
            result=data["result"],
            seed=int(data.get("seed", 0)),
            locate=LocateSpec.of_message(locate) if locate else None,
            reply_fd=data.get("reply_fd"),
        )


@dataclass(frozen=True)
class RepeatedSequence:
    prompt_index: int
    sample_index: int
    token_ids: list[int]
    logprobs: list[float]


@dataclass(frozen=True)
class Repeat:
    """The same prompts sampled again with the same seed."""

    seconds: float
    sequences: list[RepeatedSequence]


@dataclass(frozen=True)
class Prefill:
    """The recorded sequences scored by the engine's prefill: all in one batch, one by one, shuffled."""

    keys: list[list[int]]
    """per sequence: [prompt_index, sample_index]."""
    batch: list[list[float]]
    alone: list[list[float]]
    shuffled: list[list[float]]
    batch_seconds: float


@dataclass(frozen=True)
class SamplerResult:
    """A sampler process's result: its timings and measurements, or the stage it failed at and why."""

    status: Literal["ok", "failed"]
    startup_s: float | None = None
    sampler_info: dict[str, Any] | None = None
    """the sampler's own description (:meth:`~mismatchscope.probe.samplers.base.Sampler.describe`)."""
    wall_s: float | None = None
    repeat: Repeat | None = None
    prefill: Prefill | None = None
    locate: SamplerCapture | CaptureFailed | None = None
    stage: str | None = None
    reason: str | None = None
    process_wall_s: float = 0.0
    """launch to result, seen by the process that started it."""
    log: str | None = None
    """the process's output file."""

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @classmethod
    def failed(cls, stage: str, reason: str) -> SamplerResult:
        return cls(status="failed", stage=stage, reason=reason)

    def collected(self, process_wall_s: float, log: str) -> SamplerResult:
        return replace(self, process_wall_s=process_wall_s, log=log)

    @json_edge
    def message(self) -> dict[str, Any]:
        """The result file's JSON (what the process writes; :meth:`of_message` reads it back)."""
        if not self.ok:
            return {"status": self.status, "stage": self.stage, "reason": self.reason}
        out: dict[str, Any] = {"status": "ok", "startup_s": self.startup_s, "sampler_info": self.sampler_info}
        if self.repeat is not None:
            out["repeat"] = {
                "seconds": self.repeat.seconds,
                "sequences": [
                    {
                        "prompt_index": s.prompt_index,
                        "sample_index": s.sample_index,
                        "token_ids": s.token_ids,
                        "logprobs": s.logprobs,
                    }
                    for s in self.repeat.sequences
                ],
            }
        if self.prefill is not None:
            p = self.prefill
            out["prefill"] = {
                "keys": p.keys,
                "batch": p.batch,
                "alone": p.alone,
                "shuffled": p.shuffled,
                "batch_seconds": p.batch_seconds,
            }
        if self.locate is not None:
            out["locate"] = self.locate.message()
        if self.wall_s is not None:
            out["wall_s"] = self.wall_s
        return out

    @classmethod
    def of_message(cls, data: dict[str, Any]) -> SamplerResult:
        """The result as a process wrote it (the lists are taken as they are: thousands of numbers, no copy)."""
        repeat, prefill, locate = data.get("repeat"), data.get("prefill"), data.get("locate")
        return cls(
            status="ok" if data.get("status") == "ok" else "failed",
            startup_s=data.get("startup_s"),
            sampler_info=data.get("sampler_info"),
            wall_s=data.get("wall_s"),
            repeat=Repeat(
                repeat["seconds"],
                [
                    RepeatedSequence(s["prompt_index"], s["sample_index"], s["token_ids"], s["logprobs"])
                    for s in repeat["sequences"]
                ],
            )
            if repeat is not None
            else None,
            prefill=Prefill(
                prefill["keys"], prefill["batch"], prefill["alone"], prefill["shuffled"], prefill["batch_seconds"]
            )
            if prefill is not None
            else None,
            locate=capture_of_message(locate) if locate else None,
            stage=data.get("stage"),
            reason=data.get("reason"),
        )
