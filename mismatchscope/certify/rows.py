"""``certify --full-vocab``: whole log-prob rows, compared through the digests ``probe --full-vocab`` records.

The selected token's bytes can agree while the rest of the row does not;
the row digests say whether each position's whole distribution has the same
float32 bytes on both sides, with no vocabulary-sized storage. Where rows
part, the first such position (in sequence and position order) is named
with the vocabulary id where its rows differ most and by how much.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np

from ..errors import UsageError
from ..probe.full_rows import COLUMNS


@dataclass(frozen=True)
class RowPart:
    sequence_id: int
    position: int
    token_id: int
    vocab_id: int
    max_abs_diff: float


@dataclass(frozen=True)
class FullVocabResult:
    rows: int
    differing: int
    equal: bool
    first: RowPart | None
    """the first position (by sequence, then position) whose rows part; None when every row is equal."""

    def detail(self) -> str:
        if self.first is None:
            return f"all {self.rows:,} whole rows byte-equal in float32"
        f = self.first
        return (
            f"{self.differing:,} of {self.rows:,} whole rows differ; first at sequence {f.sequence_id} position "
            f"{f.position} (token {f.token_id}): vocabulary id {f.vocab_id} differs by {f.max_abs_diff:.3g}"
        )


def full_vocab_check(path: str | os.PathLike) -> FullVocabResult:
    """Compare every position's two row digests; a run recorded without them is a usage error."""
    from ..reader import Hygiene, iter_batches, open_source

    source = open_source(path)
    missing = [c for c in COLUMNS if not source.has(c)]
    if missing:
        raise UsageError(
            f"{path}: no whole-row columns ({', '.join(missing)}): the run was recorded without them",
            hint="record with probe --sampler hf --full-vocab",
        )
    parts: dict[str, list[np.ndarray]] = {}
    for b in iter_batches(source, list(COLUMNS), Hygiene()):
        for c in ("sequence_id", "position", "token_id", *COLUMNS):
            parts.setdefault(c, []).append(np.asarray(b[c]))
    cols = {k: np.concatenate(v) for k, v in parts.items()}
    differ = np.flatnonzero(cols["sampler_row_digest"] != cols["trainer_row_digest"])
    first = None
    if differ.size:
        i = differ[np.lexsort((cols["position"][differ], cols["sequence_id"][differ]))[0]]
        first = RowPart(
            int(cols["sequence_id"][i]),
            int(cols["position"][i]),
            int(cols["token_id"][i]),
            int(cols["row_max_diff_id"][i]),
            float(cols["row_max_abs_diff"][i]),
        )
    return FullVocabResult(int(cols["sequence_id"].size), int(differ.size), differ.size == 0, first)
