"""The rows of the chosen sequences: one streaming pass that keeps only their tokens.

Each batch is cleaned as every pass cleans it (a row with a non-finite
logprob is in no number, so in no view) and filtered to the chosen ids before
anything is kept: memory grows with the chosen sequences, never with the run.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from ..arrow import from_numpy
from ..reader import Hygiene, Source, read_batches

OPTIONAL = (
    "prompt_id",
    "advantage",
    "turn",
    "turn_position",
    "sampler_topk_ids",
    "sampler_topk_logprobs",
    "trainer_logprobs_at_sampler_topk",
    "trainer_topk_ids",
    "trainer_topk_logprobs",
)
"""what a view shows where the run has it (the turns where the format has them)."""


@dataclass
class Rows:
    """One sequence's tokens in position order: numpy columns, and the top-k lists as Arrow arrays."""

    columns: dict[str, Any]

    def __getitem__(self, name: str) -> Any:
        return self.columns[name]

    def get(self, name: str) -> Any:
        return self.columns.get(name)

    @property
    def size(self) -> int:
        return int(self.columns["position"].size)


def read_rows(source: Source, ids: Sequence[int], batch_rows: int = 1 << 17) -> dict[int, Rows]:
    """The tokens of each sequence in ``ids`` (a sequence without a counted token is absent)."""
    wanted = np.unique(np.asarray(list(ids), dtype=np.int64))
    optional = [c for c in OPTIONAL if source.has(c)]
    parts: dict[str, list[Any]] = {}
    for raw in read_batches(source, optional, batch_rows):
        batch = raw.clean(Hygiene())
        keep = np.flatnonzero(np.isin(batch["sequence_id"], wanted))
        if not keep.size:
            continue
        for name, col in batch.items():
            parts.setdefault(name, []).append(_take(col, keep))
    if not parts:
        return {}
    cols = {name: _concat(chunks) for name, chunks in parts.items()}
    order = np.lexsort((cols["position"], cols["sequence_id"]))
    cols = {name: _take(col, order) for name, col in cols.items()}
    seq = cols["sequence_id"]
    starts = np.flatnonzero(np.concatenate(([True], seq[1:] != seq[:-1])))
    out = {}
    for a, b in zip(starts, [*starts[1:], seq.size], strict=True):
        out[int(seq[a])] = Rows({name: col[a:b] for name, col in cols.items()})
    return out


def _take(col: Any, idx: np.ndarray) -> Any:
    if isinstance(col, np.ndarray):
        return col[idx]
    return col.take(from_numpy(idx.astype(np.int64), pa.int64()))


def _concat(chunks: list[Any]) -> Any:
    if isinstance(chunks[0], np.ndarray):
        return np.concatenate(chunks)
    return pa.concat_arrays(chunks)
