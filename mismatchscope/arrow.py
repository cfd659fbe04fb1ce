"""Arrow arrays to numpy and back without the detour through pandas.

``pyarrow.Array.to_numpy`` imports pandas the first time it runs (about a
tenth of a second, a third of a small command's start-up), and so does
``pyarrow.array`` on anything, a numpy array included. A column of
fixed-width numbers without nulls is already a numpy array in all but name:
its values buffer is viewed in place, one way (:func:`to_numpy`) or the other
(:func:`from_numpy`). Anything else (nulls, booleans, dictionaries) takes
pyarrow's own conversion.
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


def from_numpy(values: np.ndarray, type: pa.DataType, valid: np.ndarray | None = None) -> pa.Array:
    """``values`` (fixed-width numbers) as an Arrow array of ``type``, its buffer shared; ``valid``: where the
    values hold (the rest are null)."""
    values = np.ascontiguousarray(values, dtype=_DTYPES[type])
    bitmap = None if valid is None else pa.py_buffer(np.packbits(valid, bitorder="little"))
    nulls = -1 if valid is None else int(values.size - np.count_nonzero(valid))
    return pa.Array.from_buffers(type, values.size, [bitmap, pa.py_buffer(values)], null_count=nulls)


def strings(values: tuple[str, ...] | list[str]) -> pa.Array:
    """A small string array (a dictionary's values) built from its buffers."""
    data = [v.encode() for v in values]
    offsets = np.cumsum([0, *map(len, data)], dtype=np.int32)
    return pa.Array.from_buffers(pa.string(), len(data), [None, pa.py_buffer(offsets), pa.py_buffer(b"".join(data))])


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


def list_parts(arr: pa.Array | pa.ChunkedArray) -> tuple[pa.Array, np.ndarray]:
    """The values of a list array without null lists, flattened, and the length of each list.

    What ``pyarrow.compute.list_flatten`` and ``list_value_length`` return, read from the array's
    offsets instead: importing ``pyarrow.compute`` costs a command about 40 ms of start-up.
    """
    flat, offsets = list_offsets(arr)
    return flat, np.diff(offsets)


def list_offsets(arr: pa.Array | pa.ChunkedArray) -> tuple[pa.Array, np.ndarray]:
    """The values of a list array without null lists, flattened, and where each list starts in them: n + 1
    offsets from 0 (list i is ``flat[offsets[i]:offsets[i + 1]]``), in the array's own integer type.

    The offsets of a sliced array start at the slice; its ``values`` are the whole child, sliced here to
    match. A caller that needs only the values, or the lists' ends, skips :func:`list_parts`' differences.
    """
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    offsets = to_numpy(arr.offsets)  # pyright: ignore[reportAttributeAccessIssue] - a list array
    if not offsets.size:  # an empty array may come without an offsets buffer
        return arr.values.slice(0, 0), np.zeros(1, offsets.dtype)  # pyright: ignore[reportAttributeAccessIssue]
    start, end = int(offsets[0]), int(offsets[-1])
    flat = arr.values.slice(start, end - start)  # pyright: ignore[reportAttributeAccessIssue]
    return flat, (offsets - offsets[0] if start else offsets)
