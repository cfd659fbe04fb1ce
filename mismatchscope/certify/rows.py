"""``certify --full-vocab``: whole log-prob rows, compared through the digests ``probe --full-vocab`` records.

The selected token's bytes can agree while the rest of the row does not;
the row digests say whether each position's whole distribution has the same
float32 bytes on both sides, with no vocabulary-sized storage. Where rows
part, the first such position (in sequence and position order) is named
with the vocabulary id where its rows differ most and by how much.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import numpy as np

from ..documents import optional
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
    equal: bool = field(metadata={"doc": "every row's digests equal, and no row contradicting its digests"})
    first: RowPart | None
    """the first position (by sequence, then position) whose rows part; None when every row is equal."""
    inconsistent: int | None = field(
        default=None,
        metadata=optional(
            "rows whose digests are equal while their recorded largest difference is not 0 (the run "
            "contradicts itself); absent when there is none"
        ),
    )
    first_inconsistent: RowPart | None = field(
        default=None, metadata=optional("the first such row", with_field="inconsistent")
    )

    def detail(self) -> str:
        parts = []
        if self.first is not None:
            f = self.first
            parts.append(
                f"{self.differing:,} of {self.rows:,} whole rows differ; first at sequence {f.sequence_id} position "
                f"{f.position} (token {f.token_id}): vocabulary id {f.vocab_id} differs by {f.max_abs_diff:.3g}"
            )
        if self.first_inconsistent is not None:
            g = self.first_inconsistent
            parts.append(
                f"{self.inconsistent or 0:,} of {self.rows:,} rows have equal digests but a recorded largest difference "
                f"above 0 (first at sequence {g.sequence_id} position {g.position}: {g.max_abs_diff:.3g}): the row "
                "columns contradict each other"
            )
        return "; ".join(parts) or f"all {self.rows:,} whole rows byte-equal in float32"


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
    same = cols["sampler_row_digest"] == cols["trainer_row_digest"]
    differ = np.flatnonzero(~same)
    # equal digests are equal rows, whose largest difference the probe records as 0: anything else (a value, NaN)
    # means the columns were not written from the same rows
    contradict = np.flatnonzero(same & ~(cols["row_max_abs_diff"] == 0))
    n = int(cols["sequence_id"].size)
    return FullVocabResult(
        n,
        int(differ.size),
        differ.size == 0 and contradict.size == 0,
        _first_row(cols, differ),
        int(contradict.size) or None,
        _first_row(cols, contradict),
    )


def _first_row(cols: dict[str, np.ndarray], rows: np.ndarray) -> RowPart | None:
    """The first of ``rows`` by sequence, then position; None for none."""
    if not rows.size:
        return None
    i = rows[np.lexsort((cols["position"][rows], cols["sequence_id"][rows]))[0]]
    return RowPart(
        int(cols["sequence_id"][i]),
        int(cols["position"][i]),
        int(cols["token_id"][i]),
        int(cols["row_max_diff_id"][i]),
        float(cols["row_max_abs_diff"][i]),
    )
