"""One streaming pass that turns a token-pair file into per-step series.

Every token is keyed by its ``(step, group)`` (group: the value of the
``--by`` column, :mod:`.groups`, or one group for the whole file) and reduced into per-key
sums with ``np.bincount``; the per-token terms come from
``divergence.token_terms`` like every other command's. The p99 of
``|log p - log q|`` is exact: the pass keeps ``|l|`` of every token (8 bytes)
with its key (4 bytes) and sorts once at the end.

Token rules are evaluated batch by batch. Sequence rules are evaluated once
at the end on per-``(step, sequence)`` aggregates, so a sequence id reused at
another step counts as another sequence. Advantage-dependent rules without an
``advantage`` column run under the two labelled hypotheses "A>0" and "A<0"
(as in ``compare-masks``), never a silent assumption of the sign.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from typing import Any, cast

import numpy as np

from ..analysis.evaluate import HYPOTHESES, count_per_key, sequence_verdicts, token_verdicts
from ..analysis.positions import PositionTracker
from ..analysis.routing_report import routing_warnings
from ..analysis.sums import token_means
from ..analysis.turns import TurnTracker, turn_rows
from ..analysis.validate import check_advantage, check_not_empty
from ..divergence import clamped_k_terms, token_terms
from ..errors import InputError, MissingColumnsError
from ..metrics import (
    ABS_LOGPROB_DIFF_MEAN,
    ABS_LOGPROB_DIFF_P99,
    K3_MEAN,
    RATIO_BAND,
    RATIO_OUTSIDE_BAND,
    ROUTE_FLIP_RATE,
    TOKEN_REJECT_RATE,
    TOKEN_REWEIGHT_RATE,
    TV_TOKEN_MEAN,
    Metric,
)
from ..reader import BATCH_ROWS, Hygiene, Source, iter_batches, open_source, token_keys
from ..rules import RuleInstance, SequenceInputs
from ..rules.sequence import k3_inverse, needs_inverse_k3
from ..schema import MAX_ABS_STEP, TURN_COLUMNS
from .groups import group_codes, resolve_by

P99 = 0.99
_KEY_STRIDE = 1024
"""(step, group) -> one int64 key: step * stride + group (MAX_GROUPS + a null group fit under it)."""


HEADLINE: tuple[Metric, ...] = (TV_TOKEN_MEAN, K3_MEAN, ABS_LOGPROB_DIFF_MEAN, ABS_LOGPROB_DIFF_P99, RATIO_OUTSIDE_BAND)
"""the series of every timeline; MoE runs with both sides' routes add ``ROUTE_FLIP_RATE`` (over the tokens
with a capture on both sides, ``analysis.route_scan``), and each rule its rate."""
ROUTE_FLIP = ROUTE_FLIP_RATE
ROUTE_FLAGS = ("route_compared", "route_flipped")
"""per-token booleans a batch carries when its run has routes: both sides captured, and flipped in some layer."""


@dataclass(frozen=True)
class RuleUnit:
    """One rule under one advantage hypothesis ("data": real advantages, or none needed)."""

    rule: RuleInstance
    hypothesis: str
    metric: Metric


@dataclass
class StepSeries:
    """Per-(group, step) rows, sorted by group then step; aligned arrays of shape ``[K]``."""

    by: str | None
    groups: list[Any]
    """the ``--by`` values (None: the null group), or ``["all"]`` without ``--by``."""
    group_K: np.ndarray
    """index into ``groups``."""
    step_K: np.ndarray
    tokens_K: np.ndarray
    sequences_K: np.ndarray
    values: dict[str, np.ndarray]
    """metric key -> value per row."""
    metrics: list[Metric]
    units: list[RuleUnit]
    tokens: int
    warnings: list[str] = field(default_factory=list)
    source: Source | None = None
    errors: dict[str, np.ndarray] = field(default_factory=dict)
    """metric key -> the standard error of each row's value from its own tokens (means: sd / sqrt n; shares: the
    binomial one): the run's own noise a change must stand out from (``changes.detect``). Absent for the p99."""

    def rows_of(self, g: int) -> np.ndarray:
        return np.flatnonzero(self.group_K == g)


