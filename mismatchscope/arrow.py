"""Arrow arrays to numpy without the detour through pandas.

``pyarrow.Array.to_numpy`` imports pandas the first time it runs (about a
tenth of a second, a third of a small command's start-up). A column of
fixed-width numbers without nulls is already a numpy array in all but name:
its values buffer is viewed in place. Anything else (nulls, booleans,
dictionaries) takes pyarrow's own conversion.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

_DTYPES = {
    pa.int8(): np.int8,
    pa.int16(): np.int16,
    pa.int32(): np.int32,
    pa.int64(): np.int64,
    pa.uint8(): np.uint8,
    pa.uint16(): np.uint16,
    pa.uint32(): np.uint32,
    pa.uint64(): np.uint64,
    pa.float16(): np.float16,
    pa.float32(): np.float32,
    pa.float64(): np.float64,
}


def to_numpy(arr: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """The values of ``arr`` as a numpy array (a read-only view when no copy is needed)."""
    if isinstance(arr, pa.ChunkedArray):
        if arr.num_chunks == 1:
            return to_numpy(arr.chunk(0))
        return (
            np.concatenate([to_numpy(c) for c in arr.chunks])
            if arr.num_chunks
            else np.zeros(0, _DTYPES.get(arr.type, np.float64))
        )
    dtype = _DTYPES.get(arr.type)
    if dtype is None or arr.null_count:
        return arr.to_numpy(zero_copy_only=False)
    if len(arr) == 0:
        return np.zeros(0, dtype)
    return np.frombuffer(arr.buffers()[1], dtype=dtype, count=len(arr), offset=arr.offset * np.dtype(dtype).itemsize)
