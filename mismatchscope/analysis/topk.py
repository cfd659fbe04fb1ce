"""Full-distribution lower bounds from the sampler's top-k (docs/analysis.md).

Coarsen the vocabulary into the ids the sampler listed (K, the sampled id
included) plus one "rest" bucket. TV and KL on that partition never exceed
the full-vocabulary values (data-processing inequality), so they are valid
lower bounds; with the full vocabulary listed they are exact.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import numpy as np
import pyarrow as pa

from ..arrow import list_offsets, to_numpy
from ..errors import InputError
from .compiled import loops

REST_EPS = 1e-12
"""Rest-bucket masses below this are rounding noise (fp32 softmax sums to 1
within ~1e-7): a zero sampler mass contributes 0 to the KL, and a trainer mass
is floored here rather than turning a rounding error into an infinite bound."""

TAIL_EMPTY = 1e-6
"""A tail mass 1 - sum_K below this is empty: fp32 softmax rows sum to 1 only within ~1e-7, so a
smaller "tail" is rounding, and a ratio of two such tails would be a ratio of noise."""


@dataclass(frozen=True)
class TopkBounds:
    tv_lower_T: np.ndarray
    kl_lower_T: np.ndarray
    sampler_mass_T: np.ndarray
    """sum of q over K: how much of the sampler's distribution the list covers."""
    trainer_mass_T: np.ndarray
    """sum of p over the same K: the trainer's mass on the sampler's top-k."""
    tail_ratio_T: np.ndarray
    """rho = (1 - sum_K q) / (1 - sum_K p), the rest buckets' ratio, where both are non-empty; NaN elsewhere."""
    empty_sampler_tail_T: np.ndarray
    """bool: 1 - sum_K q < TAIL_EMPTY (rho undefined)."""
    empty_trainer_tail_T: np.ndarray


def _flat(arr: pa.Array, name: str) -> tuple[np.ndarray, np.ndarray]:
    """The list values, flattened, and the n + 1 offsets from 0 where each row's list starts in them."""
    if arr.null_count:
        raise InputError(f"column {name!r} has null lists")
    flat, offsets = list_offsets(arr)
    return to_numpy(flat), offsets


def _check_aligned(
    ends: np.ndarray,
    ends_s: np.ndarray,
    ends_t: np.ndarray,
    sequence_id_T: np.ndarray | None,
    position_T: np.ndarray | None,
) -> None:
    """The three top-k lists of every token have one length (their offsets, from 0, are equal), or the first
    token where they do not is named."""
    if np.array_equal(ends, ends_s) and np.array_equal(ends, ends_t):
        return
    n_ids, n_s, n_t = np.diff(ends), np.diff(ends_s), np.diff(ends_t)
    bad = int(np.flatnonzero((n_ids != n_s) | (n_ids != n_t))[0])
    where = ""
    if sequence_id_T is not None and position_T is not None:
        where = f" at sequence {int(sequence_id_T[bad])} position {int(position_T[bad])}"
    raise InputError(
        f"top-k lists are misaligned{where}: {n_ids[bad]} ids, {n_s[bad]} sampler logprobs, {n_t[bad]} trainer logprobs"
    )


def topk_bounds(
    token_id_T: np.ndarray,
    sampler_logprob_T: np.ndarray,
    trainer_logprob_T: np.ndarray,
    topk_ids: pa.Array,
    topk_sampler_lp: pa.Array,
    topk_trainer_lp: pa.Array,
    sequence_id_T: np.ndarray | None = None,
    position_T: np.ndarray | None = None,
    probs: tuple[np.ndarray, np.ndarray] | None = None,
) -> TopkBounds:
    """Per-token TV and KL(sampler || trainer) lower bounds on the K + rest partition.

    The sampled id is added to K when the list does not already hold it.
    ``probs``: (exp of the sampler logprobs, exp of the trainer logprobs) when
    the caller has them already (``divergence.token_terms``), not computed twice.
    """
    ids, ends = _flat(topk_ids, "sampler_topk_ids")
    slp, ends_s = _flat(topk_sampler_lp, "sampler_topk_logprobs")
    tlp, ends_t = _flat(topk_trainer_lp, "trainer_logprobs_at_sampler_topk")
    n_ids = np.diff(ends)
    _check_aligned(ends, ends_s, ends_t, sequence_id_T, position_T)
    n = token_id_T.shape[0]
    if probs is None:
        with np.errstate(over="ignore"):
            probs = (np.exp(sampler_logprob_T), np.exp(trainer_logprob_T))
    q_T, p_T = probs
    e = np.empty
    out = TopkBounds(e(n), e(n), e(n), e(n), e(n), e(n, bool), e(n, bool))
    if (compiled := loops()) is not None:
        _bounds_compiled(compiled, out, ends, ids, slp, tlp, token_id_T, sampler_logprob_T, trainer_logprob_T, q_T, p_T)
        return out
    for a in range(0, n, BLOCK_ROWS):
        b = min(n, a + BLOCK_ROWS)
        lo, hi = int(ends[a]), int(ends[b])
        rows, lists = slice(a, b), slice(lo, hi)
        token_side = (token_id_T[rows], sampler_logprob_T[rows], trainer_logprob_T[rows], q_T[rows], p_T[rows])
        _bounds_block(out, rows, *token_side, ids[lists], slp[lists], tlp[lists], n_ids[rows])
    return out


