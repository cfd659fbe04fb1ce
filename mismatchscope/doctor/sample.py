"""The rows the detectors look at: every token of a sample of whole sequences, gathered during report's pass.

The detectors need sequences in position order (a shift, a misjoined
sequence, padding at the ends) and per-position top-k fits; none needs
every token of a 10-million-token file to decide. So ``report``'s one
streaming pass hands each batch to :class:`SampleCollector`, which keeps the
rows of the sequences a hash of ``sequence_id`` picks (the same sequences
whatever the batch or shard layout, all of them in a file up to
:data:`SAMPLE_ROWS` rows) and, for each kept row, the few numbers the top-k
fits need, so the lists themselves are not kept.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from ..arrow import list_offsets, to_numpy
from ..schema import ROW_SUMS

SAMPLE_ROWS = 1 << 19
"""rows kept at most (about: whole sequences are kept): about 60 MB of columns and a second of detectors at
most; half a million tokens decide every detector's statistic far beyond its threshold's noise."""

_HASH = np.uint64(0x9E3779B97F4A7C15)
"""Fibonacci hashing of the sequence id: consecutive ids spread evenly over the 32-bit range."""

SCALARS = ("sequence_id", "position", "token_id", "trainer_logprob", "sampler_logprob")
OPTIONAL_SCALARS = (
    "advantage",
    "reward",
    "trainer_entropy",
    "step",
    "sampler_step",
    "trainer_step",
    "turn",
    "turn_position",
    "trainer_token_id",
)
TOPK = ("sampler_topk_logprobs", "trainer_logprobs_at_sampler_topk")
TOPK_FIELDS = ("k_n", "k_sx", "k_sy", "k_sxx", "k_sxy", "k_syy", "k_cut")
"""per kept row, over the listed ids where both sides are finite: their count, the sums of the trainer's (x)
and the sampler's (y) logprobs, of x^2, x*y and y^2; and ``k_cut``, the listed ids the sampler gives -inf
and the trainer a finite logprob (a truncated set)."""


REPORT_SAMPLE_ROWS = 1 << 18
"""the smaller sample ``report`` uses for its one line, so the line costs it a fraction of a second."""


def keep_threshold(total_rows: int, cap: int = SAMPLE_ROWS) -> int:
    """Sequences whose 32-bit hash is below this are kept: all of them up to ``cap`` rows."""
    if total_rows <= cap:
        return 1 << 32
    return max(1, int((1 << 32) * cap / total_rows))


def kept(sequence_id: np.ndarray, threshold: int) -> np.ndarray:
    """Whether each row's sequence is in the sample."""
    if threshold >= 1 << 32:
        return np.ones(sequence_id.shape, dtype=bool)
    with np.errstate(over="ignore"):
        h = (sequence_id.astype(np.uint64) * _HASH) >> np.uint64(32)
    return h < np.uint64(threshold)


def _lists(arr: pa.Array, idx: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """The float values of list column ``arr`` at rows ``idx`` (all rows for None), flattened, and each list's
    length. Gathered with numpy from the offsets: ``Array.take`` would import ``pyarrow.compute``, about a
    second of a command's start-up."""
    flat, offsets = list_offsets(arr)
    values = to_numpy(flat).astype(np.float64, copy=False)
    if idx is None:
        return values, np.diff(offsets)
    starts, lengths = offsets[idx], offsets[idx + 1] - offsets[idx]
    at = np.repeat(starts - np.r_[0, np.cumsum(lengths)[:-1]], lengths) + np.arange(int(lengths.sum()))
    return values[at], lengths


def topk_sums(sampler: pa.Array, trainer: pa.Array, idx: np.ndarray | None = None) -> dict[str, np.ndarray]:
    """The :data:`TOPK_FIELDS` of the rows ``idx`` (None: every row) of two aligned top-k logprob lists."""
    y, lengths = _lists(sampler, idx)
    x, x_lengths = _lists(trainer, idx)
    n_rows = lengths.size
    if x.size != y.size or not np.array_equal(lengths, x_lengths):
        return {k: np.zeros(n_rows) for k in TOPK_FIELDS}  # misaligned lists: the report refuses them itself
    row = np.repeat(np.arange(n_rows), lengths)
    both = np.isfinite(x) & np.isfinite(y)
    cut = np.isneginf(y) & np.isfinite(x)
    xb, yb = np.where(both, x, 0.0), np.where(both, y, 0.0)

    def per_row(v: np.ndarray) -> np.ndarray:
        return np.bincount(row, weights=v, minlength=n_rows)

    return {
        "k_n": per_row(both.astype(np.float64)),
        "k_sx": per_row(xb),
        "k_sy": per_row(yb),
        "k_sxx": per_row(xb * xb),
        "k_sxy": per_row(xb * yb),
        "k_syy": per_row(yb * yb),
        "k_cut": per_row(cut.astype(np.float64)),
    }


def _rows(v: np.ndarray, idx: np.ndarray | None) -> np.ndarray:
    """The rows ``idx`` (None: all) of a summary column, widened to float64 (only the rows kept)."""
    return np.array(v if idx is None else v[idx], dtype=np.float64)


@dataclass
class Sample:
    """The kept rows, sorted by (sequence_id, position): column name -> array."""

    columns: dict[str, np.ndarray]
    rows_seen: int
    sampled: bool
    """True when only some sequences were kept (a large file)."""

    def has(self, name: str) -> bool:
        return name in self.columns

    def __len__(self) -> int:
        return int(self.columns["sequence_id"].size)


class SampleCollector:
    """``on_terms`` of report's pass: keeps the sample's rows, in any batch order, sorted at the end."""

    def __init__(self, total_rows: int, cap: int = SAMPLE_ROWS) -> None:
        self.threshold = keep_threshold(total_rows, cap)
        self.parts: list[dict[str, np.ndarray]] = []
        self.rows_seen = 0

    def add(self, _terms, batch: dict) -> None:
        seq = batch["sequence_id"]
        self.rows_seen += int(seq.size)
        mask = kept(seq, self.threshold)
        idx = None if mask.all() else np.flatnonzero(mask)
        if idx is not None and not idx.size:
            return
        part: dict[str, np.ndarray] = {}
        for name in SCALARS + OPTIONAL_SCALARS:
            if name in batch:
                v = np.asarray(batch[name])
                part[name] = v.copy() if idx is None else v[idx]
        if all(name in batch for name in ROW_SUMS):  # the run's summaries: the sums were kept when it was written
            part.update({k: _rows(batch[c], idx) for k, c in zip(TOPK_FIELDS, ROW_SUMS, strict=True)})
        elif all(name in batch for name in TOPK):
            part.update(topk_sums(batch[TOPK[0]], batch[TOPK[1]], idx))
        self.parts.append(part)

    def finish(self) -> Sample:
        names = set.intersection(*(set(p) for p in self.parts)) if self.parts else set(SCALARS)
        cols = {n: np.concatenate([p[n] for p in self.parts]) if self.parts else np.zeros(0) for n in names}
        if self.parts:
            order = np.lexsort((cols["position"], cols["sequence_id"]))
            cols = {n: v[order] for n, v in cols.items()}
        return Sample(cols, self.rows_seen, self.threshold < 1 << 32)
