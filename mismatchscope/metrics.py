"""The metric catalog: every number a command names, declared once.

A :class:`Metric` says what a number is (its name, formula, unit, the
direction that is worse, a one-line meaning) and which module computes it.
Everything that names a metric reads it from here: the report and
compare-masks (their keys), the gate (which names a limit may take, their
bounds and regression floors), the timeline and the live Monitor (their
series, headers and scales), the Markdown, JUnit, HTML and terminal tables,
and the docs. Code spells a metric as ``K3_MEAN.name``, never as the string:
``tests/test_metrics.py`` holds every other module to that.

With l = log p - log q per sampled token (p: the trainer's probability, q:
the sampler's) and r = exp(l) = p / q.

Only the standard library here: every layer imports it, ``--help`` included.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Literal

Worse = Literal["higher", "lower"] | None
"""which direction is a regression; None for signed metrics (k1, log ratios), where neither is."""

FLOOR_PROB = 1e-4
"""default regression floor for probabilities, |log p - log q| (nats) and rates: 0.01 percentage points."""
FLOOR_KL = 1e-6
"""default regression floor for the KL-type estimators (nats)."""

COUNTED = "fraction of tokens"
"""the unit of shares and rates: value x tokens is a count of tokens."""
RATIO_BAND = (0.5, 2.0)
"""``ratio_outside_band`` counts tokens with r = p/q outside this band (a [0.5, 2] token mask)."""


@dataclass(frozen=True)
class Metric:
    """One number a command prints, declared once."""

    name: str
    """the key in every output (report JSON, gate limits, timeline series, Monitor's logged dict)."""
    meaning: str
    """one line a table prints next to the value."""
    formula: str
    """how it is computed from the per-token l and r."""
    unit: str
    worse: Worse
    computed_in: str
    """the module (and function) that computes it."""
    label: str = ""
    """a short column header ("k3 mean")."""
    title: str = ""
    """the heading of a series (timeline's JSON and panels, Monitor); the meaning when empty."""
    lower: float = 0.0
    """the smallest value it can take (-inf: unbounded)."""
    upper: float = math.inf
    """the largest value it can take (1 for probabilities, shares and TV)."""
    floor: float = FLOOR_PROB
    """the default floor of a gate regression limit: a rise below it is too small to fail."""

    @property
    def nonnegative(self) -> bool:
        return self.lower >= 0.0

    @property
    def bounds(self) -> tuple[float, float]:
        """[smallest, largest] value: a gate limit outside it is a typo, not a gate."""
        return self.lower, self.upper

    @property
    def regressable(self) -> bool:
        """A "may not rise by X%" limit needs a direction and a value that cannot go negative."""
        return self.worse == "higher" and self.nonnegative

    @property
    def scale(self) -> str:
        """the scale change tests run on (``timeline.changes.SCALES``): shares on asin-sqrt, the rest on log."""
        return "asin-sqrt" if self.unit.startswith("fraction") else "log"

    @property
    def heading(self) -> str:
        return self.title or self.meaning

    def part(self, key: str, meaning: str) -> Metric:
        """One entry of a metric with keys (a quantile, a tail cut): ``NAME.KEY``, same unit and direction."""
        return replace(self, name=f"{self.name}.{key}", meaning=meaning, title="", label="")


CATALOG: dict[str, Metric] = {}
"""name -> metric, in declaration order (which is the order the docs list them)."""


def _declare(m: Metric) -> Metric:
    assert m.name not in CATALOG, f"metric {m.name} declared twice"
    CATALOG[m.name] = m
    return m


_SUMS = "analysis/sums.py token_means"
_STATS = "analysis/tokenstats.py TokenStats.metrics"
_REPORT = "analysis/report.py assemble_report"
_TOPK = "analysis/tokenstats.py TokenStats.topk"
_CENTERING = "analysis/tokenstats.py TokenStats.score_centering"
_ROUTING = "analysis/routing_report.py routing_section"
_MASKS = "analysis/masks.py"
_SERIES = "timeline/series.py"

# ---- per token: means over the sampled tokens ---------------------------------------------------------------

TV_TOKEN_MEAN = _declare(
    Metric(
        "tv_token_mean",
        "|p - q| of the sampled token",
        "mean over tokens of |p - q|",
        "probability",
        "higher",
        _SUMS,
        label="tv mean",
        title="mean tv_token = |p - q|",
        upper=1.0,
    )
)
TV_TOKEN_MAX = _declare(
    Metric("tv_token_max", "max |p - q|", "max over tokens of |p - q|", "probability", "higher", _STATS, upper=1.0)
)
ABS_LOGPROB_DIFF_MEAN = _declare(
    Metric(
        "abs_logprob_diff_mean",
        "mean |log p - log q| (nats)",
        "mean over tokens of |l|",
        "nats",
        "higher",
        _SUMS,
        label="|l| mean",
        title="mean |log p - log q|",
    )
)
ABS_LOGPROB_DIFF_MAX = _declare(
    Metric("abs_logprob_diff_max", "max |log p - log q| (nats)", "max over tokens of |l|", "nats", "higher", _STATS)
)
K1_MEAN = _declare(
    Metric(
        "k1_mean",
        "-l, unbiased KL(sampler||trainer), can be < 0",
        "mean over tokens of -l",
        "nats",
        None,
        _SUMS,
        label="k1 mean",
        lower=-math.inf,
    )
)
K2_MEAN = _declare(
    Metric(
        "k2_mean",
        "l^2/2, biased, low variance",
        "mean over tokens of l^2 / 2",
        "nats",
        "higher",
        _SUMS,
        label="k2 mean",
        floor=FLOOR_KL,
    )
)
K3_MEAN = _declare(
    Metric(
        "k3_mean",
        "(r-1)-l, unbiased KL(sampler||trainer)",
        "mean over tokens of (r - 1) - l",
        "nats",
        "higher",
        _SUMS,
        label="k3 mean",
        title="mean k3 = (r - 1) - log r, KL(sampler || trainer)",
        floor=FLOOR_KL,
    )
)
KL_REVERSE_K3_MEAN = _declare(
    Metric(
        "kl_reverse_k3_mean",
        "r l-(r-1), KL(trainer||sampler)",
        "mean over tokens of r l - (r - 1)",
        "nats",
        "higher",
        _SUMS,
        label="rev-k3 mean",
        floor=FLOOR_KL,
    )
)
CHI2_TOKEN = _declare(
    Metric(
        "chi2_token",
        "mean(r^2) - 1",
        "mean over tokens of r^2, minus 1",
        "1",
        "higher",
        _SUMS,
        label="chi2",
        lower=-1.0,  # mean r^2 - 1 >= (mean r)^2 - 1 >= -1
        floor=FLOOR_KL,
    )
)
ESS = _declare(
    Metric(
        "ess",
        "effective sample size / n",
        "(sum r)^2 / (n sum r^2)",
        "fraction of tokens",
        "lower",
        _SUMS,
        label="ESS",
        upper=1.0,
    )
)
RATIO_MIN = _declare(Metric("ratio_min", "min r", "min over tokens of r = p/q", "ratio", "lower", _STATS))
RATIO_MAX = _declare(Metric("ratio_max", "max r", "max over tokens of r = p/q", "ratio", "higher", _STATS))
RATIO_QUANTILES = _declare(
    Metric("ratio_quantiles", "quantiles of r over tokens", "exact order statistics of r", "ratio", None, _STATS)
)
RATIO_TAIL_HIGH = _declare(
    Metric(
        "ratio_tail_high",
        "share of tokens with r > c, per cut c",
        "count(r > c) / n",
        COUNTED,
        "higher",
        _STATS,
        upper=1.0,
    )
)
RATIO_TAIL_LOW = _declare(
    Metric(
        "ratio_tail_low",
        "share of tokens with r < 1/c, per cut c",
        "count(r < 1/c) / n",
        COUNTED,
        "higher",
        _STATS,
        upper=1.0,
    )
)
ABS_LOGPROB_DIFF_P99 = _declare(
    Metric(
        "abs_logprob_diff_p99",
        "p99 of |log p - log q| (nats)",
        "0.99 quantile over tokens of |l|",
        "nats",
        "higher",
        _SERIES,
        label="|l| p99",
        title="p99 of |log p - log q|",
    )
)
RATIO_OUTSIDE_BAND = _declare(
    Metric(
        "ratio_outside_band",
        f"share of tokens with r = p/q outside [{RATIO_BAND[0]:g}, {RATIO_BAND[1]:g}]",
        f"count(r < {RATIO_BAND[0]:g} or r > {RATIO_BAND[1]:g}) / n",
        COUNTED,
        "higher",
        _SERIES,
        label=f"r not in [{RATIO_BAND[0]:g},{RATIO_BAND[1]:g}]",
        upper=1.0,
    )
)

# ---- per sequence -------------------------------------------------------------------------------------------

SEQ_LOG_RATIO = _declare(
    Metric(
        "seq_log_ratio",
        "S = sum log r",
        "per sequence S = sum_t l",
        "nats",
        None,
        _REPORT,
        lower=-math.inf,
    )
)
GEO_RATIO = _declare(Metric("geo_ratio", "exp(mean log r)", "per sequence exp(mean_t l)", "ratio", None, _REPORT))
MAX_TV = _declare(
    Metric("max_tv", "max_t |p - q|", "per sequence max_t |p - q|", "probability", "higher", _REPORT, upper=1.0)
)
LOG_PPL_DIFF = _declare(
    Metric(
        "log_ppl_diff",
        "mean lq - mean lp",
        "per sequence mean_t (log q - log p)",
        "nats",
        None,
        _REPORT,
        lower=-math.inf,
    )
)
CHI2_SEQ = _declare(
    Metric(
        "chi2_seq",
        "mean exp(2 clip(S)) - 1",
        "mean over sequences of exp(2 clip(S, -20, 20)), minus 1",
        "1",
        "higher",
        _REPORT,
        lower=-1.0,
    )
)
SEQ_LOG_RATIO_MEAN = _declare(
    Metric(
        "seq_log_ratio_mean",
        "mean over sequences of S = sum_t l",
        "mean over sequences of S",
        "nats",
        None,
        _REPORT,
        lower=-math.inf,
    )
)
GEO_RATIO_MEAN = _declare(
    Metric(
        "geo_ratio_mean",
        "mean over sequences of exp(mean_t l)",
        "mean over sequences of exp(mean_t l)",
        "ratio",
        None,
        _REPORT,
    )
)
SEQUENCE_DISTRIBUTIONS = (SEQ_LOG_RATIO, GEO_RATIO, MAX_TV, LOG_PPL_DIFF)
"""the per-sequence metrics the report gives a mean and quantiles of."""

# ---- from the top-k columns ---------------------------------------------------------------------------------

TV_TOPK_LOWER_MEAN = _declare(
    Metric(
        "tv_topk_lower_mean",
        "full-vocab TV >= this",
        "mean over tokens of the TV restricted to the sampler's top-k ids and the rest",
        "probability",
        "higher",
        _TOPK,
        upper=1.0,
    )
)
KL_TOPK_LOWER_MEAN = _declare(
    Metric(
        "kl_topk_lower_mean",
        "full-vocab KL(sampler||trainer) >= this",
        "mean over tokens of the KL restricted to the sampler's top-k ids and the rest",
        "nats",
        "higher",
        _TOPK,
        floor=FLOOR_KL,
    )
)
TV_TOPK_LOWER_MAX = _declare(
    Metric(
        "tv_topk_lower_max",
        "largest top-k lower bound of the TV",
        "max over tokens",
        "probability",
        "higher",
        _TOPK,
        upper=1.0,
    )
)
KL_TOPK_LOWER_MAX = _declare(
    Metric("kl_topk_lower_max", "largest top-k lower bound of the KL", "max over tokens", "nats", "higher", _TOPK)
)
SAMPLER_TOPK_MASS_MEAN = _declare(
    Metric(
        "sampler_topk_mass_mean",
        "sampler's probability mass on its listed top-k ids",
        "mean over tokens of sum_K q",
        "probability",
        None,
        _TOPK,
        upper=1.0,
    )
)
SAMPLER_TOPK_MASS = _declare(
    Metric(
        "sampler_topk_mass",
        "sum_K q",
        "per token sum over K of q",
        "probability",
        None,
        _CENTERING,
        label="sampler top-k mass",
        title="sampler's top-k mass sum_K q",
        upper=1.0,
    )
)
TRAINER_MASS_ON_SAMPLER_TOPK = _declare(
    Metric(
        "trainer_mass_on_sampler_topk",
        "sum_K p",
        "per token sum over K of p",
        "probability",
        None,
        _CENTERING,
        label="trainer mass on it",
        title="trainer's mass on the sampler's top-k, sum_K p",
        upper=1.0,
    )
)
TAIL_MASS_RATIO = _declare(
    Metric(
        "tail_mass_ratio",
        "(1 - sum_K q) / (1 - sum_K p)",
        "per token (1 - sum_K q) / (1 - sum_K p), tokens with both tails non-empty",
        "ratio",
        None,
        _CENTERING,
        label="tail-mass ratio rho",
        title="tail-mass ratio (1 - sum_K q) / (1 - sum_K p), tokens with both tails non-empty",
    )
)
TOPK_OVERLAP = _declare(
    Metric(
        "topk_overlap",
        "|K_sampler & K_trainer| / k",
        "per token |K_sampler & K_trainer| / k",
        "fraction of top-k ids",
        "lower",
        _CENTERING,
        label="top-k overlap",
        title="overlap |K_sampler & K_trainer| / k of the two top-k id sets",
        upper=1.0,
    )
)
SCORE_CENTERING = (SAMPLER_TOPK_MASS, TRAINER_MASS_ON_SAMPLER_TOPK, TAIL_MASS_RATIO, TOPK_OVERLAP)
"""the score-centering statistics, in the order the report lists them (K: the sampler's listed ids and the
sampled one)."""

KEPT_LOGMASS_MEAN = _declare(
    Metric(
        "kept_logmass_mean",
        "mean log of the mass top-p/top-k truncation kept",
        "mean over tokens of log sum_kept q",
        "nats",
        "lower",
        "analysis/tokenstats.py TokenStats.kept_mass",
        lower=-math.inf,
        upper=0.0,
    )
)
KEPT_LOGMASS_MIN = _declare(
    Metric(
        "kept_logmass_min",
        "least log kept mass",
        "min over tokens of log sum_kept q",
        "nats",
        "lower",
        "analysis/tokenstats.py TokenStats.kept_mass",
        lower=-math.inf,
        upper=0.0,
    )
)

# ---- MoE routing --------------------------------------------------------------------------------------------

ROUTE_FLIP_RATE = _declare(
    Metric(
        "route_flip_rate",
        "share of completion tokens whose top-k expert set differs between the sides in some MoE layer "
        "(MoE runs with both sides' routes)",
        "flipped / compared over completion tokens with a capture on both sides",
        "fraction of compared tokens",
        "higher",
        _ROUTING,
        label="route flips",
        title="share of tokens whose top-k expert set differs between sampler and trainer in some MoE layer",
        upper=1.0,
    )
)
PROMPT_ROUTE_FLIP_RATE = _declare(
    Metric(
        "prompt_route_flip_rate",
        "the same share over prompt rows",
        "flipped / compared over prompt rows with a capture on both sides",
        "fraction of compared rows",
        "higher",
        _ROUTING,
        upper=1.0,
    )
)
ROUTING_SHARE_OF_GAP = _declare(
    Metric(
        "routing_share_of_gap",
        "share of the summed |log p - log q| that sits on tokens flipped in some MoE layer",
        "sum of |l| over flipped tokens / sum of |l| over all tokens",
        "fraction of |l|",
        None,
        _ROUTING,
        upper=1.0,
    )
)

# ---- masking rules: what a rule would do (compare-masks, the gate's RULE.STAT, the timeline's rates) ---------

TOKEN_REJECT_RATE = _declare(
    Metric(
        "token_reject_rate",
        "tokens it rejects",
        "rejected tokens / tokens",
        COUNTED,
        "higher",
        _MASKS,
        label="rej.",
        upper=1.0,
    )
)
TOKEN_REWEIGHT_RATE = _declare(
    Metric(
        "token_reweight_rate",
        "tokens it reweights",
        "reweighted tokens / tokens",
        COUNTED,
        "higher",
        _MASKS,
        label="rew.",
        upper=1.0,
    )
)
SEQUENCE_REJECT_RATE = _declare(
    Metric(
        "sequence_reject_rate",
        "sequences it rejects",
        "rejected sequences / sequences",
        "fraction of sequences",
        "higher",
        _MASKS,
        upper=1.0,
    )
)
SEQUENCES_WITH_REJECTION_RATE = _declare(
    Metric(
        "sequences_with_rejection_rate",
        "sequences with a rejected token",
        "sequences with a rejected token / sequences",
        "fraction of sequences",
        "higher",
        _MASKS,
        upper=1.0,
    )
)
RULE_STATS = (TOKEN_REJECT_RATE, TOKEN_REWEIGHT_RATE, SEQUENCE_REJECT_RATE, SEQUENCES_WITH_REJECTION_RATE)
"""what a masking rule would do, as a share; the gate names them ``RULE.STAT``."""


def metric(name: str) -> Metric:
    """The declared metric ``name`` (KeyError for a name that is not declared)."""
    return CATALOG[name]
