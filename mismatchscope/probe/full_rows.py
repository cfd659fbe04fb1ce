"""``probe --full-vocab``: each side's whole log-probability row, kept as a digest and its largest difference.

The sampled token's logprob can agree while the rest of the distribution
does not (a different top-k, another rounding of a token that was not
drawn). Comparing whole rows on disk would store ``tokens x vocabulary``
floats; instead each side's row (float32 bytes, the values it computed) is
hashed per position, and where both rows are in memory at scoring time the
probe keeps the largest absolute difference and its vocabulary id. Equal
digests are equal rows (a 64-bit BLAKE2b prefix: a chance collision is
``2^-64`` per position); a differing digest names the position, and the
recorded id says where in the row it parts.

Memory: the sampler's rows of one scoring shard are held until the trainer
scores it, ``4 x vocabulary`` bytes per token (1.3 KB at the bundled
vocabulary of 320; 600 KB at a 150k vocabulary, so 300 MB for 512 tokens).
"""

from __future__ import annotations

import hashlib

import numpy as np

COLUMNS = ("sampler_row_digest", "trainer_row_digest", "row_max_abs_diff", "row_max_diff_id")
"""the token columns it writes (``mismatchscope.schema``)."""


def row_digest(rows: np.ndarray) -> np.ndarray:
    """[n] int64: a 64-bit BLAKE2b digest of each row's float32 bytes."""
    rows = np.ascontiguousarray(rows, dtype=np.float32)
    out = np.empty(rows.shape[0], np.int64)
    for i, row in enumerate(rows):
        out[i] = int.from_bytes(hashlib.blake2b(row.tobytes(), digest_size=8).digest(), "little", signed=True)
    return out


def row_columns(sampler_rows: np.ndarray, trainer_rows: np.ndarray) -> dict[str, np.ndarray]:
    """The four columns for ``n`` positions of ``[n, vocab]`` float32 rows from each side.

    The difference is taken in float64 of the float32 values; two equal
    values (``-inf`` on both sides included) differ by 0, so a row whose
    bytes are equal has a largest difference of 0 at id 0.
    """
    a = np.asarray(sampler_rows, np.float32)
    b = np.asarray(trainer_rows, np.float32)
    if a.shape != b.shape:
        raise ValueError(f"the sampler's rows are {a.shape} and the trainer's {b.shape}")
    same = a.view(np.int32) == b.view(np.int32)
    with np.errstate(invalid="ignore"):
        diff = np.where(same, 0.0, np.abs(a.astype(np.float64) - b.astype(np.float64)))
    diff = np.where(np.isnan(diff), np.inf, diff)  # one side NaN: as far apart as it gets
    ids = np.argmax(diff, axis=1) if a.shape[0] else np.empty(0, np.int64)
    return {
        "sampler_row_digest": row_digest(a),
        "trainer_row_digest": row_digest(b),
        "row_max_abs_diff": diff[np.arange(a.shape[0]), ids] if a.shape[0] else np.empty(0),
        "row_max_diff_id": ids.astype(np.int64),
    }
