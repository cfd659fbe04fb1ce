"""The typed results of ``report`` and ``compare-masks``: what the analysis pass returns.

A field named after a metric holds that metric (``metrics.CATALOG`` says
what it is); the JSON a command prints is these objects serialised
(``documents.document``), and their JSON Schemas are generated from these
type hints. Tables, pages and the gate read the fields.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

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


_BUCKET_MEAN = optional("over the bucket's tokens; absent on a bucket without tokens", with_field="measured")


@dataclass
class BucketRow:
    """One bucket of a breakdown: its tokens and the token metrics' means over them.

    A bucket without tokens has only ``bucket`` and ``tokens``; on the others every mean is written, ``null``
    where it is undefined (``ess`` when the sum of r^2 overflowed).
    """

    bucket: str
    tokens: int
    tv_token_mean: float | None = field(default=None, metadata=_BUCKET_MEAN)
    abs_logprob_diff_mean: float | None = field(default=None, metadata=_BUCKET_MEAN)
    k1_mean: float | None = field(default=None, metadata=_BUCKET_MEAN)
    k2_mean: float | None = field(default=None, metadata=_BUCKET_MEAN)
    k3_mean: float | None = field(default=None, metadata=_BUCKET_MEAN)
    kl_reverse_k3_mean: float | None = field(default=None, metadata=_BUCKET_MEAN)
    chi2_token: float | None = field(default=None, metadata=_BUCKET_MEAN)
    ess: float | None = field(default=None, metadata=_BUCKET_MEAN)
    measured: bool | None = field(default=None, init=False, metadata={"json": False})
    """True when the bucket holds tokens (its means are written), None when it holds none."""

    def __post_init__(self) -> None:
        self.measured = True if self.tokens else None

    def mean(self, name: str) -> float | None:
        """The mean named ``name`` (a catalog name, as the tables and pictures pick their columns)."""
        return getattr(self, name)


@dataclass
class Breakdowns:
    """Where the mismatch sits: a row per bucket, its tokens and the token metrics over them."""

    sampler_prob: list[BucketRow]
    position: list[BucketRow]
    entropy: list[BucketRow] | None
    turn: list[BucketRow] | None = field(
        default=None,
        metadata=optional("multi-turn runs: a row per turn index (its bucket), every turn of the run in order"),
    )


@dataclass
class Reading:
    """A headline number read against a published yardstick."""

    metric: str
    value: float | None
    reading: str
    source: str


@dataclass
class WorstTrace:
    """A ranked sequence's tokens in position order (``--worst-traces``): aligned lists, one entry per token."""

    position: list[int]
    token_id: list[int]
    sampler_logprob: list[float]
    trainer_logprob: list[float]


@dataclass
class WorstSequence:
    """One of the sequences with the largest mismatch (``report --worst N``), and where its largest gap sits."""

    rank: int = field(metadata={"doc": "1 for the largest value; ties go to the smaller sequence id"})
    sequence_id: int
    tokens: int = field(metadata={"doc": "the sequence's sampled tokens"})
    by: str = field(metadata={"doc": "what the sequences are ranked by (--worst-by)"})
    value: float = field(metadata={"doc": "the sequence's value of that ranking"})
    k3_sum: float = field(metadata={"doc": "the sum of k3 over the sequence's tokens (nats)"})
    tv_max: float = field(metadata={"doc": "the largest |p - q| of its tokens"})
    prompt_id: int | None = field(default=None, metadata={"doc": "its prompt, where the file has prompt ids"})
    max_gap_position: int | None = field(
        default=None, metadata={"doc": "the position of its largest |log p - log q| (the first on ties)"}
    )
    max_gap_token_id: int | None = field(default=None, metadata={"doc": "the token sampled there"})
    max_gap_log_ratio: float | None = field(default=None, metadata={"doc": "l = log p - log q there"})
    trace: WorstTrace | None = field(default=None, metadata=optional("--worst-traces: the whole sequence"))


@dataclass
class RouteSide:
    """Whether one side's routes are in the run, and if not, why."""

    recorded: bool
    why: str | None = field(metadata={"doc": "one line for the user where the side has no routes"})


