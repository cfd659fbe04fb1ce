"""``doctor``'s typed result: the findings, ranked, and where the run's number sits among published figures.

Scripts key on ``cause`` and ``status``; the JSON Schema in
``docs/schemas/doctor.json`` is generated from these classes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from ..documents import optional

Cause = Literal[
    "contract_difference",
    "retokenized",
    "shifted",
    "temperature",
    "truncation",
    "log_base",
    "policy_lag",
    "misaligned_sequences",
    "padding",
    "prompt_boundary",
    "low_precision",
    "routing_replay",
    "step_jump",
    "numerics",
    "fallback",
]
CAUSES: tuple[str, ...] = Cause.__args__  # pyright: ignore[reportAttributeAccessIssue]
"""every cause id, in the order the detectors run."""

Status = Literal["detected", "clear", "not_checked"]
Confidence = Literal["high", "medium", "low"]

VERDICT_EXIT = {"numerics": 0, "pipeline": 1}
"""doctor's exit code by verdict (2 is an input error, as for every command)."""


@dataclass(frozen=True)
class Evidence:
    """One statistic a finding rests on: its value on this run and what a clean run gives."""

    statistic: str = field(metadata={"doc": "what was measured, in words"})
    value: float | None
    clean: str = field(metadata={"doc": "what the statistic is on runs without this cause (measured)"})


@dataclass(frozen=True)
class Finding:
    """What one detector concluded."""

    cause: Cause
    status: Status = field(
        metadata={"doc": "detected; clear (checked, not seen); not_checked (a column or enough data is missing)"}
    )
    sentence: str = field(metadata={"doc": "the conclusion in one plain sentence"})
    evidence: list[Evidence] = field(default_factory=list)
    estimate: dict[str, float | str | None] = field(
        default_factory=dict, metadata={"doc": "the cause's size where one exists (k, T, kept mass, ...)"}
    )
    confidence: Confidence | None = field(default=None, metadata={"doc": "for a detected cause; null otherwise"})
    change: str | None = field(default=None, metadata={"doc": "what to change, for a detected cause"})
    needs: list[str] = field(default_factory=list, metadata={"doc": "not_checked: what the file lacks"})
    pipeline: bool = field(
        default=False, metadata={"doc": "a detected cause that is a pipeline problem (doctor exits 1)"}
    )
    turn: int | None = field(
        default=None,
        metadata=optional("multi-turn runs: the first turn (from 0) whose tokens show the detected cause"),
    )


@dataclass(frozen=True)
class FigureRow:
    """A published train-inference mismatch figure, with its source."""

    model: str
    params_b: float | None = field(metadata={"doc": "parameters, billions (total for MoE); null when not given"})
    moe: bool
    dtype: str = field(metadata={"doc": "the precision both sides ran in (bf16, fp16, fp32)"})
    setting: str = field(metadata={"doc": "hardware, engines, replay"})
    metric: str = field(metadata={"doc": "the metric's id in mismatchscope's terms (k3_mean, rms_gap, ...)"})
    low: float
    high: float = field(metadata={"doc": "low == high for a single value"})
    kind: Literal["numerics", "bug", "threshold"] = field(
        metadata={"doc": "a healthy run's gap, a pipeline bug as it looked, or a bar in use"}
    )
    note: str
    source: str


@dataclass(frozen=True)
class Placement:
    """The run's number among the published figures of comparable setups."""

    metric: str
    value: float | None
    dtype: str | None = field(metadata={"doc": "the precision the comparison keys on; null when unknown"})
    moe: bool | None
    comparable: list[FigureRow]
    sentence: str


@dataclass(frozen=True)
class DoctorDocument:
    """What ``doctor`` prints (``--format json``: these fields after ``schema_version``)."""

    verdict: Literal["numerics", "pipeline"] = field(
        metadata={"doc": "pipeline when a detected cause is a pipeline problem (exit 1), else numerics (exit 0)"}
    )
    top: Finding = field(metadata={"doc": "the first of findings: the one to read first"})
    findings: list[Finding] = field(metadata={"doc": "detected first (by confidence), then not_checked, then clear"})
    placements: list[Placement]
    tokens: int
    sequences: int
    tokens_examined: int = field(metadata={"doc": "tokens of the sequences the detectors looked at"})
    sampled: bool = field(metadata={"doc": "true when the detectors looked at a hash-picked sample of sequences"})
    warnings: list[str] = field(default_factory=list)
    notes: tuple[str, ...] = field(default=(), metadata={"json": False})
    """said on the terminal only (the pass's notes: a run read more slowly than it could be)."""
