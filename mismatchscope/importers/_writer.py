"""The shared output side of every importer: buffered Parquet shards and a manifest.

Importers hand over one sequence at a time (or a vectorised batch); the writer
assigns run-wide unique ``sequence_id``s, buffers numpy arrays and flushes a
shard to ``OUT/tokens/part-XXXXX.parquet`` through ``analysis.summaries.write_token_shard``
(the top-k summaries computed beside the lists) every ~1M tokens. The Parquet encode and write run on one background thread
(pyarrow releases the GIL), so parsing the next file overlaps with it; at most
one shard is in flight, so memory stays flat in the length of the run.

Each shard is listed in the run's shard index (``OUT/index/tokens.jsonl``:
name, rows, size) once it is in place, so every reader can tell a lost or a
foreign shard. ``OUT/manifest.json`` is written last with ``"status": "complete"`` (the
``rundir`` completion record): an output without it is incomplete.
"""

from __future__ import annotations

from collections.abc import Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from .. import rundir
from .._version import __version__
from ..analysis.summaries import write_token_shard
from ..schema import COLUMNS, REQUIRED_NAMES, SCHEMA_VERSION, TURN_COLUMNS

FLUSH_TOKENS = 1_000_000
SHARD_DIR = rundir.TOKENS
MANIFEST = rundir.MANIFEST

_DTYPES = {
    name: np.dtype(col.type.to_pandas_dtype()) for name, col in COLUMNS.items() if not str(col.type).startswith("list")
}


class ShardWriter:
    """Buffer token rows in preallocated column arrays and write them as numbered shards.

    Two buffer sets alternate: one fills while the other is being written, so
    no per-sequence arrays stay alive and memory is two shards' worth at most.

    The turn columns are buffered for every import and written only in a shard that holds a sequence of
    more than one turn (``schema.TURN_COLUMNS``): a sequence without them is one turn (``turn`` 0,
    ``turn_position`` its position), and an import of single turns is written as it always was.
    """

    def __init__(
        self, out: Path, columns: tuple[str, ...], metadata: Mapping[str, Any], flush_tokens: int = FLUSH_TOKENS
    ):
        unknown = [c for c in columns if c not in _DTYPES]
        if unknown:
            raise ValueError(f"not scalar schema columns: {unknown}")
        self.out = Path(out)
        self.columns = tuple(dict.fromkeys(REQUIRED_NAMES + tuple(columns)))
        """the columns written so far (the turn columns join once a shard holds several turns)."""
        self._buffered = tuple(dict.fromkeys(self.columns + TURN_COLUMNS))
        self.metadata = dict(metadata)
        self.flush_tokens = flush_tokens
        self.shards: list[Path] = []
        self.next_sequence_id = 0
        self.tokens_written = 0
        self._sets: list[dict[str, np.ndarray] | None] = [None, None]
        self._current = 0
        self._filled = 0
        self._buf_files: dict[str, None] = {}
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="mismatchscope-shard")
        self._pending: Future | None = None
        self._index = rundir.ShardIndex(self.out, SHARD_DIR)

    # -- input -----------------------------------------------------------------
    def add_sequence(self, source: str, values: Mapping[str, Any]) -> int:
        """Add one sequence's kept tokens; returns its ``sequence_id``.

        ``values`` holds ``token_id``, ``sampler_logprob``, ``trainer_logprob``
        as equal-length arrays and every other column as an array of that
        length or a scalar (repeated on each token). ``sequence_id`` (a scalar)
        and ``position`` are filled in unless given.
        """
        n = len(values["token_id"])
        seq_id = int(values.get("sequence_id", self.next_sequence_id))
        self.next_sequence_id = max(self.next_sequence_id, seq_id + 1)
        cols = dict(values)
        cols["sequence_id"] = seq_id
        if "position" not in cols:
            cols["position"] = _positions(n)
        if "turn" not in cols:  # one turn: its positions are its turn positions
            cols["turn"], cols["turn_position"] = 0, cols["position"]
        self._add(source, n, cols)
        return seq_id

    def add_batch(self, source: str, columns: Mapping[str, np.ndarray]) -> None:
        """Add many sequences at once: every column given as a full-length array."""
        n = len(columns["token_id"])
        if n:
            self.next_sequence_id = max(self.next_sequence_id, int(np.max(columns["sequence_id"])) + 1)
        if "turn" not in columns:
            columns = {**columns, "turn": np.zeros(n, np.int32), "turn_position": columns["position"]}
        self._add(source, n, columns)

    def allocate_sequence_ids(self, count: int) -> np.ndarray:
        """Reserve ``count`` consecutive new sequence ids (for :meth:`add_batch`)."""
        ids = np.arange(self.next_sequence_id, self.next_sequence_id + count, dtype=np.int64)
        self.next_sequence_id += count
        return ids

    def _add(self, source: str, n: int, cols: Mapping[str, Any]) -> None:
        for name in self._buffered:  # check before copying anything
            v = cols[name]
            if isinstance(v, np.ndarray) and len(v) != n:
                raise ValueError(f"column {name!r} has {len(v)} values for {n} tokens")
        self._buf_files[source] = None
        done = 0
        while done < n:  # a sequence may straddle two shards; rows of a sequence need not be contiguous
            buf = self._buffers()
            take = min(n - done, self.flush_tokens - self._filled)
            a = self._filled
            for name in self._buffered:
                v = cols[name]
                buf[name][a : a + take] = v[done : done + take] if isinstance(v, np.ndarray) else v
            self._filled += take
            done += take
            if self._filled >= self.flush_tokens:
                self.flush()
                if done < n:
                    self._buf_files[source] = None
        self.tokens_written += n

    def _buffers(self) -> dict[str, np.ndarray]:
        buf = self._sets[self._current]
        if buf is None:
            buf = {name: np.empty(self.flush_tokens, dtype=_DTYPES[name]) for name in self._buffered}
            self._sets[self._current] = buf
        return buf

    # -- output ----------------------------------------------------------------
    def flush(self) -> None:
        """Hand the filled buffer to the background writer and switch to the other set."""
        if not self._filled:
            return
        buf = self._buffers()
        turns = bool(buf["turn"][: self._filled].any())
        if turns and "turn" not in self.columns:
            self.columns += TURN_COLUMNS
        columns = {
            name: _arrow(arr[: self._filled], name) for name, arr in buf.items() if turns or name not in TURN_COLUMNS
        }
        meta = dict(self.metadata)
        meta["source"] = {**meta.get("source", {}), "files": list(self._buf_files)}
        path = self.out / SHARD_DIR / f"part-{len(self.shards):05d}.parquet"
        self._wait()  # the other set's write: after it, that set is free to refill
        self._pending = self._pool.submit(self._write_shard, path, columns, meta, self._filled)
        self.shards.append(path)
        self._filled = 0
        self._buf_files = {}
        self._current = 1 - self._current

    def _write_shard(self, path: Path, columns: dict[str, pa.Array], meta: dict[str, Any], rows: int) -> None:
        write_token_shard(path, columns, meta)
        self._index.commit(path, rows)

    def _wait(self) -> None:
        if self._pending is not None:
            pending, self._pending = self._pending, None
            pending.result()

    def close(self) -> list[Path]:
        """Flush what is left and wait for the last shard; returns the shard paths."""
        try:
            self.flush()
            self._wait()
        finally:
            self._pool.shutdown(wait=True)
            self._sets = [None, None]
        return self.shards

    def abort(self) -> None:
        """Stop without flushing (after an error); the shards already written stay."""
        try:
            self._wait()
        except Exception:  # the original error matters more
            pass
        self._pool.shutdown(wait=True)
        self._sets = [None, None]