_ROW_VALUE_TYPES = (np.dtype(np.float32), np.dtype(np.float64))
"""list value types the compiled loop reads as they are (others are cast to float64 first, as numpy does)."""


def batch_bounds(batch: Mapping[str, Any], probs: tuple[np.ndarray, np.ndarray]) -> TopkBounds:
    """:func:`topk_bounds` of a cleaned batch's columns; ``probs``: its token terms' (q, p), which the bounds
    reuse. The pass folds them, and a writer summarises them: both from here."""
    return topk_bounds(
        batch["token_id"],
        batch["sampler_logprob"],
        batch["trainer_logprob"],
        batch["sampler_topk_ids"],
        batch["sampler_topk_logprobs"],
        batch["trainer_logprobs_at_sampler_topk"],
        batch["sequence_id"],
        batch["position"],
        probs,
    )


def _bounds_compiled(
    compiled: ModuleType,
    out: TopkBounds,
    ends: np.ndarray,
    ids: np.ndarray,
    slp: np.ndarray,
    tlp: np.ndarray,
    token_id_T: np.ndarray,
    sampler_logprob_T: np.ndarray,
    trainer_logprob_T: np.ndarray,
    q_T: np.ndarray,
    p_T: np.ndarray,
) -> None:
    """:func:`topk_bounds`' arithmetic in one compiled pass over the rows, written into ``out``: the same
    operations in the same order as :func:`_bounds_block`, so the same bits, without a dozen passes over
    row-sized arrays per list column."""
    if slp.dtype != tlp.dtype or slp.dtype not in _ROW_VALUE_TYPES:  # numpy's own cast: the same values
        slp, tlp = slp.astype(np.float64), tlp.astype(np.float64)
    f64 = [np.ascontiguousarray(x, dtype=np.float64) for x in (sampler_logprob_T, trainer_logprob_T, q_T, p_T)]
    compiled.topk_bounds(
        np.ascontiguousarray(ends),
        np.ascontiguousarray(ids, dtype=np.int64),
        np.ascontiguousarray(slp),
        np.ascontiguousarray(tlp),
        np.ascontiguousarray(token_id_T, dtype=np.int64),
        *f64,
        out.tv_lower_T,
        out.kl_lower_T,
        out.sampler_mass_T,
        out.trainer_mass_T,
        out.tail_ratio_T,
        out.empty_sampler_tail_T,
        out.empty_trainer_tail_T,
        REST_EPS,
        TAIL_EMPTY,
    )


BLOCK_ROWS = 16384
"""rows bounded at once: their row-sized temporaries (8 bytes a row) then stay in a core's cache, where a
whole batch's would go to memory and back for every operation, while each numpy call still covers enough
rows that its fixed cost stays small."""