@dataclass
class RouteSides:
    sampler: RouteSide
    trainer: RouteSide

    def absent(self) -> list[str]:
        """``"sampler (why)"`` for each side without routes, as the tables name it."""
        sides = (("sampler", self.sampler), ("trainer", self.trainer))
        return [f"{name} ({side.why or 'not recorded'})" for name, side in sides if not side.recorded]


@dataclass
class MissingCaptures:
    """MoE-layer entries null or all zeros (a capture that failed), per recorded side, out of every entry."""

    sampler: int | None = field(default=None, metadata=optional("the sampler's, where its routes are recorded"))
    trainer: int | None = field(default=None, metadata=optional("the trainer's, where its routes are recorded"))
    entries: int = field(default=0, metadata={"doc": "route rows x MoE layers"})


@dataclass
class LayerFlipRate:
    """One MoE layer: the rows whose top-k expert sets differ between the sides, of those both captured."""

    layer: int = field(metadata={"doc": "the decoder layer's index"})
    flip_rate: float | None = field(metadata={"doc": "flipped / compared; null when nothing was compared"})
    compared: int = field(metadata={"doc": "rows with a capture on both sides"})
    flipped: int = field(metadata={"doc": "of those, rows whose expert sets differ"})


@dataclass
class FlipGap:
    """|log p - log q| on the tokens flipped in some MoE layer against the compared, unflipped ones."""

    flipped_mean: float | None = field(metadata={"doc": "mean |log p - log q| over flipped tokens"})
    flipped_tokens: int
    unflipped_mean: float | None = field(metadata={"doc": "mean |log p - log q| over compared, unflipped tokens"})
    unflipped_tokens: int
    tokens_without_routes: int = field(metadata={"doc": "tokens with no compared route in any layer"})


@dataclass
class MarginBucket:
    """The rows whose trainer router margin (the score gap at the top-k boundary) falls in one interval."""

    bucket: str = field(metadata={"doc": "the margin's interval"})
    compared: int
    flipped: int
    flip_rate: float | None


_BOTH = "runs with both sides' routes"


@dataclass
class Routing:
    """The report's MoE routing section (runs with ``routes/``): flip rates per layer, what flipped tokens cost.

    The flip rates appear only when both sides recorded routes, the gap on flipped tokens only when the
    tokens were joined to them, the margin buckets only when the trainer's router margin was recorded.
    """

    family: str = field(metadata={"doc": "the router family both sides were read with"})
    num_layers: int = field(metadata={"doc": "decoder layers"})
    moe_layers: list[int] = field(metadata={"doc": "the decoder layers that route"})
    num_experts: int
    top_k: int
    replay: str | None = field(
        metadata={"doc": 'null, "ids" or "ids+weights": the sampler\'s routing forced on the trainer'}
    )
    sides: RouteSides
    rows: int = field(metadata={"doc": "route rows, prompt and completion"})
    missing_captures: MissingCaptures
    route_flip_rate: float | None = field(default=None, metadata=optional(_BOTH, with_field="tokens_compared"))
    tokens_compared: int | None = field(
        default=None, metadata=optional(f"{_BOTH}: completion tokens with a capture on both sides in some layer")
    )
    tokens_flipped: int | None = field(
        default=None, metadata=optional(f"{_BOTH}: of those, tokens flipped in some layer")
    )
    route_flip_rate_by_layer: list[LayerFlipRate] | None = field(
        default=None, metadata=optional(f"{_BOTH}: completion rows, per MoE layer")
    )
    prompt_route_flip_rate: float | None = field(
        default=None, metadata=optional(_BOTH, with_field="prompt_rows_compared")
    )
    prompt_rows_compared: int | None = field(
        default=None, metadata=optional(f"{_BOTH}: prompt rows with a capture on both sides in some layer")
    )
    prompt_rows_flipped: int | None = field(
        default=None, metadata=optional(f"{_BOTH}: of those, rows flipped in some layer")
    )
    prompt_route_flip_rate_by_layer: list[LayerFlipRate] | None = field(
        default=None, metadata=optional(f"{_BOTH}: prompt rows, per MoE layer")
    )
    abs_logprob_diff: FlipGap | None = field(
        default=None, metadata=optional("the tokens joined to the routes: |log p - log q| flipped against unflipped")
    )
    routing_share_of_gap: float | None = field(
        default=None, metadata=optional("the tokens joined to the routes", with_field="abs_logprob_diff")
    )
    by_trainer_margin: list[MarginBucket] | None = field(
        default=None, metadata=optional("runs with the trainer's router margin: flips per margin interval")
    )


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
    routing: Routing | None = field(
        default=None, metadata=optional("MoE runs with routes/: flip rates per layer, what flipped tokens cost")
    )
    warnings: list[str] = field(default_factory=list)
    run: dict[str, Any] | None = field(default=None, metadata={"doc": "the run's metadata (manifest, file metadata)"})
    worst: list[WorstSequence] | None = field(
        default=None, metadata=optional("report --worst N: the sequences with the largest mismatch")
    )


