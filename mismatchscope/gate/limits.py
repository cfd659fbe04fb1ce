"""The statistics a gate limit can name, and how each one is estimated.

Every statistic is a metric of the catalog (``metrics.CATALOG``: its unit,
the direction that is worse, its bounds and regression floor), or one entry
of one (``ratio_quantiles.0.99``, ``sequence_metrics.max_tv.mean``), or a
masking rule's rate ``RULE.STAT`` (``icepop.token_reject_rate``). Two kinds,
told apart in every output:

* **bootstrapped**: a function of per-sequence sums. Every token mean is a
  ratio of sums (``tv_token_mean = sum_s sum_tv_s / sum_s n_s``), every
  sequence mean and rule rate too, so resampling sequences needs nothing but
  the per-sequence sums the analysis pass already keeps
  (``PerSequence``). The point estimate is the same function at unit weights.
* **point**: maxima, quantiles, ratio tails and top-k bounds cannot be
  rebuilt from per-sequence sums; the gate reads the report's field and
  says so.

Names are the report's own (``tv_token_mean``, ``ratio_quantiles.0.99``,
``sequence_metrics.max_tv.mean``), as ``report --format json`` nests them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np

from .. import metrics as M
from ..analysis.sums import ess
from ..analysis.tokenstats import RATIO_QUANTILES, TAIL_CUTS
from ..errors import GateConfigError
from ..metrics import FLOOR_KL, FLOOR_PROB, RULE_STATS, Metric
from ..rules import RULES, lookup
from ..rules.readings import split_name

if TYPE_CHECKING:
    from ..analysis.engine import AnalysisResult

__all__ = ["FLOOR_KL", "FLOOR_PROB", "METRICS", "Statistic", "lookup_metric", "rule_metric", "valid_names_text"]

Sums = dict[str, np.ndarray]
"""column name -> resampled column sums, shape ``[B]`` (or ``[]`` at unit weights)."""
Read = Callable[["AnalysisResult"], "float | None"]
"""a point value from an analysis result's typed fields; None where the run lacks what it needs."""

SEQUENCE_SECTION = "sequence_metrics"
"""the report's section of per-sequence metrics: names under it read ``sequence_metrics.KEY.mean``."""
CENTERING_SECTION = "score_centering"


@dataclass(frozen=True)
class Statistic:
    """What a limit names: a metric of the catalog, and how the gate estimates it."""

    metric: Metric
    columns: tuple[str, ...] = ()
    """per-sequence columns the statistic needs; empty: a point estimate read from the result."""
    fn: Callable[[Sums], np.ndarray] | None = None
    read: Read | None = None
    """the point value, for statistics that are not bootstrapped."""
    rule: str | None = None
    rule_stat: str | None = None
    routing: bool = False
    """read from the report's routing entry (the run's routes/ must be read)."""

    @property
    def name(self) -> str:
        return self.metric.name

    @property
    def doc(self) -> str:
        return self.metric.meaning

    @property
    def worse(self) -> M.Worse:
        return self.metric.worse

    @property
    def floor(self) -> float:
        return self.metric.floor

    @property
    def bounds(self) -> tuple[float, float]:
        return self.metric.bounds

    @property
    def regressable(self) -> bool:
        return self.metric.regressable

    @property
    def bootstrapped(self) -> bool:
        return self.fn is not None

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


def _token_mean(m: Metric, col: str, *, scale: float = 1.0, shift: float = 0.0) -> Statistic:
    return Statistic(m, (col, "n"), _ratio(col, "n", scale, shift))


def _seq_mean(m: Metric, col: str) -> Statistic:
    return Statistic(m, (col, "one"), _ratio(col, "one"))


def _report(m: Metric, read: Callable) -> Statistic:
    """A point statistic read from the typed report (None when the file has no report entry for it)."""

    def value(result: AnalysisResult) -> float | None:
        return None if result.report is None else read(result.report)

    return Statistic(m, read=value)


def _field(m: Metric) -> Statistic:
    return _report(m, lambda rep: getattr(rep.metrics, m.name))


def _routing(m: Metric) -> Statistic:
    return replace(_report(m, lambda rep: None if rep.routing is None else getattr(rep.routing, m.name)), routing=True)


def _catalog() -> dict[str, Statistic]:
    """Every metric a limit may name, in the order the docs list them: the pass's sums first (bootstrapped), then
    the report's fields, quantiles and tail shares, score centering, and the per-sequence distributions."""
    stats = [*_from_sums(), *_report_fields(), *_quantiles_and_tails(), *_centering(), *_sequence_distributions()]
    return {s.name: s for s in stats}


