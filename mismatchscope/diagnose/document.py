"""What ``diagnose --format json`` prints (and ``OUT/diagnose.json`` holds): a typed document.

The run builds these types as it measures (:func:`~.run.run_diagnose`
returns the :class:`DiagnoseDocument`); the ranking, the price of zero, the
reading and the renderers work on them, and JSON is written only from them
(:func:`~mismatchscope.documents.json_text`), so the schema generated from
them (``docs/schemas/diagnose.json``) describes every field the command
writes. A gap's ``metrics`` are the report's token metrics
(``metrics.CATALOG``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from ..analysis.results import TokenMetrics
from ..documents import flatten, optional
from ..probe.types import SamplerConfig, SamplingConfig
from .locate.document import INTERRUPTED, LocateResult


@dataclass(frozen=True)
class ReferenceForward:
    dtype: str = field(metadata={"doc": "the reference forward's dtype (float64 where it fits)"})
    note: str
    seconds: float
    moe_layers: list[int] = field(metadata={"doc": "the decoder layers with a router (empty: a dense checkpoint)"})


@dataclass(frozen=True)
class Costs:
    """A configuration's costs, from its run's timings (rates: tokens over seconds; null where not timed)."""

    tokens: int
    startup_s: float | None
    sampler_tokens_per_s: float | None
    trainer_tokens_per_s: float | None
    sampling_s: float | None
    scoring_s: float | None
    wall_s: float | None


_PIPELINE = "tokens over sampling and scoring seconds together"


@dataclass(frozen=True)
class Throughput:
    costs: Costs = field(metadata=flatten())
    pipeline_tokens_per_s: float | None = field(metadata={"doc": _PIPELINE})


@dataclass(frozen=True)
class Timing:
    """Interleaved timing rounds of a variant against the baseline on the side it changes."""

    side_timed: Literal["sampler", "trainer"]
    rounds: int
    ratios: list[float] = field(metadata={"doc": "per round: baseline seconds per token over the variant's"})
    median: float
    low: float = field(metadata={"doc": "bootstrap interval of the median ratio"})
    high: float
    rankable: bool = field(metadata={"doc": "the rounds' interval is narrow enough to rank the variant's throughput"})
    baseline_seconds: list[float]
    variant_seconds: list[float]


@dataclass(frozen=True)
class VariantThroughput:
    costs: Costs = field(metadata=flatten())
    timing: Timing | None = field(metadata={"doc": "null where the variant's side could not be timed in rounds"})
    pipeline_tokens_per_s: float | None = field(metadata={"doc": _PIPELINE})
    relative_to_baseline: float | None = field(metadata={"doc": "pipeline throughput over the baseline's"})


@dataclass(frozen=True)
class Baseline:
    sampler: SamplerConfig
    trainer: dict[str, Any] = field(
        metadata={"doc": "the trainer's options (the probe's; route switches only when not at their default)"}
    )
    env: dict[str, str]
    sampling: SamplingConfig
    run_dir: str
    metrics: TokenMetrics
    throughput: Throughput
    certified: bool = field(metadata={"doc": "certify's bit-equality verdict on the run"})


@dataclass(frozen=True)
class Gap:
    """One pair's report metrics, and the run directory that holds the pair."""

    run_dir: str
    tokens: int
    sequences: int
    metrics: TokenMetrics


@dataclass(frozen=True)
class Gaps:
    total: Gap = field(metadata={"doc": "trainer against sampler"})
    sampler_vs_reference: Gap
    trainer_vs_reference: Gap


@dataclass(frozen=True)
class Shares:
    """The per-token error budget against the reference (``e_s = lq - lr``, ``e_t = lp - lr``)."""

    tokens: int
    sampler_mse: float | None
    trainer_mse: float | None
    cross: float | None = field(metadata={"doc": "mean(e_s e_t)"})
    total_mse: float | None = field(metadata={"doc": "mean((e_t - e_s)^2): the gap's own"})
    sampler_share: float | None
    trainer_share: float | None
    correlation: float | None = field(metadata={"doc": "uncentred: near 1, the two errors cancel"})


@dataclass(frozen=True)
class SelfConsistency:
    """The sampler's decode-time logprobs against its own prefill of the same sequences."""

    status: Literal["ok"]
    gap: Gap = field(metadata=flatten())
    note: str


@dataclass(frozen=True)
class Skipped:
    status: Literal["skipped"]
    reason: str


@dataclass(frozen=True)
class SkippedWithNote:
    status: Literal["skipped"]
    note: str
    reason: str


@dataclass(frozen=True)
class SideFlips:
    status: Literal["ok"]
    tokens: int
    flip_rate_per_layer: list[float] = field(metadata={"doc": "per MoE layer: share of tokens whose top-k set differs"})
    flipped_any_layer: float


@dataclass(frozen=True)
class Absent:
    status: Literal["absent"]
    reason: str


@dataclass(frozen=True)
class AbsentRoutes:
    status: Literal["absent"]
    layers: list[int]
    reason: str


@dataclass(frozen=True)
class RoutesAgainstReference:
    """Each side's route flips against the reference's routers, over completion tokens."""

    status: Literal["ok"]
    layers: list[int]
    tokens: int
    sampler: SideFlips | Absent
    trainer: SideFlips | Absent


Routes = RoutesAgainstReference | Absent | AbsentRoutes


@dataclass(frozen=True)
class Decomposition:
    total: Gap
    sampler_vs_reference: Gap
    trainer_vs_reference: Gap
    sampler_decode_vs_prefill: SelfConsistency | Skipped | SkippedWithNote
    shares: Shares
    routes: Routes