def build_series(
    path: str | os.PathLike,
    rules: list[RuleInstance],
    by: str | None = None,
    mapping: dict[str, str] | None = None,
    batch_rows: int = BATCH_ROWS,
) -> StepSeries:
    """Read ``path`` once and return the per-step headline metrics and rule rates."""
    source = _open_with_steps(path, mapping)
    has_adv = source.has("advantage")
    units = _units(rules, has_adv)
    by_canon, by_raw = resolve_by(source, by)
    columns = ["step"] + (
        ["advantage"] if has_adv and any(u.hypothesis == "data" and u.rule.spec.uses_advantage for u in units) else []
    )
    columns += [by_canon] if by_canon else []
    columns += [c for c in TURN_COLUMNS if source.has(c) and c not in columns]  # turns checked as every pass does
    turns = TurnTracker() if source.has("turn") else None
    acc = _Accumulator(units)
    groups = group_codes(by, by_canon)
    hygiene = Hygiene()
    positions = PositionTracker()
    scan, routes_note = _routes(source)
    for batch in iter_batches(source, columns, hygiene, batch_rows, extra=[by_raw] if by_raw else []):
        positions.add(*token_keys(batch))  # rows dropped for a non-finite logprob still name a token
        if turns is not None:
            turns.add(turn_rows(batch["sequence_id"], batch["position"], batch["turn"], batch["turn_position"]))
        if scan is not None and scan.index is not None:
            batch.update(zip(ROUTE_FLAGS, scan.index.lookup(batch["sequence_id"], batch["position"]), strict=True))
        if by is None:
            group_T = np.zeros(batch["step"].size, np.int64)
        else:
            group_T = groups.encode(batch[cast(str, by_canon or by_raw)])  # resolve_by names one for a given by
        acc.add(batch, group_T)

    positions.finish()  # a duplicated token would double its weight in its step
    if turns is not None:
        turns.finish()
    check_not_empty(str(path), acc.tokens, hygiene, source)
    series = acc.finish(groups.values if by is not None else ["all"], by)
    series.warnings = source.warnings + hygiene.warnings() + acc.warnings
    series.warnings += ([routes_note] if routes_note else []) + (routing_warnings(scan) if scan else [])
    series.source = source
    return series


def _open_with_steps(path: str | os.PathLike, mapping: dict[str, str] | None) -> Source:
    source = open_source(path, mapping)
    if not source.has("step"):
        raise MissingColumnsError(
            f"{path}: timeline needs a step column (the training step of each token) and the input has none",
            hint="map yours with --column, e.g. --column step=global_step",
        )
    return source


def _routes(source: Source):
    """The run's routes scanned once (their flip index joins the tokens' steps), or None for a dense run."""
    from ..analysis.route_scan import scan_routes
    from ..routing.io import locate_routes

    run, note = locate_routes(source.files)
    return (scan_routes(run) if run else None), note


def _units(rules: list[RuleInstance], has_adv: bool) -> list[RuleUnit]:
    names = [r.name for r in rules]
    out = []
    for r in rules:
        base = r.name if names.count(r.name) == 1 else r.label
        rate = "reject rate" if r.spec.acts == "reject" else "reweight rate"
        params = ", ".join(
            f"{k}={'off' if v is None else v if isinstance(v, str) else f'{v:g}'}" for k, v in r.params.items()
        )
        hyps = list(HYPOTHESES) if r.spec.uses_advantage and not has_adv else ["data"]
        for h in hyps:
            tag = "" if h == "data" else f"[{h}]"
            label = f"{r.name}{' ' + tag if tag else ''} {rate}" + (f" ({params})" if params else "")
            key = f"{base}{tag}_{rate.replace(' ', '_')}"
            short = f"{r.name}{tag} {(TOKEN_REJECT_RATE if r.spec.acts == 'reject' else TOKEN_REWEIGHT_RATE).label}"
            rate_metric = TOKEN_REJECT_RATE if r.spec.acts == "reject" else TOKEN_REWEIGHT_RATE
            out.append(RuleUnit(r, h, replace(rate_metric, name=key, title=label, label=short)))
    return out