def _from_sums() -> list[Statistic]:
    """Metrics of the per-token and per-sequence sums: each resampled over sequences by the bootstrap."""
    stats = [
        _token_mean(M.TV_TOKEN_MEAN, "sum_tv"),
        _token_mean(M.ABS_LOGPROB_DIFF_MEAN, "sum_abs_l"),
        _token_mean(M.K1_MEAN, "sum_l", scale=-1.0),
        _token_mean(M.K2_MEAN, "sum_k2"),
        _token_mean(M.K3_MEAN, "sum_k3"),
        _token_mean(M.KL_REVERSE_K3_MEAN, "sum_krev"),
        _token_mean(M.CHI2_TOKEN, "sum_r2", shift=-1.0),
        Statistic(M.ESS, ("sum_r", "sum_r2", "n"), _ess),
        _seq_mean(M.SEQ_LOG_RATIO_MEAN, "sum_l"),
        _seq_mean(M.GEO_RATIO_MEAN, "geo"),
    ]
    seq_columns = {M.SEQ_LOG_RATIO: "sum_l", M.GEO_RATIO: "geo", M.MAX_TV: M.MAX_TV.name, M.LOG_PPL_DIFF: "neg_mean_l"}
    for m, col in seq_columns.items():
        named = replace(m, name=f"{SEQUENCE_SECTION}.{m.name}")
        stats.append(_seq_mean(named.part("mean", f"mean over sequences of {m.formula}"), col))
    return stats


def _report_fields() -> list[Statistic]:
    return [
        _field(M.TV_TOKEN_MAX),
        _field(M.ABS_LOGPROB_DIFF_MAX),
        _field(M.RATIO_MIN),
        _field(M.RATIO_MAX),
        _field(M.TV_TOPK_LOWER_MEAN),
        _field(M.KL_TOPK_LOWER_MEAN),
        _report(
            replace(M.CHI2_SEQ, name=f"{SEQUENCE_SECTION}.{M.CHI2_SEQ.name}"), lambda rep: rep.sequence_metrics.chi2_seq
        ),
        _routing(M.ROUTE_FLIP_RATE),
        _routing(M.ROUTING_SHARE_OF_GAP),
    ]


def _quantiles_and_tails() -> list[Statistic]:
    stats: list[Statistic] = []
    for q in RATIO_QUANTILES:
        key = f"{q:g}"
        m = M.RATIO_QUANTILES.part(key, f"quantile {key} of r")
        stats.append(_report(m, lambda rep, key=key: rep.metrics.ratio_quantiles.get(key)))
    for c in TAIL_CUTS:
        key = f"{c:g}"
        high = M.RATIO_TAIL_HIGH.part(key, f"share of tokens with r > {key}")
        low = M.RATIO_TAIL_LOW.part(key, f"share of tokens with r < 1/{key}")
        stats.append(_report(high, lambda rep, key=key: rep.metrics.ratio_tail_high.get(key)))
        stats.append(_report(low, lambda rep, key=key: rep.metrics.ratio_tail_low.get(key)))
    return stats


def _centering() -> list[Statistic]:
    stats: list[Statistic] = []
    for m in M.SCORE_CENTERING:
        named = replace(m, name=f"{CENTERING_SECTION}.{m.name}")
        what = m.title or m.meaning

        def stat(rep, m=m):
            return None if rep.score_centering is None else getattr(rep.score_centering, m.name)

        stats.append(
            _report(named.part("mean", f"{what}, mean over tokens"), lambda rep, stat=stat: _attr(stat(rep), "mean"))
        )
        for q in RATIO_QUANTILES:
            key = f"{q:g}"
            part = named.part(f"quantiles.{key}", f"{what}, quantile {key} over tokens")
            stats.append(_report(part, lambda rep, stat=stat, key=key: _quantile(stat(rep), key)))
    return stats


def _sequence_distributions() -> list[Statistic]:
    stats: list[Statistic] = []
    for m in M.SEQUENCE_DISTRIBUTIONS:
        named = replace(m, name=f"{SEQUENCE_SECTION}.{m.name}")
        for q in RATIO_QUANTILES:
            key = f"{q:g}"
            part = named.part(f"quantiles.{key}", f"quantile {key} over sequences of {m.name}")
            read = lambda rep, m=m, key=key: getattr(rep.sequence_metrics, m.name).quantiles.get(key)  # noqa: E731
            stats.append(_report(part, read))
    return stats


def _attr(obj, name: str) -> float | None:
    return None if obj is None else getattr(obj, name)


def _quantile(obj, key: str) -> float | None:
    return None if obj is None else obj.quantiles.get(key)


