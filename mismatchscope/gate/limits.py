"""The statistics a gate limit can name, and how each one is estimated.

Two kinds, told apart in every output:

* **bootstrapped**: a function of per-sequence sums. Every token mean is a
  ratio of sums (``tv_token_mean = sum_s sum_tv_s / sum_s n_s``), every
  sequence mean and rule rate too, so resampling sequences needs nothing but
  the per-sequence sums the analysis pass already keeps
  (``PerSequence``). The point estimate is the same function at unit weights.
* **point**: maxima, quantiles, ratio tails and top-k bounds cannot be
  rebuilt from per-sequence sums; the gate compares the report's value and
  says so.

Names are the report's own keys (``tv_token_mean``, ``ratio_quantiles.0.99``,
``sequence_metrics.max_tv.mean``) and ``RULE.STAT`` for masking rules
(``icepop.token_reject_rate``).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Literal

import numpy as np

from ..analysis.sums import ess
from ..analysis.tokenstats import RATIO_QUANTILES, TAIL_CUTS
from ..errors import GateConfigError
from ..rules import RULES, lookup
from ..rules.readings import split_name

Sums = dict[str, np.ndarray]
"""column name -> resampled column sums, shape ``[B]`` (or ``[]`` at unit weights)."""

Worse = Literal["higher", "lower"] | None

FLOOR_PROB = 1e-4
"""default regression floor for probabilities, |log p - log q| (nats) and rates: 0.01 percentage points."""
FLOOR_KL = 1e-6
"""default regression floor for the KL-type estimators (nats)."""

RULE_STATS = ("token_reject_rate", "token_reweight_rate", "sequence_reject_rate", "sequences_with_rejection_rate")


@dataclass(frozen=True)
class Metric:
    name: str
    doc: str
    columns: tuple[str, ...] = ()
    """per-sequence columns the statistic needs; empty: a point estimate from the report."""
    fn: Callable[[Sums], np.ndarray] | None = None
    worse: Worse = "higher"
    """which direction is a regression; None for signed metrics (k1, log ratios)."""
    nonnegative: bool = True
    floor: float = FLOOR_PROB
    report_path: tuple[str, ...] = ()
    """where the point value sits in the report payload (point metrics)."""
    rule: str | None = None
    rule_stat: str | None = None
    upper: float = math.inf
    """the largest value the statistic can take (1 for probabilities, shares and TV)."""
    lower: float | None = None
    """the smallest; None: 0 when ``nonnegative``, else unbounded."""

    @property
    def bounds(self) -> tuple[float, float]:
        """[smallest, largest] value the statistic can take: a limit outside it is a typo, not a gate."""
        return (self.lower if self.lower is not None else 0.0 if self.nonnegative else -math.inf), self.upper

    @property
    def bootstrapped(self) -> bool:
        return self.fn is not None

    @property
    def regressable(self) -> bool:
        """A "may not rise by X%" limit needs a direction and a value that cannot go negative."""
        return self.worse == "higher" and self.nonnegative

    @property
    def needs_report(self) -> bool:
        return not self.bootstrapped and self.rule is None


def _ratio(num: str, den: str, scale: float = 1.0, shift: float = 0.0) -> Callable[[Sums], np.ndarray]:
    def f(s: Sums) -> np.ndarray:
        with np.errstate(divide="ignore", invalid="ignore"):
            return scale * s[num] / s[den] + shift

    return f


def _ess(s: Sums) -> np.ndarray:
    return ess(s["n"], s["sum_r"], s["sum_r2"])


def _token_mean(
    name: str,
    col: str,
    doc: str,
    *,
    scale: float = 1.0,
    shift: float = 0.0,
    worse: Worse = "higher",
    nonnegative: bool = True,
    floor: float = FLOOR_PROB,
) -> Metric:
    return Metric(name, doc, (col, "n"), _ratio(col, "n", scale, shift), worse, nonnegative, floor)


def _seq_mean(name: str, col: str, doc: str, *, worse: Worse = "higher", nonnegative: bool = True) -> Metric:
    return Metric(name, doc, (col, "one"), _ratio(col, "one"), worse, nonnegative)


def _point(
    path: tuple[str, ...], doc: str, *, worse: Worse = "higher", nonnegative: bool = True, floor: float = FLOOR_PROB
) -> Metric:
    name = ".".join(path[1:]) if path[0] == "metrics" else ".".join(path)
    return Metric(name, doc, worse=worse, nonnegative=nonnegative, floor=floor, report_path=path)


def _catalog() -> dict[str, Metric]:
    ms = [
        _token_mean("tv_token_mean", "sum_tv", "mean |p - q| of the sampled token"),
        _token_mean("abs_logprob_diff_mean", "sum_abs_l", "mean |log p - log q| (nats)"),
        _token_mean(
            "k1_mean", "sum_l", "mean -l, KL(sampler||trainer), can be < 0", scale=-1.0, worse=None, nonnegative=False
        ),
        _token_mean("k2_mean", "sum_k2", "mean l^2/2 (nats)", floor=FLOOR_KL),
        _token_mean("k3_mean", "sum_k3", "mean (r-1)-l, KL(sampler||trainer) (nats)", floor=FLOOR_KL),
        _token_mean("kl_reverse_k3_mean", "sum_krev", "mean r l-(r-1), KL(trainer||sampler) (nats)", floor=FLOOR_KL),
        _token_mean("chi2_token", "sum_r2", "mean r^2 - 1", shift=-1.0, nonnegative=False, floor=FLOOR_KL),
        Metric("ess", "effective sample size / n", ("sum_r", "sum_r2", "n"), _ess, worse="lower"),
        _seq_mean("seq_log_ratio_mean", "sum_l", "mean over sequences of S = sum_t l", worse=None, nonnegative=False),
        _seq_mean("geo_ratio_mean", "geo", "mean over sequences of exp(mean_t l)", worse=None),
        _seq_mean(
            "sequence_metrics.seq_log_ratio.mean", "sum_l", "= seq_log_ratio_mean", worse=None, nonnegative=False
        ),
        _seq_mean("sequence_metrics.geo_ratio.mean", "geo", "= geo_ratio_mean", worse=None),
        _seq_mean("sequence_metrics.max_tv.mean", "max_tv", "mean over sequences of max_t |p - q|"),
        _seq_mean(
            "sequence_metrics.log_ppl_diff.mean",
            "neg_mean_l",
            "mean over sequences of mean_t (lq - lp)",
            worse=None,
            nonnegative=False,
        ),
        _point(("metrics", "tv_token_max"), "max |p - q|"),
        _point(("metrics", "abs_logprob_diff_max"), "max |log p - log q| (nats)"),
        _point(("metrics", "ratio_min"), "min r", worse="lower"),
        _point(("metrics", "ratio_max"), "max r"),
        _point(("metrics", "tv_topk_lower_mean"), "top-k lower bound of the full-vocabulary TV, mean"),
        _point(
            ("metrics", "kl_topk_lower_mean"), "top-k lower bound of KL(sampler||trainer), mean (nats)", floor=FLOOR_KL
        ),
        _point(("sequence_metrics", "chi2_seq"), "mean exp(2 clip(S)) - 1", nonnegative=False),
    ]
    ms += [
        Metric(
            "route_flip_rate",
            "share of completion tokens whose top-k expert set differs between the sides in some "
            "MoE layer (MoE runs with both sides' routes)",
            report_path=("routing", "route_flip_rate"),
            upper=1.0,
        ),
        Metric(
            "routing_share_of_gap",
            "share of the summed |log p - log q| that sits on tokens flipped in some MoE layer",
            worse=None,
            report_path=("routing", "routing_share_of_gap"),
            upper=1.0,
        ),
    ]
    for q in RATIO_QUANTILES:
        ms.append(_point(("metrics", "ratio_quantiles", f"{q:g}"), f"quantile {q:g} of r", worse=None))
    for c in TAIL_CUTS:
        ms.append(_point(("metrics", "ratio_tail_high", f"{c:g}"), f"share of tokens with r > {c:g}"))
        ms.append(_point(("metrics", "ratio_tail_low", f"{c:g}"), f"share of tokens with r < 1/{c:g}"))
    centering: tuple[tuple[str, Worse, str], ...] = (
        ("sampler_topk_mass", None, "sampler's top-k mass sum_K q"),
        ("trainer_mass_on_sampler_topk", None, "trainer's mass on the sampler's top-k, sum_K p"),
        ("tail_mass_ratio", None, "tail-mass ratio (1 - sum_K q) / (1 - sum_K p), tokens with both tails non-empty"),
        ("topk_overlap", "lower", "overlap |K_sampler & K_trainer| / k of the two top-k id sets"),
    )
    for key, worse, doc in centering:
        ms.append(_point(("score_centering", key, "mean"), f"{doc}, mean over tokens", worse=worse))
        for q in RATIO_QUANTILES:
            ms.append(
                _point(
                    ("score_centering", key, "quantiles", f"{q:g}"), f"{doc}, quantile {q:g} over tokens", worse=worse
                )
            )
    sequence: tuple[tuple[str, Worse, bool], ...] = (
        ("seq_log_ratio", None, False),
        ("geo_ratio", None, True),
        ("max_tv", "higher", True),
        ("log_ppl_diff", None, False),
    )
    for key, worse, nonneg in sequence:
        for q in RATIO_QUANTILES:
            ms.append(
                _point(
                    ("sequence_metrics", key, "quantiles", f"{q:g}"),
                    f"quantile {q:g} over sequences of {key}",
                    worse=worse,
                    nonnegative=nonneg,
                )
            )
    return {m.name: _bounded(m) for m in ms}


_UNIT = ("tv_token_mean", "ess", "sequence_metrics.max_tv.mean", "tv_token_max", "tv_topk_lower_mean")
"""statistics that are probabilities, shares or TV distances: between 0 and 1."""
_UNIT_PREFIXES = (
    "ratio_tail_high.",
    "ratio_tail_low.",
    "sequence_metrics.max_tv.quantiles.",
    "score_centering.sampler_topk_mass.",
    "score_centering.trainer_mass_on_sampler_topk.",
    "score_centering.topk_overlap.",
)


def _bounded(m: Metric) -> Metric:
    if m.name in _UNIT or m.name.startswith(_UNIT_PREFIXES):
        return replace(m, upper=1.0)
    if m.name in ("chi2_token", "sequence_metrics.chi2_seq"):  # mean r^2 - 1 >= (mean r)^2 - 1 >= -1
        return replace(m, lower=-1.0)
    return m


METRICS: dict[str, Metric] = _catalog()


def rule_metric(rule: str, stat: str, level: str | None = None) -> Metric:
    """``RULE.STAT``: a rate of what the rule (with the gate's parameters) would do.

    ``level`` is the rule's level when it depends on its parameters (``verl-rs``);
    without it such a rule's level is checked later, by :func:`check_rule_level`.
    """
    spec = lookup(rule)
    if stat == "token_reject_rate" and spec.acts != "reject":
        raise GateConfigError(f"{rule} reweights tokens, it never rejects them", hint=f"use {rule}.token_reweight_rate")
    if stat == "token_reweight_rate" and spec.acts != "reweight":
        raise GateConfigError(f"{rule} rejects tokens, it never reweights them", hint=f"use {rule}.token_reject_rate")
    if stat in ("sequence_reject_rate", "sequences_with_rejection_rate") and spec.acts != "reject":
        raise GateConfigError(f"{rule} reweights, it never rejects", hint=f"use {rule}.token_reweight_rate")
    level = level or spec.fixed_level
    if stat == "sequence_reject_rate" and level == "token":
        raise GateConfigError(
            f"{rule} is a token rule: it rejects tokens, not whole sequences",
            hint=f"use {rule}.token_reject_rate or {rule}.sequences_with_rejection_rate",
        )
    if stat == "token_reweight_rate" and level == "sequence":
        # sequence-level reweighting keeps no per-sequence verdict: the report's value, not resampled
        return Metric(
            f"{rule}.{stat}",
            f"share of tokens {rule} reweights",
            report_path=("masks", rule, stat),
            rule=rule,
            rule_stat=stat,
            upper=1.0,
        )
    col, den = {
        "token_reject_rate": (f"rule:{rule}:rej", "n"),
        "token_reweight_rate": (f"rule:{rule}:rew", "n"),
        "sequence_reject_rate": (f"rule:{rule}:seq", "one"),
        "sequences_with_rejection_rate": (f"rule:{rule}:with", "one"),
    }[stat]
    what = {
        "token_reject_rate": "tokens it rejects",
        "token_reweight_rate": "tokens it reweights",
        "sequence_reject_rate": "sequences it rejects",
        "sequences_with_rejection_rate": "sequences with a rejected token",
    }[stat]
    return Metric(
        f"{rule}.{stat}",
        f"share of {what} ({rule})",
        (col, den),
        _ratio(col, den),
        rule=rule,
        rule_stat=stat,
        upper=1.0,
    )


def check_rule_level(metric: Metric, instance) -> None:
    """The level checks of :func:`rule_metric` for a rule whose level comes from its parameters."""
    if metric.rule and metric.rule_stat and lookup(metric.rule).fixed_level is None:
        rule_metric(metric.rule, metric.rule_stat, instance.level)


def lookup_metric(name: str) -> Metric:
    """A metric by name, or a ``GateConfigError`` that lists the valid names."""
    if name in METRICS:
        return METRICS[name]
    rule, dot, stat = name.rpartition(".")
    if dot and split_name(rule)[0] in RULES:  # RULE or RULE@READING
        if stat not in RULE_STATS:
            raise GateConfigError(
                f"unknown rule statistic {stat!r} in {name!r}", hint=f"valid: {', '.join(RULE_STATS)}"
            )
        return rule_metric(rule, stat)
    raise GateConfigError(f"unknown metric {name!r}", hint=f"valid metrics: {valid_names_text()}")


def valid_names_text() -> str:
    plain = [n for n in METRICS if "quantiles." not in n and "ratio_tail" not in n]
    return (
        ", ".join(plain)
        + ", ratio_quantiles.Q and sequence_metrics.KEY.quantiles.Q (Q in "
        + ", ".join(f"{q:g}" for q in RATIO_QUANTILES)
        + "), ratio_tail_high.C and ratio_tail_low.C (C in "
        + ", ".join(f"{c:g}" for c in TAIL_CUTS)
        + "), score_centering.KEY.quantiles.Q, and RULE."
        + "|".join(RULE_STATS)
        + " for RULE in "
        + ", ".join(RULES)
    )
