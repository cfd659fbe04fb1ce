"""What ``timeline --format json`` prints: the typed document, its rows and its flagged changes.

:meth:`~mismatchscope.timeline.TimelineResult.document` builds it from the
per-step series; the change tests keep their findings as plain records, and
:func:`~mismatchscope.timeline.timeline` reads each into its type here with
:func:`~mismatchscope.documents.from_json` as it collects them (the tables and
the picture read the types), so ``docs/schemas/timeline.json`` describes every
field of every row and flag.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from ..documents import flatten


@dataclass
class SeriesInfo:
    """One series of the table: a metric of the catalog (``metrics.CATALOG``) or a rule's rate."""

    key: str
    label: str
    unit: str
    test_scale: str
    """the scale the change tests run on: log, or asin-sqrt for shares."""
    short: str = field(default="", metadata={"json": False})
    """its column header in the tables ("k3 mean")."""


@dataclass
class RuleSeries:
    name: str
    params: dict[str, Any]
    level: str
    acts: str
    hypothesis: str
    """"data" (real advantages, or none needed), or "A>0" / "A<0" without an advantage column."""
    metric: str
    """the key of its series."""


@dataclass(frozen=True)
class StepRow:
    """One (group, step): its tokens and sequences, then one entry per series (``metrics``' keys)."""

    group: Any = field(metadata={"doc": "the --by value (null: the null group), or all"})
    step: int
    tokens: int
    sequences: int
    values: dict[str, float | None] = field(
        metadata=flatten("series key -> its value at this step (null: nothing to measure, e.g. no route compared)")
    )


@dataclass(frozen=True)
class Spike:
    group: Any
    metric: str = field(metadata={"doc": "the key of the series"})
    scale: str = field(metadata={"doc": "the scale the tests ran on (changes.methods.scales)"})
    kind: Literal["spike", "dip"] = field(metadata={"doc": "spike: above its neighbours; dip: below them"})
    step: int
    value: float
    baseline: float = field(metadata={"doc": "the median of its neighbours"})
    score: float = field(metadata={"doc": "the smaller modified z-score of the two sides"})


@dataclass(frozen=True)
class Shift:
    group: Any
    metric: str
    scale: str
    kind: Literal["shift"]
    step: int = field(metadata={"doc": "the first step of the new level"})
    before: float = field(metadata={"doc": "the mean of the segment before"})
    after: float = field(metadata={"doc": "the mean of the segment from step on"})
    size_sd: float = field(metadata={"doc": "after - before on the test scale, in noise SDs"})


@dataclass(frozen=True)
class Drift:
    group: Any
    metric: str
    scale: str
    kind: Literal["drift"]
    from_step: int
    to_step: int
    before: float
    after: float
    shifts: int = field(metadata={"doc": "the consecutive shifts one way it joins"})


Flag = Spike | Shift | Drift


@dataclass(frozen=True)
class SkippedTest:
    group: Any
    test: Literal["spike", "shift", "all"]
    reason: str
    metrics: list[str] = field(metadata={"doc": "the series it applies to"})


@dataclass(frozen=True)
class SpikeMethod:
    method: str
    statistic: str
    threshold: float
    neighbours: int
    min_size_se: float
    reference: str


@dataclass(frozen=True)
class ShiftMethod:
    method: str
    penalty: str
    penalty_factor: float
    min_size: int
    applied_to: str
    reference: str


@dataclass(frozen=True)
class DriftMethod:
    method: str


@dataclass(frozen=True)
class Methods:
    spike: SpikeMethod
    shift: ShiftMethod
    drift: DriftMethod
    scales: dict[str, str] = field(metadata={"doc": "scale -> what it is for"})
    min_steps: int
    min_mean_count: float


@dataclass
class Changes:
    methods: Methods
    flags: list[Flag]
    skipped: list[SkippedTest]


@dataclass
class TimelineDocument:
    """What ``timeline --format json`` prints, after ``schema_version``."""

    tokens: int
    steps: int
    by: str | None
    groups: list[Any]
    metrics: list[SeriesInfo]
    rules: list[RuleSeries]
    ratio_band: tuple[float, float]
    quantile: float
    rows: list[StepRow] = field(metadata={"doc": "one per (group, step): tokens, sequences and every series"})
    changes: Changes
    warnings: list[str]
    plot: str | None = field(default=None, metadata={"doc": "the picture --plots wrote"})
