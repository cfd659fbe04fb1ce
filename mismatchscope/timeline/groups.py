"""``timeline --by COLUMN``: which column splits the lines, and its values as small dense group codes.

A schema column (``--by rank``, or a column mapped onto one) is read as
numpy; any other column of the file (``--by env``) is read raw, as arrow,
and dictionary-encoded. Either way the codes are stable across batches, so a
group's rows from every batch meet in one ``(step, group)`` key.

``--by entropy`` splits by the trainer's entropy in report's buckets: a gap
that grows over the steps while each bucket's stays flat is the policy
sharpening (tokens moving into other buckets), not a regression; doctor's
``sharpening`` reads the same.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from ..arrow import to_numpy
from ..errors import UsageError
from ..reader import Source
from ..schema import COLUMNS

MAX_GROUPS = 64
"""``--by`` splits lines by a categorical column; more distinct values than this is an error."""


ENTROPY = "entropy"
"""``--by entropy``: the trainer's entropy (``trainer_entropy``) in report's buckets."""


def resolve_by(source: Source, by: str | None) -> tuple[str | None, str | None]:
    """(canonical column, raw column): which way ``--by`` is read; at most one is set."""
    if by is None:
        return None, None
    if by == ENTROPY and not source.has(ENTROPY):
        if not source.has("trainer_entropy"):
            raise UsageError(
                "--by entropy: the input has no trainer_entropy column (the trainer's entropy at each position)",
                hint="record it (probe and the Recorder do), or map yours with --column trainer_entropy=NAME",
            )
        return "trainer_entropy", None
    if by in COLUMNS and source.has(by):
        return by, None
    mapped = [c for c, src in source.mapping.items() if src == by and source.has(c)]
    if mapped:
        return mapped[0], None
    if by in source.file_columns and by not in COLUMNS:
        return None, by
    if by == "turn":  # a run of single turns: no column to list, one sentence
        raise UsageError(
            "--by turn: the input has no turn column (its sequences are one turn each)",
            hint="multi-turn runs carry turn and turn_position (docs/multi-turn.md)",
        )
    shown = ", ".join(sorted(source.file_columns)[:30])
    raise UsageError(
        f"--by {by}: no column {by!r} in every input file; the files have: {shown}",
        hint="name a categorical column of the file, e.g. --by env or --by rank",
    )


def group_codes(by: str | None, canonical: str | None) -> GroupCodes | EntropyBuckets:
    """The group coder ``--by`` needs: entropy buckets for ``--by entropy``, else the column's own values."""
    if by == ENTROPY and canonical == "trainer_entropy":
        return EntropyBuckets()
    return GroupCodes(by, canonical)


class EntropyBuckets:
    """Trainer entropy -> report's entropy buckets, labelled as report labels them."""

    def __init__(self) -> None:
        from ..analysis.tokenstats import entropy_bucket_labels

        self.labels = entropy_bucket_labels()

    @property
    def values(self) -> list[Any]:
        """The buckets with tokens, in bucket order (the codes are bucket indices)."""
        return list(self.labels)

    def encode(self, col: Any) -> np.ndarray:
        from ..analysis.tokenstats import ENTROPY_EDGES, bucket_index

        values = np.asarray(col, dtype=np.float64)
        return bucket_index(np.nan_to_num(values, nan=0.0), ENTROPY_EDGES).astype(np.int64)


class GroupCodes:
    """Values of the ``--by`` column -> small dense group indices, stable across batches."""

    def __init__(self, by: str | None, canonical: str | None = None):
        self.by = by
        self.canonical = canonical
        self.values: list[Any] = []
        self._index: dict[Any, int] = {}

    def _code(self, value: Any) -> int:
        if value not in self._index:
            if len(self.values) >= MAX_GROUPS:
                raise UsageError(
                    f"--by {self.by}: more than {MAX_GROUPS} distinct values",
                    hint="--by splits the lines by a categorical column (an env name, a rank); "
                    "pick one with few values",
                )
            self._index[value] = len(self.values)
            self.values.append(value)
        return self._index[value]

    def encode(self, col: Any) -> np.ndarray:
        if isinstance(col, np.ndarray):  # a schema column, already numpy
            if not np.issubdtype(col.dtype, np.integer):
                raise UsageError(
                    f"--by {self.by}: the column holds {col.dtype} values, not categories",
                    hint="--by needs strings, integers or booleans",
                )
            uniq, inv = np.unique(col, return_inverse=True)
            lut = np.array([self._code(int(v)) for v in uniq], np.int64)
            return lut[inv.reshape(-1)]
        arr: pa.Array = col
        if not pa.types.is_dictionary(arr.type):
            t = arr.type
            if not (
                pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_integer(t) or pa.types.is_boolean(t)
            ):
                raise UsageError(
                    f"--by {self.by}: the column holds {t} values, not categories",
                    hint="--by needs strings, integers or booleans",
                )
            arr = arr.dictionary_encode()
        lut = np.array(
            [self._code(v) for v in arr.dictionary.to_pylist()] + [self._code(None) if arr.null_count else 0], np.int64
        )
        idx = to_numpy(arr.indices.fill_null(len(lut) - 1)).astype(np.int64)
        return lut[idx]