class _Accumulator:
    """Per-(step, group) sums, |l| per token, and per-(step, sequence) partials."""

    _SUMS = ("n", "tv", "k3", "abs_l", "outside", "tv2", "k32", "abs_l2")

    def __init__(self, units: list[RuleUnit]):
        self.units = units
        self.token_units = [u for u in units if u.rule.level == "token"]
        self.seq_units = [u for u in units if u.rule.level == "sequence"]
        n_rows = len(self._SUMS) + 2 * len(self.token_units)
        self.sums = np.zeros((n_rows, 0))
        self.key_of: dict[int, int] = {}
        """combined (step, group) key -> dense code."""
        self._codes: list[np.ndarray] = []
        self._abs_l: list[np.ndarray] = []
        self._seq_parts: list[tuple[np.ndarray, np.ndarray, dict[str, np.ndarray]]] = []
        self.route_sums = np.zeros((2, 0))
        """per key: tokens compared, tokens flipped (runs with routes)."""
        self.routed = False
        self.tokens = 0
        self.warnings: list[str] = []

    def _dense(self, step_T: np.ndarray, group_T: np.ndarray) -> np.ndarray:
        # compared, not np.abs()-ed: abs(INT64_MIN) is INT64_MIN, and a negative check would let it wrap the key
        beyond = (step_T > MAX_ABS_STEP) | (step_T < -MAX_ABS_STEP)
        if beyond.any():
            bad = int(step_T[np.flatnonzero(beyond)[0]])
            raise InputError(
                f"step value {bad} is beyond +-2^52: not a training step counter",
                hint="map the training step column with --column step=NAME",
            )
        uk, inv = np.unique(step_T * _KEY_STRIDE + group_T, return_inverse=True)
        lut = np.empty(uk.size, np.int64)
        for i, k in enumerate(uk.tolist()):
            lut[i] = self.key_of.setdefault(k, len(self.key_of))
        return lut[inv.reshape(-1)]

    def add(self, batch: dict[str, Any], group_T: np.ndarray) -> None:
        t = token_terms(batch["trainer_logprob"], batch["sampler_logprob"])
        n = t.log_ratio_T.size
        if n == 0:
            return
        adv = batch.get("advantage")
        check_advantage(adv)
        code_T = self._dense(batch["step"], group_T)
        k = len(self.key_of)
        abs_l = np.abs(t.log_ratio_T)
        self.sums = _pad(self.sums, k) + np.stack(
            [np.bincount(code_T, weights=w, minlength=k) for w in self._weights(t, abs_l, adv)]
        )
        if ROUTE_FLAGS[0] in batch:
            self.routed = True
            self.route_sums = _pad(self.route_sums, k) + np.stack(
                [np.bincount(code_T, weights=batch[f].astype(np.float64), minlength=k) for f in ROUTE_FLAGS]
            )
        self._codes.append(code_T.astype(np.int32))
        self._abs_l.append(abs_l)
        self._seq_parts.append(_pair_reduce(code_T, batch["sequence_id"], self._sequence_terms(t, adv)))
        self.tokens += n

    def _weights(self, t, abs_l: np.ndarray, adv: np.ndarray | None) -> list[np.ndarray | None]:
        """Per token, what each row of ``sums`` adds up (None: a count): ``_SUMS``, then each token rule's
        rejected and reweighted."""
        lo, hi = RATIO_BAND
        weights: list[np.ndarray | None] = [
            None,
            t.tv_T,
            t.k3_T,
            abs_l,
            ((t.ratio_T < lo) | (t.ratio_T > hi)).astype(np.float64),
            t.tv_T * t.tv_T,
            t.k3_T * t.k3_T,
            abs_l * abs_l,
        ]
        for u in self.token_units:
            v = token_verdicts(u, t, adv)
            weights += [v.rejected.astype(np.float64), v.reweighted.astype(np.float64)]
        return weights

    def _sequence_terms(self, t, adv: np.ndarray | None) -> dict[str, np.ndarray]:
        """Per token, what the sequence rules reduce per (step, sequence)."""
        clamped: dict[str, np.ndarray] = {}
        if any(u.rule.spec.fixed_level is None for u in self.seq_units):  # verl-rs: estimators of l clamped to +-20
            clamped = dict(zip(("sum_ck1", "sum_ck2", "sum_ck3"), clamped_k_terms(t.log_ratio_T), strict=True))
        if needs_inverse_k3([u.rule for u in self.seq_units]):  # k3-seq in AReaL's orientation
            clamped["sum_k3inv"] = k3_inverse(t.log_ratio_T)
        return {
            "n": np.ones(t.log_ratio_T.size),
            "sum_l": t.log_ratio_T,
            "min_l": t.log_ratio_T,
            "max_l": t.log_ratio_T,
            "sum_k3": t.k3_T,
            **({"sum_adv": adv} if adv is not None else {}),
            **clamped,
        }

    def finish(self, groups: list[Any], by: str | None) -> StepSeries:
        k = len(self.key_of)
        keys = np.empty(k, np.int64)
        keys[list(self.key_of.values())] = list(self.key_of.keys())
        step_K, group_K = np.floor_divide(keys, _KEY_STRIDE), np.mod(keys, _KEY_STRIDE)
        n = self.sums[0]
        values = self._token_values(k, n)
        seq_code, seqs = self._sequences()
        sequences_K = np.bincount(seq_code, minlength=k)
        for u in self.seq_units:
            values[u.metric.name] = self._seq_rule_rate(u, seq_code, seqs, k) / n
        # groups in order of their value (None last), steps ascending within each
        order_g = sorted(range(len(groups)), key=lambda g: (groups[g] is None, _sort_key(groups[g])))
        rank = np.empty(len(groups), np.int64)
        rank[order_g] = np.arange(len(groups))
        order = np.lexsort((step_K, rank[group_K]))
        metrics = list(HEADLINE) + ([ROUTE_FLIP] if self.routed else []) + [u.metric for u in self.units]
        return StepSeries(
            by=by,
            groups=[groups[g] for g in order_g],
            group_K=rank[group_K][order],
            step_K=step_K[order],
            tokens_K=n[order].astype(np.int64),
            sequences_K=sequences_K[order].astype(np.int64),
            values={m.name: values[m.name][order] for m in metrics},
            metrics=metrics,
            units=self.units,
            tokens=self.tokens,
            errors={name: e[order] for name, e in self._errors(values, n).items() if name in {m.name for m in metrics}},
        )

    def _errors(self, values: dict[str, np.ndarray], n: np.ndarray) -> dict[str, np.ndarray]:
        """Each key's standard error of the means (from the sums of squares) and of the shares (binomial)."""
        out = {}
        with np.errstate(invalid="ignore", divide="ignore"):
            for metric, i in ((TV_TOKEN_MEAN, 5), (K3_MEAN, 6), (ABS_LOGPROB_DIFF_MEAN, 7)):
                mean = values[metric.name]
                out[metric.name] = np.sqrt(np.maximum(self.sums[i] / n - mean * mean, 0.0) / n)
            shares = [RATIO_OUTSIDE_BAND.name] + [u.metric.name for u in self.units]
            for name in shares:
                p = values[name]
                out[name] = np.sqrt(np.clip(p * (1 - p), 0.0, None) / n)
        return out

    def _token_values(self, k: int, n: np.ndarray) -> dict[str, np.ndarray]:
        """Per key: the headline means, the exact p99 of |l|, the token rules' rates and (routes) the flip rate."""
        means = token_means(n, tv=self.sums[1], k3=self.sums[2], abs_l=self.sums[3])
        values = {m.name: np.asarray(means[m.name]) for m in (TV_TOKEN_MEAN, K3_MEAN, ABS_LOGPROB_DIFF_MEAN)}
        values[ABS_LOGPROB_DIFF_P99.name] = grouped_quantile(
            np.concatenate(self._codes), np.concatenate(self._abs_l), k, P99
        )
        values[RATIO_OUTSIDE_BAND.name] = self.sums[4] / n
        base = len(self._SUMS)
        for i, u in enumerate(self.token_units):
            row = base + 2 * i + (0 if u.rule.spec.acts == "reject" else 1)
            values[u.metric.name] = self.sums[row] / n
        if self.routed:
            rs = np.pad(self.route_sums, ((0, 0), (0, k - self.route_sums.shape[1])))
            with np.errstate(invalid="ignore", divide="ignore"):
                values[ROUTE_FLIP.name] = np.where(rs[0] > 0, rs[1] / np.maximum(rs[0], 1), np.nan)
        return values

    def _sequences(self) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        codes = np.concatenate([p[0] for p in self._seq_parts])
        ids = np.concatenate([p[1] for p in self._seq_parts])
        cols = {c: np.concatenate([p[2][c] for p in self._seq_parts]) for c in self._seq_parts[0][2]}
        code_S, seq_S, agg = _pair_reduce(codes, ids, cols)
        if self.seq_units:
            self._check_sequences(code_S, seq_S)
        return code_S, agg

    def _check_sequences(self, code_S: np.ndarray, seq_S: np.ndarray) -> None:
        keys = np.empty(len(self.key_of), np.int64)
        keys[list(self.key_of.values())] = list(self.key_of.keys())
        step_S = np.floor_divide(keys[code_S], _KEY_STRIDE)
        order = np.lexsort((step_S, seq_S))
        s, st = seq_S[order], step_S[order]
        same_seq = s[1:] == s[:-1]
        split = same_seq & (st[1:] == st[:-1])
        if split.any():
            i = int(np.flatnonzero(split)[0])
            raise InputError(
                f"sequence {int(s[i])} at step {int(st[i])} spans several --by groups: sequence rules "
                "need each sequence in one group",
                hint="drop the sequence rules, or --by a per-sequence column",
            )
        reused = np.unique(s[1:][same_seq & (st[1:] != st[:-1])])
        if reused.size:
            self.warnings.append(
                f"{reused.size} sequence id(s) appear at more than one step; sequence rules treat "
                "each (step, sequence) as its own sequence"
            )

    def _seq_rule_rate(self, u: RuleUnit, code_S: np.ndarray, agg: dict[str, np.ndarray], k: int) -> np.ndarray:
        n_S = agg["n"]
        seq = SequenceInputs(
            n_tokens_S=n_S,
            seq_log_ratio_S=agg["sum_l"],
            min_log_ratio_S=agg["min_l"],
            max_log_ratio_S=agg["max_l"],
            mean_k3_S=agg["sum_k3"] / n_S,
            advantage_S=agg["sum_adv"] / n_S if "sum_adv" in agg else None,
            clamped_sum_k1_S=agg.get("sum_ck1"),
            clamped_sum_k2_S=agg.get("sum_ck2"),
            clamped_sum_k3_S=agg.get("sum_ck3"),
            mean_k3_inverse_S=agg["sum_k3inv"] / n_S if "sum_k3inv" in agg else None,
        )
        hit = sequence_verdicts(u, seq).acted(u.rule.spec.acts)
        return count_per_key(code_S, hit, k, weights=n_S)


