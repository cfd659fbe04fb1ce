"""A variant's effect on the gap, with a bootstrap interval over sequences.

Metrics and their per-sequence sums come from the analysis engine, so a
number here is the number ``report`` prints for the same run directory. The
gate's bootstrap (:func:`~mismatchscope.gate.bootstrap.resample_sums`)
resamples sequences:

* **paired** when the variant scores the same tokens (trainer-side
  variants): one resample of sequence indices is applied to the baseline's
  and the variant's sums at once, so what the two share cancels;
* **independent** when the variant samples new tokens (sampler-side): each
  run is resampled on its own, as the gate does.

An effect is significant when its interval excludes zero.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np

from ..gate.bootstrap import interval, resample_sums
from ..metrics import ABS_LOGPROB_DIFF_MEAN, K3_MEAN, TV_TOKEN_MEAN

METRICS = {
    ABS_LOGPROB_DIFF_MEAN.name: "sum_abs_l",
    TV_TOKEN_MEAN.name: "sum_tv",
    K3_MEAN.name: "sum_k3",
}
"""the token means an effect is judged on: report's name -> its per-sequence sum."""
PRIMARY = ABS_LOGPROB_DIFF_MEAN.name

if TYPE_CHECKING:
    from .document import Delta, DiagnoseDocument


@dataclass(frozen=True)
class Bootstrap:
    resamples: int = 1000
    confidence: float = 0.95
    seed: int = 0


def _matrix(result) -> tuple[np.ndarray, np.ndarray]:
    """(sequence ids, [S, 1 + M] matrix of n and the metric sums)."""
    sums = result.per_sequence.sums
    return result.per_sequence.sequence_id_S, np.column_stack([sums["n"], *[sums[c] for c in METRICS.values()]])


def deltas(base, variant, paired: bool, boot: Bootstrap) -> dict[str, Delta]:
    """metric -> its :class:`~.document.Delta` (variant - baseline, with the interval)."""
    from .document import Delta

    rng = np.random.default_rng(boot.seed)
    ids_b, X_b = _matrix(base)
    ids_v, X_v = _matrix(variant)
    point_b = X_b.sum(axis=0)
    point_v = X_v.sum(axis=0)
    if paired and np.array_equal(ids_b, ids_v):
        S_B = resample_sums(np.hstack([X_b, X_v]), boot.resamples, rng)
        rep_b, rep_v = S_B[:, : X_b.shape[1]], S_B[:, X_b.shape[1] :]
        kind = "paired"
    else:
        rep_b = resample_sums(X_b, boot.resamples, rng)
        rep_v = resample_sums(X_v, boot.resamples, rng)
        kind = "independent"
    out: dict[str, Delta] = {}
    for j, name in enumerate(METRICS, start=1):
        b, v = point_b[j] / point_b[0], point_v[j] / point_v[0]
        with np.errstate(divide="ignore", invalid="ignore"):
            d_B = rep_v[:, j] / rep_v[:, 0] - rep_b[:, j] / rep_b[:, 0]
        lo, hi = interval(d_B, boot.confidence) if boot.resamples else (float("nan"), float("nan"))
        out[name] = Delta(
            baseline=float(b),
            variant=float(v),
            estimate=float(v - b),
            ci_low=lo,
            ci_high=hi,
            relative=float((v - b) / b) if b > 0 else None,
            significant=bool(lo > 0 or hi < 0),
            bootstrap=kind,
        )
    return out


def primary(metrics) -> float:
    """The metric effects are ranked by (mean |log p - log q|) of a gap's metrics."""
    return getattr(metrics, PRIMARY)


def rank(doc: DiagnoseDocument) -> DiagnoseDocument:
    """Variants ordered by the size of their effect on the total gap, with their throughput against the
    baseline's; the unchanged ones listed, and the Pareto front of mismatch against throughput."""
    from . import cost
    from .document import VariantOk

    ok = [v for v in doc.variants if isinstance(v, VariantOk)]
    ok.sort(key=lambda v: -abs(v.delta[PRIMARY].estimate))
    bt = doc.baseline.throughput
    base_rate = cost.pipeline_rate(bt.costs.tokens, bt.costs.sampling_s, bt.costs.scoring_s)
    ranked = []
    for i, v in enumerate(ok, start=1):
        t = v.throughput
        rate = cost.pipeline_rate(t.costs.tokens, t.costs.sampling_s, t.costs.scoring_s)
        relative = cost.relative_rate(t.timing, rate, base_rate)
        if t.timing and base_rate:  # the load-robust rate: the baseline's, times the interleaved ratio
            rate = base_rate * relative if relative is not None else None
        ranked.append(
            replace(v, rank=i, throughput=replace(t, pipeline_tokens_per_s=rate, relative_to_baseline=relative))
        )
    baseline = replace(doc.baseline, throughput=replace(bt, pipeline_tokens_per_s=base_rate))
    points = [("baseline", _nan(primary(baseline.metrics)), base_rate or float("nan"))]
    points += [(v.name, _nan(primary(v.metrics)), v.throughput.pipeline_tokens_per_s or float("nan")) for v in ranked]
    return replace(
        doc,
        baseline=baseline,
        variants=[*ranked, *(v for v in doc.variants if not isinstance(v, VariantOk))],
        no_effect=[v.name for v in ranked if not any(d.significant for d in v.delta.values())],
        pareto_front=cost.pareto_front(points),
    )


def _nan(x: float | None) -> float:
    return float("nan") if x is None else x
