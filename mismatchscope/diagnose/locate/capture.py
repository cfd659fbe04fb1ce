"""The sampler side of a localisation as it crosses from the sampler's process: what to capture, what was captured.

The sampler's engine lives in its own process, so its capture is asked for
there (:class:`LocateSpec`, in the process's spec) and comes back in the
process's result file (:class:`SamplerCapture`, or :class:`CaptureFailed`
with its reason); the capture itself is an ``.npz`` file beside it. JSON only
at that edge (``message``, :func:`capture_of_message`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from ...documents import json_edge


@dataclass(frozen=True)
class LocateSpec:
    """What the sampler's process captures: the run's worst ``sequences`` (diagnose) or the sequences
    ``chosen`` already (rescore --locate, as ``[prompt, completion, label]`` rows), at most ``budget`` tokens."""

    budget: int
    path: str
    """the ``.npz`` file the capture is written to."""
    sequences: int | None = None
    chosen: list[list[Any]] | None = None

    @json_edge
    def message(self) -> dict[str, Any]:
        head: dict[str, Any] = {"chosen": self.chosen} if self.chosen is not None else {"sequences": self.sequences}
        return {**head, "budget": self.budget, "path": self.path}

    @classmethod
    def of_message(cls, data: dict[str, Any]) -> LocateSpec:
        return cls(int(data["budget"]), str(data["path"]), data.get("sequences"), data.get("chosen"))


@dataclass(frozen=True)
class SamplerCapture:
    """The sampler's capture, written where the engine lives: the sequences, the file, how it was made."""

    sequences: list[list[Any]]
    """``[prompt ids, completion ids, label]`` per sequence (:func:`.run.to_spec`)."""
    capture: str
    note: str
    closure: float | None
    """vLLM: the largest |captured logprob - the engine's own prompt logprob|."""
    seconds: float
    status: Literal["ok"] = "ok"

    @json_edge
    def message(self) -> dict[str, Any]:
        return {
            "status": "ok",
            "sequences": self.sequences,
            "capture": self.capture,
            "note": self.note,
            "closure": self.closure,
            "seconds": self.seconds,
        }


@dataclass(frozen=True)
class CaptureFailed:
    """No capture, and why (``status``: failed, or skipped where a configuration is not localised)."""

    reason: str | None
    status: str = "failed"

    @json_edge
    def message(self) -> dict[str, Any]:
        return {"status": self.status, "reason": self.reason}


def capture_of_message(data: dict[str, Any]) -> SamplerCapture | CaptureFailed:
    """The capture a process's result file holds."""
    if data.get("status") != "ok":
        return CaptureFailed(data.get("reason"), data.get("status", "failed"))
    return SamplerCapture(
        [list(row) for row in data["sequences"]],
        str(data["capture"]),
        str(data["note"]),
        data.get("closure"),
        float(data.get("seconds", 0.0)),
    )