METRICS: dict[str, Statistic] = _catalog()
"""every name a limit may take, except the rules' ``RULE.STAT``."""


def rule_metric(rule: str, stat: str, level: str | None = None) -> Statistic:
    """``RULE.STAT``: a rate of what the rule (with the gate's parameters) would do.

    ``level`` is the rule's level when it depends on its parameters (``verl-rs``);
    without it such a rule's level is checked later, by :func:`check_rule_level`.
    """
    token_reject, token_reweight, sequence_reject, with_rejection = (m.name for m in RULE_STATS)
    spec = lookup(rule)
    if stat == token_reject and spec.acts != "reject":
        raise GateConfigError(f"{rule} reweights tokens, it never rejects them", hint=f"use {rule}.{token_reweight}")
    if stat == token_reweight and spec.acts != "reweight":
        raise GateConfigError(f"{rule} rejects tokens, it never reweights them", hint=f"use {rule}.{token_reject}")
    if stat in (sequence_reject, with_rejection) and spec.acts != "reject":
        raise GateConfigError(f"{rule} reweights, it never rejects", hint=f"use {rule}.{token_reweight}")
    level = level or spec.fixed_level
    if stat == sequence_reject and level == "token":
        raise GateConfigError(
            f"{rule} is a token rule: it rejects tokens, not whole sequences",
            hint=f"use {rule}.{token_reject} or {rule}.{with_rejection}",
        )
    base = M.metric(stat)
    metric = replace(base, name=f"{rule}.{stat}", meaning=f"share of {base.meaning} ({rule})")
    if stat == token_reweight and level == "sequence":
        # sequence-level reweighting keeps no per-sequence verdict: the compare-masks value, not resampled
        return Statistic(metric, read=lambda result: _rule_row_value(result, rule, stat), rule=rule, rule_stat=stat)
    col, den = {
        token_reject: (f"rule:{rule}:rej", "n"),
        token_reweight: (f"rule:{rule}:rew", "n"),
        sequence_reject: (f"rule:{rule}:seq", "one"),
        with_rejection: (f"rule:{rule}:with", "one"),
    }[stat]
    return Statistic(metric, (col, den), _ratio(col, den), rule=rule, rule_stat=stat)


def _rule_row_value(result: AnalysisResult, rule: str, stat: str) -> float | None:
    """The rule's row in compare-masks (real advantages, or the mean of the two hypotheses)."""
    rows = [r for r in (result.masks.rules if result.masks else []) if r.name == rule]
    rows = [r for r in rows if r.hypothesis in ("data", "mean")]
    value = getattr(rows[0], stat) if rows else None  # stat: a rule statistic, a field of the row
    return float(value) if value is not None else None


def check_rule_level(metric: Statistic, instance) -> None:
    """The level checks of :func:`rule_metric` for a rule whose level comes from its parameters."""
    if metric.rule and metric.rule_stat and lookup(metric.rule).fixed_level is None:
        rule_metric(metric.rule, metric.rule_stat, instance.level)


def lookup_metric(name: str) -> Statistic:
    """A statistic by name, or a ``GateConfigError`` that lists the valid names."""
    if name in METRICS:
        return METRICS[name]
    rule, dot, stat = name.rpartition(".")
    stat_names = [m.name for m in RULE_STATS]
    if dot and split_name(rule)[0] in RULES:  # RULE or RULE@READING
        if stat not in stat_names:
            raise GateConfigError(
                f"unknown rule statistic {stat!r} in {name!r}", hint=f"valid: {', '.join(stat_names)}"
            )
        return rule_metric(rule, stat)
    raise GateConfigError(f"unknown metric {name!r}", hint=f"valid metrics: {valid_names_text()}")


def valid_names_text() -> str:
    plain = [
        n
        for n in METRICS
        if "quantiles." not in n and not n.startswith((M.RATIO_TAIL_HIGH.name, M.RATIO_TAIL_LOW.name))
    ]
    return (
        ", ".join(plain)
        + f", {M.RATIO_QUANTILES.name}.Q and {SEQUENCE_SECTION}.KEY.quantiles.Q (Q in "
        + ", ".join(f"{q:g}" for q in RATIO_QUANTILES)
        + f"), {M.RATIO_TAIL_HIGH.name}.C and {M.RATIO_TAIL_LOW.name}.C (C in "
        + ", ".join(f"{c:g}" for c in TAIL_CUTS)
        + f"), {CENTERING_SECTION}.KEY.quantiles.Q, and RULE."
        + "|".join(m.name for m in RULE_STATS)
        + " for RULE in "
        + ", ".join(RULES)
    )
