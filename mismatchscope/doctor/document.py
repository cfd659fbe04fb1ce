"""``doctor``'s typed result: the findings, ranked by the share of the gap each explains, and where the run's
number sits among published figures.

Scripts key on ``cause``, ``status`` and ``verdict``; the JSON Schema in ``docs/schemas/doctor.json`` is
generated from these classes. The cause ids are the registry's (``doctor.causes.REGISTRY``): the schema
lists them from there, so a cause added to the registry is in the schema without another edit.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from ..documents import optional

Status = Literal["detected", "clear", "not_checked"]
Confidence = Literal["high", "medium", "low"]
Verdict = Literal["pipeline", "expected", "inconclusive", "numerics"]

VERDICT_EXIT = {"pipeline": 1, "expected": 0, "inconclusive": 0, "numerics": 0}
"""doctor's exit code by verdict (2 is an input error, as for every command)."""


CAUSE_FIELD = {
    "doc": "the cause's fixed id (docs/doctor.md lists them)",
    "enum": "mismatchscope.doctor.causes:cause_names",  # read when the schema is made: the registry's ids
}


@dataclass(frozen=True)
class Evidence:
    """One statistic a finding rests on: its value on this run and what a clean run gives."""

    statistic: str = field(metadata={"doc": "what was measured, in words"})
    value: float | None
    clean: str = field(metadata={"doc": "what the statistic is on runs without this cause (measured)"})


@dataclass(frozen=True)
class ExplainedShare:
    """How much of the run's gap a cause accounts for: the gap before and after its correction."""

    k3: float | None = field(metadata={"doc": "share of the k3 mean the correction removes (0 to 1)"})
    abs_logprob_diff: float | None = field(
        metadata={"doc": "share of the mean |log p - log q| the correction removes (0 to 1)"}
    )
    of: str = field(metadata={"doc": "what the share is of: the gap, or (sharpening) its growth over steps"})
    how: str = field(metadata={"doc": "the correction applied, or the model the share comes from"})

    @property
    def primary(self) -> float | None:
        """The share shown first: k3's, else the mean |gap|'s."""
        return self.k3 if self.k3 is not None else self.abs_logprob_diff

    @property
    def weight(self) -> float | None:
        """The share findings are ranked and judged by: the mean of the two (k3 alone is carried by a few large
        log ratios, the mean |gap| by the many small ones; a cause matters when it moves either)."""
        values = [v for v in (self.k3, self.abs_logprob_diff) if v is not None]
        return sum(values) / len(values) if values else None


@dataclass(frozen=True)
class RivalFit:
    """Another cause that predicts the same statistic, fitted to the same data."""

    cause: str = field(metadata={"doc": "the rival cause's id"})
    residual: float | None = field(metadata={"doc": "what the rival's model leaves unexplained (nats, RMS)"})
    own_residual: float | None = field(metadata={"doc": "what this finding's model leaves (nats, RMS)"})
    sentence: str


@dataclass(frozen=True)
class Scope:
    """The sequences a cause is confined to, when it is not the whole run."""

    sequences: int
    share: float = field(metadata={"doc": "of the examined sequences"})
    first_ids: list[int]


@dataclass(frozen=True)
class Finding:
    """What one cause's detector concluded, and what its correction explains."""

    cause: str = field(metadata=CAUSE_FIELD)
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
    needs: list[str] = field(default_factory=list, metadata={"doc": "what would let it look (or settle it)"})
    pipeline: bool = field(
        default=False, metadata={"doc": "a detected cause that is a pipeline problem (doctor exits 1)"}
    )
    explained_share: ExplainedShare | None = field(
        default=None,
        metadata={"doc": "detected causes: the share of the gap its correction removes; null where none is measurable"},
    )
    minor: bool = field(
        default=False, metadata={"doc": "detected, but it explains almost nothing of the gap: never listed first"}
    )
    rivals: list[RivalFit] = field(
        default_factory=list, metadata={"doc": "other causes that predict the same statistic, fitted and compared"}
    )
    scope: Scope | None = field(
        default=None, metadata=optional("a cause confined to some sequences: which, and how many")
    )
    after: list[str] = field(
        default_factory=list,
        metadata={"doc": "causes corrected before this one was checked (each cause is read on the corrected pairs)"},
    )
    turn: int | None = field(
        default=None,
        metadata=optional("multi-turn runs: the first turn (from 0) whose tokens show the detected cause"),
    )


@dataclass(frozen=True)
class FigureRow:
    """A published train-inference mismatch figure, with its source and the source's own words."""

    model: str
    params_b: float | None = field(metadata={"doc": "parameters, billions (total for MoE); null when not given"})
    moe: bool
    dtype: str = field(metadata={"doc": "the precision both sides ran in (bf16, fp16, fp32), or unstated"})
    setting: str = field(metadata={"doc": "hardware, engines, replay"})
    metric: str = field(metadata={"doc": "the metric's id in mismatchscope's terms (k3_mean, rms_gap, ...)"})
    low: float
    high: float = field(metadata={"doc": "low == high for a single value; a range only where the source gives one"})
    kind: Literal["numerics", "bug", "threshold"] = field(
        metadata={"doc": "a healthy run's gap, a pipeline bug as it looked, or a bar in use"}
    )
    note: str
    source: str
    quote: str = field(metadata={"doc": "the value as the source states it"})


@dataclass(frozen=True)
class Placement:
    """The run's number among the published figures of comparable setups."""

    metric: str
    value: float | None
    dtype: str | None = field(metadata={"doc": "the precision the comparison keys on; null when unknown"})
    moe: bool | None
    comparable: list[FigureRow]
    sentence: str
    above: float | None = field(
        default=None, metadata={"doc": "how many times the largest comparable figure the value is (null: none)"}
    )


@dataclass(frozen=True)
class Gap:
    """The examined pairs' gap, before any correction."""

    k3_mean: float | None
    abs_logprob_diff_mean: float | None


@dataclass(frozen=True)
class DoctorDocument:
    """What ``doctor`` prints (``--format json``: these fields after ``schema_version``)."""

    verdict: Verdict = field(
        metadata={
            "doc": "pipeline: a pipeline cause explains the gap (exit 1); expected: a cause the run declares "
            "(policy lag, several optimizer steps per rollout, a sharpening policy) explains it; inconclusive: "
            "no cause explains it well, rivals fit alike, or the checks could not run (needs says what would "
            "settle it); numerics: no cause seen and the checks ran (exit 0 for all but pipeline)"
        }
    )
    headline: str = field(metadata={"doc": "the verdict in one sentence: what was found and why the exit code"})
    top: Finding = field(metadata={"doc": "the first of findings: the one to read first"})
    findings: list[Finding] = field(
        metadata={
            "doc": "detected first (by the share of the gap they explain; minor ones last), then not_checked, "
            "then clear"
        }
    )
    placements: list[Placement]
    tokens: int
    sequences: int
    tokens_examined: int = field(metadata={"doc": "tokens of the sequences the detectors looked at"})
    sampled: bool = field(metadata={"doc": "true when the detectors looked at a hash-picked sample of sequences"})
    gap: Gap = field(metadata={"doc": "the examined pairs' gap the explained shares are of"})
    needs: list[str] = field(
        default_factory=list, metadata={"doc": "inconclusive: what would settle it (a column, more tokens, ...)"}
    )
    warnings: list[str] = field(default_factory=list)
    notes: tuple[str, ...] = field(default=(), metadata={"json": False})
    """said on the terminal only (the pass's notes: a run read more slowly than it could be)."""
    path: str = field(default="", kw_only=True, metadata={"json": False})
    """the run as it was given (the table's first line names it)."""