def _bounds_block(
    out: TopkBounds,
    rows: slice,
    token_id_T: np.ndarray,
    sampler_logprob_T: np.ndarray,
    trainer_logprob_T: np.ndarray,
    q_T: np.ndarray,
    p_T: np.ndarray,
    ids: np.ndarray,
    slp: np.ndarray,
    tlp: np.ndarray,
    n_ids: np.ndarray,
) -> None:
    """:func:`topk_bounds` on the rows ``rows`` of a batch (their flat list values given), written into ``out``."""
    slp, tlp = slp.astype(np.float64, copy=False), tlp.astype(np.float64, copy=False)
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        q_sum, p_sum, abs_sum, kl_in, listed = _list_sums(token_id_T, ids, slp, tlp, n_ids)
        extra_q = np.where(listed, 0.0, q_T)  # the sampled id, when the list lacks it
        extra_p = np.where(listed, 0.0, p_T)
        q_sum += extra_q
        p_sum += extra_p
        abs_sum += np.abs(extra_p - extra_q)
        tv = 0.5 * (abs_sum + np.abs(q_sum - p_sum))
        kl_in += np.where(listed | (extra_q <= 0), 0.0, extra_q * (sampler_logprob_T - trainer_logprob_T))
        # sums of probabilities are >= 0, so 1 - sum <= 1: only the floors can clip
        q_rest = np.maximum(1.0 - q_sum, 0.0)
        p_rest = np.maximum(1.0 - p_sum, REST_EPS)
        kl_rest = np.zeros(q_rest.shape)
        rest = np.flatnonzero(q_rest > REST_EPS)  # logarithms only where the rest bucket holds sampler mass
        q_rest = q_rest[rest]
        kl_rest[rest] = q_rest * (np.log(q_rest) - np.log(p_rest[rest]))
    np.minimum(tv, 1.0, out=out.tv_lower_T[rows])
    np.maximum(kl_in + kl_rest, 0.0, out=out.kl_lower_T[rows])
    out.sampler_mass_T[rows] = q_sum
    out.trainer_mass_T[rows] = p_sum
    q_tail, p_tail = 1.0 - q_sum, 1.0 - p_sum
    empty_q, empty_p = q_tail < TAIL_EMPTY, p_tail < TAIL_EMPTY
    out.empty_sampler_tail_T[rows] = empty_q
    out.empty_trainer_tail_T[rows] = empty_p
    with np.errstate(divide="ignore", invalid="ignore"):
        out.tail_ratio_T[rows] = np.where(empty_q | empty_p, np.nan, q_tail / p_tail)