Hypothesis = Literal["data", "A>0", "A<0", "mean"]
"""which advantages a rule's row assumes: the file's own ("data"), every A > 0, every A < 0, or the mean of the
two (rules that read the advantage, on a file without one)."""


def display_name(rule: str, hypothesis: Hypothesis) -> str:
    """The rule's name, with its hypothesis where it is one (``dppo-tv [A>0]``): how tables and agreement name it."""
    return rule if hypothesis == "data" else f"{rule} [{hypothesis}]"


RuleParams = dict[str, float | str | None]
"""a rule's parameters by name (its config's fields); None is a bound set to "off"."""


@dataclass
class RuleRow:
    """One rule under one advantage hypothesis: how many tokens and sequences it rejects or reweights.

    Counts are whole numbers except on the "mean" row, where each is the average of the A>0 and A<0 rows'.
    """

    name: str = field(metadata={"doc": "the rule (with @READING for a framework reading), as --rule spells it"})
    params: RuleParams = field(metadata={"doc": "its parameters by name; null is a bound set to off"})
    label: str = field(metadata={"doc": "name:param=value,...: one string that tells two instances apart"})
    level: Literal["token", "sequence"] = field(metadata={"doc": "whether it acts on single tokens or whole sequences"})
    action: Literal["reject", "reweight"] = field(metadata={"doc": "what it does to what it acts on"})
    uses_advantage: bool = field(metadata={"doc": "its verdict depends on the sign of the advantage"})
    hypothesis: Hypothesis = field(
        metadata={"doc": "data: the file's advantages (or none needed); A>0, A<0: every advantage so; mean: of the two"}
    )
    tokens_rejected: float = field(metadata={"doc": "tokens it rejects (a sequence rule: its sequences' tokens)"})
    tokens_reweighted: float = field(metadata={"doc": "tokens it reweights"})
    token_reject_rate: float | None
    token_reweight_rate: float | None
    sequences_rejected: float = field(metadata={"doc": "sequences a sequence rule rejects (0 for a token rule)"})
    sequences_reweighted: float = field(metadata={"doc": "sequences a sequence rule reweights (0 for a token rule)"})
    sequences_with_rejection: float = field(metadata={"doc": "sequences with at least one rejected token"})
    sequences_with_reweight: float = field(metadata={"doc": "sequences with at least one reweighted token"})
    sequence_reject_rate: float | None
    rejected_by_advantage_sign: dict[str, int] | None = field(
        metadata={
            "doc": "rejected tokens by the sign of their advantage (A>0, A<0, A=0: keys no identifier spells); "
            "null without an advantage column"
        }
    )
    rejected_by_sampler_prob: dict[str, float] | None = field(
        metadata={
            "doc": "rejected tokens per sampler-probability bucket, keyed by the bucket's interval (as "
            "tokens_by_sampler_prob); null for a reweighting rule"
        }
    )
    rejected_by_pq_sign: dict[str, float] | None = field(
        metadata={"doc": "rejected tokens with p>q, p<q, p=q (keys as tokens_by_pq_sign); null for a reweighting rule"}
    )
    route_flipped_rejected: float | None = field(
        default=None, metadata=optional("runs with routes: rejected tokens flipped in some MoE layer")
    )
    rejected_by_turn: dict[str, float] | None = field(
        default=None,
        metadata=optional('--by turn: rejected tokens per turn index ("0", "1", ...); they sum to tokens_rejected'),
    )
    reweighted_by_turn: dict[str, float] | None = field(
        default=None, metadata=optional("--by turn: reweighted tokens per turn index; they sum to tokens_reweighted")
    )

    @property
    def display(self) -> str:
        return display_name(self.name, self.hypothesis)