def _pad(sums: np.ndarray, k: int) -> np.ndarray:
    """``sums`` widened with zero columns to ``k`` keys (new keys appear batch by batch)."""
    return np.pad(sums, ((0, 0), (0, k - sums.shape[1]))) if sums.shape[1] < k else sums


_REDUCE = {"min_l": np.minimum, "max_l": np.maximum}


def _pair_reduce(code: np.ndarray, seq: np.ndarray, cols: dict[str, np.ndarray]):
    """Reduce aligned columns by (code, sequence_id): sums, except ``min_l``/``max_l``."""
    order = np.lexsort((seq, code))
    code, seq = code[order], seq[order]
    starts = np.flatnonzero(np.concatenate(([True], (code[1:] != code[:-1]) | (seq[1:] != seq[:-1]))))
    out = {c: _REDUCE.get(c, np.add).reduceat(v[order], starts) for c, v in cols.items()}
    return code[starts], seq[starts], out


def grouped_quantile(code_T: np.ndarray, values_T: np.ndarray, n_codes: int, q: float) -> np.ndarray:
    """The q-quantile of ``values_T`` within each code, numpy's default (linear) method.

    One stable sort by code, then for each group of m values a partial sort
    (``np.partition``) around j and j + 1 with j + f = q (m - 1): the
    quantile is v[j] + f (v[j+1] - v[j]), evaluated as ``np.quantile`` does.
    """
    order = np.argsort(code_T, kind="stable")
    v = values_T[order]
    counts = np.bincount(code_T, minlength=n_codes)
    ends = np.cumsum(counts)
    out = np.full(n_codes, np.nan)
    for c in np.flatnonzero(counts):
        m = int(counts[c])
        seg = v[ends[c] - m : ends[c]]
        pos = q * (m - 1)
        j = int(np.floor(pos))
        k = min(j + 1, m - 1)
        part = np.partition(seg, [j, k]) if m > 1 else seg
        a, b, f = part[j], part[k], pos - j
        out[c] = b - (b - a) * (1 - f) if f >= 0.5 else a + (b - a) * f  # numpy's _lerp, to the last bit
    return out


def _sort_key(v: Any) -> tuple:
    return (0, v, "") if isinstance(v, (int, float, bool)) else (1, 0, str(v))


def step_metrics(batch: dict[str, np.ndarray], rules: list[RuleInstance]) -> tuple[list[Metric], dict[str, float]]:
    """The timeline's values for the tokens of one step, already cleaned as the reader cleans them.

    ``batch`` holds ``trainer_logprob``, ``sampler_logprob``, ``sequence_id``,
    ``step`` and optionally ``advantage``, aligned. The live ``Monitor`` calls
    this, so what it logs during a run is what ``timeline`` shows afterwards.
    """
    units = _units(rules, "advantage" in batch)
    acc = _Accumulator(units)
    acc.add(batch, np.zeros(batch["step"].size, np.int64))
    series = acc.finish(["all"], None)
    return series.metrics, {m.name: float(series.values[m.name][0]) for m in series.metrics}
