"""The sequences with the largest mismatch, and their token traces.

Ranking reads only ``AnalysisResult.per_sequence`` (the sums the analysis pass
already gathered), so it costs no second full pass. Describing the chosen few
(where in the completion the largest gap sits, which token) takes one cheap
streaming pass that reads six columns and keeps only the rows of those ids;
memory grows with the chosen sequences' lengths, never with the file.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np

from ..divergence import token_terms
from ..errors import UsageError
from ..metrics import ABS_LOGPROB_DIFF_MEAN, K3_MEAN
from ..reader import Hygiene, Source, iter_batches
from .results import WorstSequence, WorstTrace
from .table import SequenceTable


def _ratio(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    with np.errstate(invalid="ignore", divide="ignore"):
        return a / b


RANKINGS: dict[str, tuple[str, Callable[[SequenceTable], np.ndarray]]] = {
    "k3_sum": ("sum k3 (nats)", lambda s: s.sum_k3_S),
    K3_MEAN.name: ("mean k3 (nats)", lambda s: _ratio(s.sum_k3_S, s.n_tokens_S)),
    "abs_logprob_diff_sum": ("sum |log p - log q| (nats)", lambda s: s.sum_abs_l_S),
    ABS_LOGPROB_DIFF_MEAN.name: ("mean |log p - log q| (nats)", lambda s: _ratio(s.sum_abs_l_S, s.n_tokens_S)),
    "tv_max": ("max |p - q|", lambda s: s.max_tv_S),
    "log_ratio_sum": ("|S| = |sum log p/q| (nats)", lambda s: np.abs(s.sum_l_S)),
}
"""``--worst-by`` name -> (label for people, per-sequence value from the ``SequenceTable``)."""


@dataclass
class Trace:
    """One sequence's tokens in position order (only rows with finite logprobs, as every number sees them)."""

    position_T: np.ndarray
    token_id_T: np.ndarray
    sampler_logprob_T: np.ndarray
    trainer_logprob_T: np.ndarray
    prompt_id: int | None = None
    advantage_T: np.ndarray | None = None

    @property
    def log_ratio_T(self) -> np.ndarray:
        """l = log p - log q, through the shared primitive."""
        return token_terms(self.trainer_logprob_T, self.sampler_logprob_T).log_ratio_T


def worst_sequences(result, n: int, by: str = "k3_sum") -> list[WorstSequence]:
    """The ``n`` sequences with the largest ``by`` value, largest first (ties: smaller sequence id first).

    Each row holds what the per-sequence sums know: rank, sequence_id, tokens,
    by, value, k3_sum, tv_max (max |p - q|). :func:`describe` adds what the
    trace knows.
    """
    if by not in RANKINGS:
        raise UsageError(f"unknown ranking {by!r}", hint=f"choose one of {', '.join(RANKINGS)}")
    ps = result.per_sequence
    ids = ps.sequence_id_S
    if n <= 0 or ids.size == 0:
        return []
    value_S = np.asarray(RANKINGS[by][1](ps), dtype=np.float64)
    key = np.where(np.isnan(value_S), -np.inf, value_S)  # NaN ranks last
    order = np.lexsort((ids, -key))[:n]
    return [
        WorstSequence(
            rank=r + 1,
            sequence_id=int(ids[i]),
            tokens=int(ps.n_tokens_S[i]),
            by=by,
            value=float(value_S[i]),
            k3_sum=float(ps.sum_k3_S[i]),
            tv_max=float(ps.max_tv_S[i]),
        )
        for r, i in enumerate(order)
    ]


def load_traces(source: Source, ids, batch_rows: int = 1 << 18) -> dict[int, Trace]:
    """The rows of the given sequence ids, per sequence, sorted by position.

    One streaming pass over ``source`` (shards in any order, a sequence's rows
    split across files and batches): each batch is filtered to ``ids`` before
    anything is kept.
    """
    wanted = np.unique(np.asarray(list(ids), dtype=np.int64))
    if wanted.size == 0:
        return {}
    optional = [c for c in ("prompt_id", "advantage") if source.has(c)]
    names = ["position", "token_id", "sampler_logprob", "trainer_logprob", *optional]
    chunks: dict[str, list[np.ndarray]] = {k: [] for k in ["sequence_id", *names]}
    for batch in iter_batches(source, optional, Hygiene(), batch_rows):
        keep = np.isin(batch["sequence_id"], wanted)
        if keep.any():
            for k in chunks:
                chunks[k].append(batch[k][keep])
    if not chunks["sequence_id"]:
        return {}
    cols = {k: np.concatenate(v) for k, v in chunks.items()}
    order = np.lexsort((cols["position"], cols["sequence_id"]))
    cols = {k: v[order] for k, v in cols.items()}
    seq = cols["sequence_id"]
    starts = np.flatnonzero(np.concatenate(([True], seq[1:] != seq[:-1])))
    out = {}
    for a, b in zip(starts, [*starts[1:], seq.size], strict=True):
        out[int(seq[a])] = Trace(
            position_T=cols["position"][a:b],
            token_id_T=cols["token_id"][a:b],
            sampler_logprob_T=cols["sampler_logprob"][a:b],
            trainer_logprob_T=cols["trainer_logprob"][a:b],
            prompt_id=int(cols["prompt_id"][a]) if "prompt_id" in cols else None,
            advantage_T=cols["advantage"][a:b] if "advantage" in cols else None,
        )
    return out


def describe(rows: list[WorstSequence], traces: dict[int, Trace], with_traces: bool = False) -> list[WorstSequence]:
    """Add each row's prompt_id, the position and token id of its largest |log p - log q| (first on ties)
    and that gap; with ``with_traces``, the whole trace as lists. A row without a trace keeps them None."""
    out = []
    for row in rows:
        t = traces.get(row.sequence_id)
        if t is None or not t.position_T.size:
            out.append(row)
            continue
        l_T = t.log_ratio_T
        i = int(np.argmax(np.abs(l_T)))
        trace = None
        if with_traces:
            trace = WorstTrace(
                position=t.position_T.tolist(),
                token_id=t.token_id_T.tolist(),
                sampler_logprob=t.sampler_logprob_T.tolist(),
                trainer_logprob=t.trainer_logprob_T.tolist(),
            )
        out.append(
            replace(
                row,
                prompt_id=t.prompt_id,
                max_gap_position=int(t.position_T[i]),
                max_gap_token_id=int(t.token_id_T[i]),
                max_gap_log_ratio=float(l_T[i]),
                trace=trace,
            )
        )
    return out


def worst_report(
    result, n: int, by: str = "k3_sum", with_traces: bool = False
) -> tuple[list[WorstSequence], dict[int, Trace]]:
    """Rank, load the chosen traces, describe: what ``report --worst`` prints, and the traces it draws."""
    rows = worst_sequences(result, n, by)
    traces = load_traces(result.source, [r.sequence_id for r in rows])
    return describe(rows, traces, with_traces), traces