_ARANGE = np.arange(1 << 16, dtype=np.int32)


def _positions(n: int) -> np.ndarray:
    return _ARANGE[:n] if n <= len(_ARANGE) else np.arange(n, dtype=np.int32)


def _arrow(values: np.ndarray, name: str) -> pa.Array:
    """Zero-copy numpy -> Arrow. (``pa.array(ndarray)`` would first import pandas,
    ~0.5 s once per process, only to ask whether the array is a pandas object.)"""
    values = np.ascontiguousarray(values, dtype=_DTYPES[name])
    return pa.Array.from_buffers(COLUMNS[name].type, len(values), [None, pa.py_buffer(values)])


def check_output_dir(out: Path) -> None:
    """Refuse to mix a new import into an earlier one's shards."""
    from ..errors import UsageError

    shards = out / SHARD_DIR
    if (out / MANIFEST).exists() or (shards.is_dir() and any(shards.iterdir())):
        raise UsageError(
            f"{out} already holds an import (tokens/ or manifest.json)", hint="pass an empty or new --out directory"
        )


def write_manifest(out: Path, payload: Mapping[str, Any]) -> Path:
    """Write ``OUT/manifest.json`` atomically, after the last shard: its ``status`` marks the import complete."""
    body = {
        "schema_version": SCHEMA_VERSION,
        "mismatchscope_version": __version__,
        **payload,
        "shard_index": rundir.INDEX_VERSION,
        "status": rundir.COMPLETE,
    }
    return rundir.write_manifest(out, body)