@dataclass(frozen=True)
class Delta:
    """variant - baseline of one metric, with its bootstrap interval over sequences."""

    baseline: float
    variant: float
    estimate: float
    ci_low: float | None
    ci_high: float | None
    relative: float | None
    significant: bool = field(metadata={"doc": "the interval excludes zero"})
    bootstrap: Literal["paired", "independent"]


@dataclass(frozen=True)
class VariantOk:
    name: str
    side: Literal["sampler", "trainer"]
    changes: dict[str, Any] = field(metadata={"doc": "key -> value, keys as written"})
    run_dir: str
    status: Literal["ok"]
    metrics: TokenMetrics
    gaps: Gaps
    decomposition: Shares
    routes: Routes
    throughput: VariantThroughput
    certified: bool
    delta: dict[str, Delta] = field(metadata={"doc": "metric -> the variant's effect on it"})
    tokens_changed_share: float | None
    rank: int = field(metadata={"doc": "1: the largest effect on the total gap"})


@dataclass(frozen=True)
class VariantFailed:
    name: str
    side: Literal["sampler", "trainer"]
    changes: dict[str, Any]
    run_dir: str
    status: Literal["failed"]
    reason: str


@dataclass(frozen=True)
class SamplerFailed:
    """A sampler-side variant whose own process failed, or ran out of time (stage ``timeout``)."""

    name: str
    side: Literal["sampler"]
    changes: dict[str, Any]
    run_dir: str
    status: Literal["failed", "timed out"]
    stage: str | None
    reason: str
    log: str | None


@dataclass(frozen=True)
class VariantSkipped:
    """A default-matrix entry this device cannot run: reported, never started."""

    name: str
    side: Literal["sampler", "trainer"]
    changes: dict[str, Any]
    status: Literal["skipped"]
    reason: str


VariantEntry = VariantOk | VariantFailed | SamplerFailed | VariantSkipped


@dataclass(frozen=True)
class Repeatability:
    tokens: int
    share_tokens_identical: float | None
    share_logprobs_bit_identical: float | None = field(metadata={"doc": "of the tokens in an identical prefix"})
    max_abs_diff: float | None
    compared: str = field(metadata={"doc": "which numbers were compared, and in what precision"})


@dataclass(frozen=True)
class Determinism:
    """The same work done twice, alone, or in another batch, compared bit for bit (empty: --no-determinism)."""

    sampler_repeat_same_seed: Repeatability | None = field(default=None, metadata=optional("a sampler that repeats"))
    sampler_prefill_alone_vs_batch: Repeatability | None = field(
        default=None, metadata=optional("a sampler that scores by prefill")
    )
    sampler_prefill_shuffled_vs_batch: Repeatability | None = field(
        default=None, metadata=optional("a sampler that scores by prefill")
    )
    trainer_alone_vs_batch: Repeatability | None = field(default=None, metadata=optional("with determinism checks"))
    trainer_shuffled_vs_batch: Repeatability | None = field(default=None, metadata=optional("with determinism checks"))


@dataclass(frozen=True)
class ZeroPrice:
    configuration: str = field(metadata={"doc": "a certified configuration"})
    against: str = field(metadata={"doc": "the fastest uncertified one"})
    pipeline_tokens_per_s: float
    against_pipeline_tokens_per_s: float
    cost_x: float | None = field(metadata={"doc": "how many times slower"})
    sampler_cost_x: float | None
    trainer_cost_x: float | None


@dataclass(frozen=True)
class LocateNotRun:
    configuration: str
    status: str = field(metadata={"doc": "skipped, failed, or interrupted (a Ctrl-C stopped the localisations)"})
    reason: str | None


@dataclass(frozen=True)
class LocateOk:
    configuration: str
    status: Literal["ok"]
    result: LocateResult = field(metadata=flatten("the localisation (docs/schemas/locate.json)"))


@dataclass(frozen=True)
class DiagnoseDocument:
    checkpoint: str
    out: str
    device: str = field(metadata={"doc": "cuda or cpu"})
    reference: ReferenceForward = field(metadata={"doc": "the float64 reference forward"})
    baseline: Baseline = field(metadata={"doc": "the configuration as given: settings, metrics, throughput"})
    decomposition: Decomposition = field(
        metadata={"doc": "the gap split by the reference: total, sampler and trainer sides, their shares"}
    )
    variants: list[VariantEntry] = field(metadata={"doc": "ranked ones first, then the failed and skipped"})
    determinism: Determinism
    wall_s: float
    no_effect: list[str]
    pareto_front: list[str]
    reading: str
    zero_price: list[ZeroPrice] = field(
        default_factory=list,
        metadata={
            "doc": "each certified configuration's throughput against the fastest uncertified one "
            "(cost_x: how many times slower; empty when none certifies)"
        },
    )
    plots: dict[str, str] | None = field(default=None, metadata=optional("the pictures --plots or --html wrote"))
    html: str | None = field(default=None, metadata=optional("the page --html wrote"))
    locate: list[LocateOk | LocateNotRun] | None = field(
        default=None, metadata=optional("--locate: per configuration, where the gap enters")
    )

    def interrupted(self) -> list[str]:
        """The configurations whose localisation a Ctrl-C stopped (empty when none did)."""
        return [e.configuration for e in self.locate or [] if e.status == INTERRUPTED]

    def failed(self) -> bool:
        """Whether a variant did not finish: its engine did not start, its process died, or it timed out."""
        return any(v.status in ("failed", "timed out") for v in self.variants)
