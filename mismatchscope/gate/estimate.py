"""Per-file estimates: the point value of every limited metric and, where the
metric is a function of per-sequence sums, its bootstrap replicates."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..analysis.sums import LOG_R2_OVERFLOW
from ..analysis.table import SequenceTable
from ..errors import InputError
from ..metrics import ESS, MAX_TV, TOPK_OVERLAP
from .bootstrap import resample_sums
from .limits import CENTERING_SECTION, Statistic

BASE_COLUMNS = {
    "n": "n_tokens_S",
    "sum_tv": "sum_tv_S",
    "sum_abs_l": "sum_abs_l_S",
    "sum_l": "sum_l_S",
    "sum_k2": "sum_k2_S",
    "sum_k3": "sum_k3_S",
    "sum_krev": "sum_krev_S",
    "sum_r": "sum_r_S",
    "sum_r2": "sum_r2_S",
    MAX_TV.name: "max_tv_S",
}
"""the limits catalog's column name -> the ``SequenceTable`` field it reads."""


@dataclass
class FileEstimates:
    role: str
    """"baseline" or "candidate"."""
    path: str
    tokens: int
    sequences: int
    point: dict[str, float]
    replicates: dict[str, np.ndarray] = field(default_factory=dict)
    """metric -> its value on each bootstrap resample, shape ``[B]`` (bootstrapped metrics only)."""
    result: Any = None
    """the ``AnalysisResult`` (report, masks, run metadata) the numbers came from."""
    plot_data: Any = None


def sequence_columns(table: SequenceTable, names: set[str]) -> dict[str, np.ndarray]:
    """The per-sequence columns ``names`` asks for, built from ``AnalysisResult.per_sequence``.

    Rules evaluated under the two advantage hypotheses (no ``advantage``
    column) give the mean of the two, as compare-masks' "mean" row does.
    """
    n = table.n_tokens_S
    out: dict[str, np.ndarray] = {}
    for name in names:
        if name in BASE_COLUMNS:
            out[name] = getattr(table, BASE_COLUMNS[name])
        elif name == "one":
            out[name] = np.ones_like(n)
        elif name == "geo":
            with np.errstate(over="ignore"):
                out[name] = np.exp(table.mean_l_S)
        elif name == "neg_mean_l":
            out[name] = -table.sum_l_S / n
        elif name.startswith("rule:"):
            _, rule, kind = name.split(":")
            out[name] = _rule_column(table, rule, kind)
        else:  # pragma: no cover - the metric catalog names only the columns above
            raise KeyError(name)
    return out


def _rule_column(table: SequenceTable, rule: str, kind: str) -> np.ndarray:
    """kind: "rej" (tokens rejected), "rew" (reweighted), "with" (1 if any rejected), "seq" (sequence rejected)."""
    cols = [
        {
            "rej": c.tokens_rejected_S,
            "rew": c.tokens_reweighted_S,
            "with": c.with_rejection_S,
            "seq": c.sequence_rejected_S,
        }[kind]
        for c in table.rule_columns(rule)
    ]
    if not cols:  # pragma: no cover - the runner always asks the analysis for the limited rules
        raise KeyError(f"rule {rule} was not evaluated")
    return cols[0] if len(cols) == 1 else np.mean(cols, axis=0)


def estimate(
    role: str, path: str, result, metrics: list[Statistic], resamples: int, rng: np.random.Generator
) -> FileEstimates:
    boot = [m for m in metrics if m.bootstrapped]
    names = sorted({c for m in boot for c in m.columns})
    cols = sequence_columns(result.per_sequence, set(names))
    X_SC = np.column_stack([cols[c] for c in names]) if names else np.zeros((result.sequences, 0))
    totals = dict(zip(names, X_SC.sum(axis=0), strict=True))
    point: dict[str, float] = {}
    for m in metrics:
        value = float(m.fn(totals)) if m.fn else _point(result, m)
        if value is None or (isinstance(value, float) and np.isnan(value)):
            raise InputError(
                f"{m.name} is not available for the {role} ({path}){_why_missing(m)}",
                hint="remove the limit on it, or record what it needs",
            )
        point[m.name] = value
    est = FileEstimates(role, path, result.tokens, result.sequences, point, result=result)
    if boot and resamples:
        S_B = resample_sums(X_SC, resamples, rng)
        sums_B = {c: S_B[:, j] for j, c in enumerate(names)}
        est.replicates = {m.name: np.asarray(m.fn(sums_B), dtype=np.float64) for m in boot}  # type: ignore[misc]
    return est


def _point(result, m: Statistic) -> float | None:
    assert m.read is not None  # a statistic that is not bootstrapped reads its point value
    value = m.read(result)
    return None if value is None else float(value)


def _why_missing(m: Statistic) -> str:
    if m.metric is ESS:
        return f": a token's log p - log q exceeds {LOG_R2_OVERFLOW:.1f}, so r^2 overflows float64 (report warns where)"
    if m.routing:
        return (
            ": it needs routes/ with both sides' expert ids (an MoE run whose sampler and trainer routes were "
            "recorded; report warns when a side is missing)"
        )
    if TOPK_OVERLAP.name in m.name:
        return ": it needs the trainer's own top-k ids (a trainer_topk_ids column) and the sampler's top-k columns"
    if "topk" in m.name or m.name.startswith(f"{CENTERING_SECTION}."):
        return ": the file has no top-k columns (sampler_topk_ids, sampler_topk_logprobs, trainer_logprobs_at_sampler_topk)"
    return ""
