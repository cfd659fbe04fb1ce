"""What ``report`` prints, assembled from the streaming pass's accumulators.

The pass (``engine.py``) fills :class:`~.tokenstats.TokenStats` and the
per-sequence table; this module turns them into the typed :class:`~.results.Report`
the CLI renders (text, JSON, HTML) and the gate reads its point values from.
"""

from __future__ import annotations

import numpy as np

from ..rules import SequenceInputs
from .results import Distribution, Lengths, Report, Routing, SequenceMetrics
from .table import SequenceTable
from .tokenstats import RATIO_QUANTILES, TokenStats, _f
from .yardsticks import interpret

CHI2_SEQ_CLIP = 20.0
"""verl clamps the sequence log-ratio to +-20 before exp(2 S) in chi2_seq."""


def _quantiles(x: np.ndarray) -> dict[str, float | None]:
    if x.size == 0:
        return {f"{q:g}": None for q in RATIO_QUANTILES}
    with np.errstate(invalid="ignore"):  # two infinite neighbours (exp of a huge log-ratio): inf - inf
        qs = np.quantile(x, RATIO_QUANTILES)
    if np.isnan(qs).any():  # at a rank, or between two equal (infinite) values, the quantile is that value, not NaN
        lo, hi = np.quantile(x, RATIO_QUANTILES, method="lower"), np.quantile(x, RATIO_QUANTILES, method="higher")
        at_rank = np.asarray(RATIO_QUANTILES) * (x.size - 1) % 1 == 0
        qs = np.where(np.isnan(qs) & (at_rank | (lo == hi)), lo, qs)
    return {f"{q:g}": _f(v) for q, v in zip(RATIO_QUANTILES, qs, strict=True)}


def assemble_report(
    stats: TokenStats,
    seq: SequenceInputs,
    table: SequenceTable,
    run_config: dict | None,
    tokens: int,
    warnings: list[str],
    routing: Routing | None = None,
) -> Report:
    """The ``report`` result: token metrics, sequence metrics, top-k bounds, breakdowns and readings."""
    sequence_metrics = _sequence_metrics(seq, table)
    metrics = stats.metrics()
    topk = stats.topk()
    metrics.seq_log_ratio_mean = sequence_metrics.seq_log_ratio.mean
    metrics.geo_ratio_mean = sequence_metrics.geo_ratio.mean
    metrics.tv_topk_lower_mean = topk.tv_topk_lower_mean if topk else None
    metrics.kl_topk_lower_mean = topk.kl_topk_lower_mean if topk else None
    return Report(
        tokens=tokens,
        sequences=int(seq.seq_log_ratio_S.size),
        metrics=metrics,
        sequence_metrics=sequence_metrics,
        topk=topk,
        score_centering=stats.score_centering(),
        kept_mass=stats.kept_mass(),
        breakdowns=stats.breakdowns(),
        interpretation=interpret(metrics, run_config),
        routing=routing,
        warnings=warnings,
        run=run_config,
    )


def _sequence_metrics(seq: SequenceInputs, table: SequenceTable) -> SequenceMetrics:
    """The per-sequence distributions (S, the geometric ratio, the largest TV, the log-perplexity gap) and chi2_seq."""
    S = seq.seq_log_ratio_S
    mean_l = seq.mean_log_ratio_S
    with np.errstate(over="ignore"):
        geo = np.exp(mean_l)
    chi2_seq = float(np.mean(np.exp(2 * np.clip(S, -CHI2_SEQ_CLIP, CHI2_SEQ_CLIP))) - 1.0)
    return SequenceMetrics(
        seq_log_ratio=Distribution(_f(S.mean()), _quantiles(S)),
        geo_ratio=Distribution(_f(geo.mean()), _quantiles(geo)),
        max_tv=Distribution(_f(table.max_tv_S.mean()), _quantiles(table.max_tv_S)),
        log_ppl_diff=Distribution(_f((-mean_l).mean()), _quantiles(-mean_l)),
        chi2_seq=_f(chi2_seq),
        chi2_seq_clip=CHI2_SEQ_CLIP,
        length=Lengths(_f(seq.n_tokens_S.mean()), int(seq.n_tokens_S.max())),
    )
