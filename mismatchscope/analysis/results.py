"""The typed results of ``report`` and ``compare-masks``: what the analysis pass returns.

A field named after a metric holds that metric (``metrics.CATALOG`` says
what it is); the JSON a command prints is these objects serialised
(``documents.document``), and their JSON Schemas are generated from these
type hints. Tables, pages and the gate read the fields.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..documents import optional


@dataclass
class TokenMetrics:
    """Over every sampled token (and, for the two sequence means, every sequence)."""

    tv_token_mean: float | None
    tv_token_max: float | None
    abs_logprob_diff_mean: float | None
    abs_logprob_diff_max: float | None
    k1_mean: float | None
    k2_mean: float | None
    k3_mean: float | None
    kl_reverse_k3_mean: float | None
    chi2_token: float | None
    ess: float | None
    ratio_min: float | None
    ratio_max: float | None
    ratio_quantiles: dict[str, float | None]
    """quantile ("0.99") -> its value."""
    ratio_tail_high: dict[str, float | None]
    """cut c ("2") -> the share of tokens with r > c."""
    ratio_tail_low: dict[str, float | None]
    """cut c -> the share of tokens with r < 1/c."""
    seq_log_ratio_mean: float | None = None
    geo_ratio_mean: float | None = None
    tv_topk_lower_mean: float | None = None
    kl_topk_lower_mean: float | None = None


@dataclass
class Distribution:
    """A per-sequence metric: its mean and quantiles over sequences."""

    mean: float | None
    quantiles: dict[str, float | None]


@dataclass
class Lengths:
    mean: float | None
    max: int


@dataclass
class SequenceMetrics:
    seq_log_ratio: Distribution
    geo_ratio: Distribution
    max_tv: Distribution
    log_ppl_diff: Distribution
    chi2_seq: float | None
    chi2_seq_clip: float = field(metadata={"doc": "S is clamped to +-this before exp(2 S), as verl does"})
    length: Lengths = field(default_factory=lambda: Lengths(None, 0))


@dataclass
class TopK:
    """Lower bounds of the full-vocabulary TV and KL from the top-k columns."""

    tokens: int
    tv_topk_lower_mean: float
    tv_topk_lower_max: float
    kl_topk_lower_mean: float
    kl_topk_lower_max: float
    sampler_topk_mass_mean: float


@dataclass
class CenteringStat:
    """One score-centering statistic over the tokens where it is defined."""

    tokens: int
    mean: float | None
    quantiles: dict[str, float | None]


@dataclass
class TailMassRatio(CenteringStat):
    undefined_tokens: int = 0
    """tokens with an empty tail on either side, where rho is undefined (counted apart)."""
    empty_sampler_tail: int = 0
    empty_trainer_tail: int = 0


@dataclass
class ScoreCentering:
    sampler_topk_mass: CenteringStat
    trainer_mass_on_sampler_topk: CenteringStat
    tail_mass_ratio: TailMassRatio
    topk_overlap: CenteringStat | None
    """None without the trainer's own top-k ids."""
    tokens: int


@dataclass
class KeptMass:
    """What top-p/top-k truncation kept of the sampler's distribution, apart from the numerical mismatch."""

    tokens: int
    kept_logmass_mean: float
    kept_logmass_min: float


@dataclass
class Breakdowns:
    """Where the mismatch sits: rows of ``bucket``, ``tokens`` and the token metrics over the bucket's tokens."""

    sampler_prob: list[dict[str, Any]]
    position: list[dict[str, Any]]
    entropy: list[dict[str, Any]] | None


@dataclass
class Reading:
    """A headline number read against a published yardstick."""

    metric: str
    value: float | None
    reading: str
    source: str


@dataclass
class Report:
    """What ``report`` prints (``--format json``: these fields after ``schema_version``)."""

    tokens: int
    sequences: int
    metrics: TokenMetrics
    sequence_metrics: SequenceMetrics
    topk: TopK | None
    score_centering: ScoreCentering | None
    kept_mass: KeptMass | None
    breakdowns: Breakdowns
    interpretation: list[Reading]
    routing: dict[str, Any] | None = field(
        default=None, metadata=optional("MoE runs with routes/: flip rates per layer, what flipped tokens cost")
    )
    warnings: list[str] = field(default_factory=list)
    run: dict[str, Any] | None = field(default=None, metadata={"doc": "the run's metadata (manifest, file metadata)"})
    worst: list[dict[str, Any]] | None = field(
        default=None, metadata=optional("report --worst N: the sequences with the largest mismatch")
    )


@dataclass
class MasksResult:
    """What ``compare-masks`` prints (``--format json``: these fields after ``schema_version``)."""

    tokens: int
    sequences: int
    rules: list[dict[str, Any]] = field(metadata={"doc": "a row per rule and advantage hypothesis"})
    tokens_by_sampler_prob: dict[str, int]
    tokens_by_pq_sign: dict[str, int]
    tail_reading: str | None
    agreement: list[dict[str, Any]]
    sweeps: list[dict[str, Any]]
    examples: list[dict[str, Any]]
    route_flipped_tokens: int | None = field(
        default=None, metadata=optional("runs with routes: tokens flipped in some MoE layer")
    )
    warnings: list[str] = field(default_factory=list)