@dataclass
class RuleAgreement:
    """How two rejecting rules' token sets overlap (no sweeps; a sequence rule counts its sequences' tokens)."""

    a: str = field(metadata={"doc": "the first rule, with its hypothesis in brackets where it is one"})
    b: str = field(metadata={"doc": "the second rule, likewise"})
    a_params: RuleParams = field(metadata={"doc": "the first rule's parameters"})
    b_params: RuleParams = field(metadata={"doc": "the second rule's parameters"})
    both: int = field(metadata={"doc": "tokens both reject"})
    only_a: int = field(metadata={"doc": "tokens only the first rejects"})
    only_b: int = field(metadata={"doc": "tokens only the second rejects"})
    jaccard: float | None = field(metadata={"doc": "both / (tokens either rejects); null when neither rejects any"})


@dataclass
class SweepPoint:
    """One value of a swept parameter under one hypothesis: the counts of the rule's row at that value."""

    value: float | str | None = field(metadata={"doc": "the parameter's value (null: off)"})
    hypothesis: Hypothesis = field(metadata={"doc": "data, A>0 or A<0 (sweeps have no mean row)"})
    token_reject_rate: float | None
    token_reweight_rate: float | None
    tokens_rejected: float = field(metadata={"doc": "tokens the rule rejects at this value"})
    tokens_reweighted: float = field(metadata={"doc": "tokens it reweights"})
    sequences_with_rejection: float = field(metadata={"doc": "sequences with at least one rejected token"})
    sequences_rejected: float = field(metadata={"doc": "sequences a sequence rule rejects"})
    sequence_reject_rate: float | None


@dataclass
class Sweep:
    """``--sweep RULE.PARAM=V1,V2,...``: the rule's counts at each value, the other parameters at theirs."""

    rule: str
    param: str = field(metadata={"doc": "the swept parameter"})
    level: Literal["token", "sequence"] = field(metadata={"doc": "the rule's level"})
    points: list[SweepPoint] = field(metadata={"doc": "a point per value and hypothesis, in the order given"})


@dataclass
class DisagreementExample:
    """A token some token-level rejecting rules reject and others keep (``--examples N``: the largest |l| first)."""

    sequence_id: int
    position: int
    token_id: int
    p: float = field(metadata={"doc": "the trainer's probability of the token"})
    q: float = field(metadata={"doc": "the sampler's probability of the token"})
    log_ratio: float = field(metadata={"doc": "l = log p - log q"})
    rejected_by: list[str] = field(metadata={"doc": "the rules that reject it (hypotheses in brackets)"})
    kept_by: list[str] = field(metadata={"doc": "the rules that keep it"})


@dataclass
class MasksResult:
    """What ``compare-masks`` prints (``--format json``: these fields after ``schema_version``)."""

    tokens: int
    sequences: int
    rules: list[RuleRow] = field(
        metadata={"doc": "a row per rule and advantage hypothesis; a hypothesis pair is followed by its mean row"}
    )
    tokens_by_sampler_prob: dict[str, int]
    tokens_by_pq_sign: dict[str, int]
    tail_reading: str | None
    agreement: list[RuleAgreement] = field(metadata={"doc": "a row per pair of rejecting rules (no sweeps)"})
    sweeps: list[Sweep] = field(metadata={"doc": "a sweep per --sweep option"})
    examples: list[DisagreementExample] = field(metadata={"doc": "--examples N: tokens the rules disagree on"})
    route_flipped_tokens: int | None = field(
        default=None, metadata=optional("runs with routes: tokens flipped in some MoE layer")
    )
    tokens_by_turn: dict[str, int] | None = field(
        default=None, metadata=optional("--by turn: the run's tokens per turn index")
    )
    warnings: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class MaskTotals:
    """What the pass's counts add to compare-masks' rows once every batch is folded: the tokens by sampler
    probability and by the sign of p - q, the rules' pairwise agreement and the worst disagreements."""

    tokens_by_sampler_prob: dict[str, int]
    tokens_by_pq_sign: dict[str, int]
    agreement: list[RuleAgreement]
    examples: list[DisagreementExample]