def _list_sums(
    token_id_T: np.ndarray, ids: np.ndarray, slp: np.ndarray, tlp: np.ndarray, n_ids: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per row, over its list: the sums of q, p, |p - q| and q (log q - log p), and whether it holds the row's
    sampled id.

    Each row's values are added to 0.0 one by one in list order. When every
    list has the same length k (what samplers write), the lists are a ``[n, k]``
    table, taken a column at a time: each step is a handful of row-sized
    operations on data in cache. Ragged lists are flattened and summed by
    ``np.bincount`` over their row index, which adds in the same order, so both
    give the same bits.
    """
    n = token_id_T.shape[0]
    if not (n and (n_ids == n_ids[0]).all()):
        row = np.repeat(np.arange(n), n_ids)
        qk, pk = np.exp(slp), np.exp(tlp)
        terms = (qk, pk, np.abs(pk - qk), _kl_terms(slp, tlp, qk, np.empty(qk.shape)))
        q_sum, p_sum, abs_sum, kl_in = (np.bincount(row, weights=w, minlength=n) for w in terms)
        return q_sum, p_sum, abs_sum, kl_in, np.bincount(row, weights=(ids == token_id_T[row]), minlength=n) > 0
    k = int(n_ids[0])
    q_sum, p_sum, abs_sum, kl_in = np.zeros((4, n))
    listed = np.zeros(n, bool)
    qj, pj, dj, hit = np.empty(n), np.empty(n), np.empty(n), np.empty(n, bool)
    ids_nk, slp_nk, tlp_nk = ids.reshape(n, k), slp.reshape(n, k), tlp.reshape(n, k)
    for j in range(k):
        np.exp(slp_nk[:, j], out=qj)
        np.exp(tlp_nk[:, j], out=pj)
        q_sum += qj
        p_sum += pj
        abs_sum += np.abs(np.subtract(pj, qj, out=dj), out=dj)
        kl_in += _kl_terms(slp_nk[:, j], tlp_nk[:, j], qj, dj)
        listed |= np.equal(ids_nk[:, j], token_id_T, out=hit)
    return q_sum, p_sum, abs_sum, kl_in, listed


def _kl_terms(slp: np.ndarray, tlp: np.ndarray, q: np.ndarray, out: np.ndarray) -> np.ndarray:
    """q (log q - log p) per list value, into ``out``; q = 0 contributes nothing (0 log 0 = 0), whatever p is."""
    np.subtract(slp, tlp, out=out)
    out *= q
    if not q.all():
        out[q == 0] = 0.0
    return out


@dataclass(frozen=True)
class ScoreCentering:
    """Per-token statistics a top-k-aware loss (score centering) needs (docs/analysis.md).

    K is the same set as the bounds': the sampler's listed ids, plus the sampled id when the list lacks it.
    """

    sampler_mass_T: np.ndarray
    """sum_K q."""
    trainer_mass_T: np.ndarray
    """sum_K p."""
    tail_ratio_T: np.ndarray
    """rho = (1 - sum_K q) / (1 - sum_K p) on tokens where both tails are non-empty, NaN elsewhere."""
    empty_sampler_tail_T: np.ndarray
    """bool: 1 - sum_K q < TAIL_EMPTY (rho undefined)."""
    empty_trainer_tail_T: np.ndarray
    overlap_T: np.ndarray | None
    """|K_s & K_t| / max(|K_s|, |K_t|) between the sampler's and the trainer's own top-k ids (NaN where both lists
    are empty); None without a trainer_topk_ids column."""


def score_centering(
    bounds: TopkBounds, sampler_topk_ids: pa.Array, trainer_topk_ids: pa.Array | None
) -> ScoreCentering:
    """The bounds' masses and tails (computed with them, in the same pass), and the two top-k sets' overlap."""
    overlap = None if trainer_topk_ids is None else topk_overlap(sampler_topk_ids, trainer_topk_ids)
    b = bounds
    return ScoreCentering(
        b.sampler_mass_T, b.trainer_mass_T, b.tail_ratio_T, b.empty_sampler_tail_T, b.empty_trainer_tail_T, overlap
    )


def topk_overlap(ids_a: pa.Array, ids_b: pa.Array) -> np.ndarray:
    """Per row, |A & B| / max(|A|, |B|) of two id lists (NaN where both are empty).

    Ids are compared as they are, never folded with their row into one integer
    key (``row * width + id`` overflows int64 once ids come near 2^63). A list
    may name an id twice; it counts once.
    """
    a, ends_a = _flat(ids_a, "sampler_topk_ids")
    b, ends_b = _flat(ids_b, "trainer_topk_ids")
    n_a, n_b = np.diff(ends_a), np.diff(ends_b)
    if n_a.size != n_b.size:  # pragma: no cover - both come from the same batch
        raise InputError("top-k id lists of different row counts")
    n = n_a.size
    if a.size and (a.min() < 0 or (b.size and b.min() < 0)):
        raise InputError("negative token ids in the top-k lists")
    a, b = a.astype(np.int64, copy=False), b.astype(np.int64, copy=False)
    if n and (n_a == n_a[0]).all() and (n_b == n_b[0]).all():
        both = _shared_fixed(a.reshape(n, int(n_a[0])), b.reshape(n, int(n_b[0])))
    else:
        both = _shared_ragged(a, n_a, b, n_b)
    k = np.maximum(n_a, n_b).astype(np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(k > 0, both / k, np.nan)


def _shared_fixed(a_NK: np.ndarray, b_NK: np.ndarray) -> np.ndarray:
    """Distinct ids two lists share, per row, when every row has k ids (what samplers write).

    Each row is sorted and its repeats replaced by a negative marker (ids are
    >= 0, so markers match nothing); in the sorted union of a row, an id then
    appears twice exactly when both lists hold it. Row-wise sorts of k values
    are ~50x faster than sorting the whole batch.
    """
    sa, sb = np.sort(a_NK, axis=1), np.sort(b_NK, axis=1)
    sa[:, 1:][sa[:, 1:] == sa[:, :-1]] = -1
    sb[:, 1:][sb[:, 1:] == sb[:, :-1]] = -2
    union = np.sort(np.concatenate([sa, sb], axis=1), axis=1)
    return ((union[:, 1:] == union[:, :-1]) & (union[:, 1:] >= 0)).sum(axis=1).astype(np.float64)


def _shared_ragged(a: np.ndarray, n_a: np.ndarray, b: np.ndarray, n_b: np.ndarray) -> np.ndarray:
    """:func:`_shared_fixed` for lists of any lengths: (row, id) pairs, sorted with ``np.lexsort``."""
    n = n_a.size
    row_a, id_a = _distinct_pairs(np.repeat(np.arange(n, dtype=np.int64), n_a), a)
    row_b, id_b = _distinct_pairs(np.repeat(np.arange(n, dtype=np.int64), n_b), b)
    rows, ids = np.concatenate([row_a, row_b]), np.concatenate([id_a, id_b])
    order = np.lexsort((ids, rows))
    rows, ids = rows[order], ids[order]
    twice = (rows[1:] == rows[:-1]) & (ids[1:] == ids[:-1])
    return np.bincount(rows[1:][twice], minlength=n)[:n].astype(np.float64)


def _distinct_pairs(row: np.ndarray, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The distinct (row, id) pairs, sorted by row then id."""
    order = np.lexsort((ids, row))
    row, ids = row[order], ids[order]
    new = np.ones(row.size, bool)
    new[1:] = (row[1:] != row[:-1]) | (ids[1:] != ids[:-1])
    return row[new], ids[new]
