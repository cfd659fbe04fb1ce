"""``Recorder``: write a training run's logprob pairs as it trains, one shard per step and rank.

    DIR/manifest.json                      written by rank 0: meta, world_size; "status"
                                           becomes "complete" when rank 0 closes
    DIR/ranks/rank-NNNN.json               each rank's own record: steps, rows, shards, "status"
    DIR/ranks/rank-NNNN.lock               each rank's writer lock (flock)
    DIR/index/tokens.rank-NNNN.jsonl       each rank's shard index: name, rows, size of every shard it wrote
    DIR/tokens/step-SSSSSS-rank-NNNN.parquet          the first add() of a step
    DIR/tokens/step-SSSSSS-rank-NNNN-part-PPPP.parquet further add()s of that step (micro-batches)

One process per rank writes the same directory without coordination: every
file a rank writes has its rank in the name, the lock is per rank (a second
process with the same rank is refused; other ranks are not affected), and
only rank 0 writes the manifest. The run is complete when the manifest and
every rank record say ``complete`` (``rundir.completion``).

``add()`` copies the masked tokens to host memory (``inputs.prepare``) and
queues them; one background thread encodes and writes each shard atomically
and then updates the rank record. The queue is bounded: when the writer falls
behind, ``add()`` waits for it (and says so once) instead of dropping data or
growing memory without bound.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import queue
import re
import sys
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from .. import rundir
from .._version import __version__
from ..analysis.summaries import write_token_shard
from ..documents import from_json, json_edge, optional, to_json
from ..errors import RecorderError, UsageError
from ..schema import COLUMNS, SCHEMA_VERSION, WRITE_OPTIONS
from .directory import check_recorder_directory
from .inputs import RecordedIds, StepBatch, prepare, strict_meta

SEQUENCE_ID_RANK_SHIFT = 40
"""generated sequence ids are ``rank << 40 | n``: unique across ranks and steps of a run."""
MAX_PENDING = 8
"""shards queued for the writer before ``add()`` waits (64 x 1024 tokens: ~5 MB each)."""


@dataclass(frozen=True, kw_only=True)
class RankRecord:
    """One rank's record, ``ranks/rank-NNNN.json``: what it wrote and whether it finished. Fields in the file's
    (sorted) key order, so the record read back is the one written."""

    next_sequence_id: int | None = field(default=None, metadata=optional("the next id this rank generates"))
    pid: int
    rank: int
    rows: int
    shards: int
    started: float
    status: str
    steps: list[int]
    updated: float | None = field(default=None, metadata=optional("when the last shard was written (epoch s)"))

    @classmethod
    def read(cls, data: dict[str, Any], **now: Any) -> RankRecord:
        """A record as written before (keys sorted), with the status, pid and start time of the process that opens it again."""
        return replace(from_json(cls, {k: data[k] for k in sorted(data)}), **now)


class Recorder:
    """Record ``(sampler, trainer)`` logprob pairs of every training step into a run directory.

    ``rank`` / ``world_size`` default to the ``RANK`` / ``WORLD_SIZE``
    variables torchrun sets (0 / unknown without them). ``meta`` (any JSON)
    goes into the manifest and every shard's metadata. ``resume=True`` adds
    to a rank's earlier records (a restarted job); a step recorded again
    replaces that rank's earlier shards of the step. ``provenance``: what
    each side ran, from ``mismatchscope.provenance(...)`` (rank 0 writes it
    into the manifest; ``mismatchscope provenance RUN`` shows it).
    """

    def __init__(
        self,
        path: str | os.PathLike,
        *,
        rank: int | None = None,
        world_size: int | None = None,
        meta: Mapping[str, Any] | None = None,
        resume: bool = False,
        max_pending: int = MAX_PENDING,
        routing: Any = None,
        provenance: Any = None,
    ):
        from .routes import routing_meta

        self.path = Path(path)
        self.provenance = _provenance_record(provenance)
        """what each side ran (``mismatchscope.provenance(...)``), written into the manifest by rank 0."""
        self.routing = routing_meta(routing)
        """the model's routing layout (``RoutingMeta`` or its dict): needed to record routes."""
        self._route_sides: set[str] = set()
        self.rank, self.world_size = _rank_and_world(rank, world_size)
        self.meta = strict_meta(meta)
        check_recorder_directory(self.path, path, resume=resume, world_size=self.world_size)
        self._take_rank(resume)
        self._next_seq = max(
            self._record.next_sequence_id or 0,
            self.rank << SEQUENCE_ID_RANK_SHIFT,
            self._max_sequence_id_on_disk() + 1 if resume else 0,
        )
        self._given_ids = RecordedIds()
        """sequence ids the caller passed since this Recorder opened (generated ones are unique by construction)."""
        self._parts: dict[int, int] = {}
        """step -> shards this Recorder has queued."""
        self._start_writer(max_pending)

    def _take_rank(self, resume: bool) -> None:
        """Lock this rank's part of the run and open its record (rank 0: the manifest too); a failure
        releases the lock."""
        self._tag = f"rank-{self.rank:04d}"
        self.record_path = self.path / rundir.RANKS / f"{self._tag}.json"
        self._index = rundir.ShardIndex(self.path, rundir.TOKENS, self._tag)
        self._lock = rundir.WriterLock(
            self.path / rundir.RANKS / f"{self._tag}.lock", f"{self.path} (rank {self.rank})"
        )
        try:
            self._record = self._open_record(resume)
            if self.rank == 0:
                self._write_manifest(rundir.RUNNING)
        except BaseException:
            self._lock.release()
            raise
        self._resumed = resume

    def _start_writer(self, max_pending: int) -> None:
        """The writer thread and its bounded queue: add() hands shards over, the thread writes them."""
        self._queue: queue.Queue = queue.Queue(maxsize=max(1, max_pending))
        self._error: BaseException | None = None
        self._warned_full = False
        self._closed = False
        self.wait_seconds = 0.0
        """time add() spent waiting for a full queue (back-pressure)."""
        self._thread = threading.Thread(
            target=self._write_loop, name=f"mismatchscope-recorder-{self.rank}", daemon=True
        )
        self._thread.start()
        atexit.register(self._drain_at_exit)

    # -- the caller's side ----------------------------------------------------------

    def add(
        self, step: int, sampler_logprobs: Any, trainer_logprobs: Any, mask: Any = None, **columns: Any
    ) -> StepBatch:
        """Record one batch of step ``step``: ``[B, T]`` logprobs and mask (torch on any device, or numpy).

        Optional keywords: ``advantages`` ([B] or [B, T]), ``rewards`` ([B]),
        ``sequence_ids`` ([B] ints; unique in the run, default generated),
        ``group_ids`` ([B] ints or strings: the prompt / GRPO group),
        ``token_ids`` ([B, T]; -1 is written without them), the three
        top-k columns ``sampler_topk_ids``, ``sampler_topk_logprobs``,
        ``trainer_logprobs_at_sampler_topk`` ([B, T, K]) together,
        ``sampler_steps`` ([B] ints: the policy version each rollout was generated with; recorded
        beside ``step`` as ``sampler_step``/``trainer_step`` for certify's policy-version check), and for
        an MoE model ``sampler_experts`` / ``trainer_experts`` ([B, T, L, k]
        expert ids per decoder layer, or per MoE layer; needs ``routing``), written to ``routes/``.
        Every call stamps its tokens with the wall clock (``wall_time``, Unix seconds, taken here, when
        the step hands its batch over); ``sampling_seconds``, ``training_seconds``, ``sampling_tokens``
        and ``training_tokens`` (the step's own measurements) are recorded beside it where given,
        for ``timeline --x wall``. ``training_forward_logprobs`` ([B, T]): the logprobs of the first
        training forward (the loss's own), the third value ``certify`` pairs with the other two.
        ``turn_ids`` ([B, T] ints): each token's assistant turn in a multi-turn rollout; without them a
        mask with several runs of 1s per row (tool output masked out between turns) gives the turns.
        Returns the host copy (the ``Monitor`` reads it).
        """
        from .inputs import STEP_TIMING_KEYS, StepTiming
        from .routes import check_experts

        self._check_usable()
        given_ids = columns.get("sequence_ids") is not None
        timing = StepTiming(time.time(), *(columns.pop(k, None) for k in STEP_TIMING_KEYS))
        batch = prepare(step, sampler_logprobs, trainer_logprobs, mask, timing=timing, **columns)
        if batch.experts:
            check_experts(batch, self.routing)
            if not batch.experts.keys() <= self._route_sides:
                self._route_sides |= batch.experts.keys()
                if self.rank == 0:
                    self._write_manifest(rundir.RUNNING)
        if given_ids:
            ids_B = np.unique(batch.columns["sequence_id"])
            self._given_ids.check(batch.step, ids_B)
            self._given_ids.add(batch.step, ids_B)
        else:
            rows = batch.columns["sequence_id"]
            batch.columns["sequence_id"] = rows + self._next_seq
            self._next_seq += batch.rows
        part = self._parts.get(batch.step, 0)
        self._parts[batch.step] = part + 1
        self._put((batch, part))
        return batch

    def flush(self) -> None:
        """Wait until every queued shard is on disk (raises the writer's error, if any)."""
        self._check_usable()
        while self._queue.unfinished_tasks and self._error is None:
            time.sleep(0.005)
        self._raise_writer_error()

    def close(self, status: str = rundir.COMPLETE) -> None:
        """Write what is queued, mark this rank's record (rank 0: the manifest) complete, release the lock."""
        if self._closed:
            return
        try:
            self._queue.put(None)
            self._thread.join()
            self._raise_writer_error()
            self._record = replace(self._record, status=status)
            rundir.atomic_write_json(self.record_path, to_json(self._record))
            if self.rank == 0:
                self._write_manifest(status)
        finally:
            self._closed = True
            self._lock.release()
            atexit.unregister(self._drain_at_exit)

    def _drain_at_exit(self) -> None:
        """An interpreter exiting without close(): write what is queued, leave the run incomplete."""
        if not self._closed and self._thread.is_alive():
            self._queue.put(None)
            self._thread.join()

    def __enter__(self) -> Recorder:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        # after an exception the shards written stay, but the run is not complete
        self.close(rundir.COMPLETE if exc_type is None else "failed")

    # -- internals -------------------------------------------------------------------

    def _open_record(self, resume: bool) -> RankRecord:
        self._remove_own_temporaries()
        old = rundir.read_json(self.record_path)
        if old is not None and not resume:
            raise UsageError(
                f"{self.path} already holds records of rank {self.rank} ({self.record_path.name})",
                hint="pass resume=True to add to them, or record into another directory",
            )
        now = {"status": rundir.RUNNING, "pid": os.getpid(), "started": time.time()}
        record = RankRecord.read(old, **now) if old else RankRecord(rank=self.rank, steps=[], rows=0, shards=0, **now)
        rundir.atomic_write_json(self.record_path, to_json(record))
        (self.path / rundir.TOKENS).mkdir(parents=True, exist_ok=True)
        if resume:  # a shard renamed into place just before a kill (or before runs kept an index) is the run's
            self._index.adopt(f"step-*-{self._tag}*.parquet")
            rundir.ShardIndex(self.path, rundir.ROUTES, self._tag).adopt(f"step-*-{self._tag}*.parquet")
        return record

    def _remove_own_temporaries(self) -> None:
        """Remove the half-written files a killed writer of this rank left (``rundir.atomic_path``'s
        ``.NAME.PID.tmp``). This rank holds its lock, so no live writer owns them; other ranks' are theirs
        (the manifest is rank 0's)."""
        own = rf"step-\d{{6,}}-{self._tag}(-part-\d{{4,}})?\.parquet|{self._tag}\.json"
        if self.rank == 0:
            own += rf"|{re.escape(rundir.MANIFEST)}"
        pattern = re.compile(rf"\.({own})\.\d+\.tmp")
        for folder in (self.path, *(self.path / f for f in (rundir.TOKENS, rundir.ROUTES, rundir.RANKS))):
            with contextlib.suppress(FileNotFoundError):
                for f in folder.iterdir():
                    if pattern.fullmatch(f.name) and f.is_file():
                        f.unlink(missing_ok=True)

    def _write_manifest(self, status: str) -> None:
        old = rundir.read_manifest(self.path) or {}
        manifest = {
            **old,
            "writer": "recorder",
            "schema_version": SCHEMA_VERSION,
            "mismatchscope_version": __version__,
            "meta": self.meta,
            "world_size": self.world_size,
            "status": status,
            "shard_index": rundir.INDEX_VERSION,
            "layout": "tokens/step-SSSSSS-rank-NNNN[-part-PPPP].parquet; ranks/rank-NNNN.json per rank",
        }
        manifest.setdefault("created", time.time())
        if self.provenance is not None:
            from ..execution.record import MANIFEST_KEY

            manifest[MANIFEST_KEY] = self.provenance
        if self.routing is not None:
            from ..routing.layout import MANIFEST_KEY, SideRoutes

            sides = {
                s: SideRoutes(
                    s in self._route_sides,
                    why=None if s in self._route_sides else f"no {s}_experts given to Recorder.add",
                )
                for s in ("sampler", "trainer")
            }
            manifest[MANIFEST_KEY] = replace(self.routing, **sides).to_dict()
        rundir.write_manifest(self.path, manifest)

    def _put(self, item: Any) -> None:
        try:
            self._queue.put_nowait(item)
            return
        except queue.Full:
            pass
        if not self._warned_full:
            self._warned_full = True
            print(
                f"mismatchscope: warning: the Recorder's writer is behind ({self._queue.maxsize} shards queued); "
                "add() waits for it rather than drop data (said once)",
                file=sys.stderr,
            )
        t0 = time.perf_counter()
        while True:
            self._raise_writer_error()
            try:
                self._queue.put(item, timeout=0.1)
                break
            except queue.Full:
                continue
        self.wait_seconds += time.perf_counter() - t0

    def _check_usable(self) -> None:
        if self._closed:
            raise RecorderError(f"the Recorder of {self.path} is closed")
        self._raise_writer_error()

    def _raise_writer_error(self) -> None:
        if self._error is not None:
            raise RecorderError(f"the Recorder could not write to {self.path}: {self._error}") from self._error

    def _write_loop(self) -> None:
        while True:
            item = self._queue.get()
            try:
                if item is None:
                    return
                if self._error is None:
                    self._write(*item)
            except BaseException as e:  # reported to the caller at its next call
                self._error = e
            finally:
                self._queue.task_done()

    def _write(self, batch: StepBatch, part: int) -> None:
        name = f"step-{batch.step:06d}-{self._tag}" + (f"-part-{part:04d}" if part else "")
        if part == 0:
            self._drop_earlier_shards(batch.step)
        meta = {"writer": "recorder", "rank": self.rank, "meta": self.meta, "mismatchscope_version": __version__}
        if batch.experts:
            self._write_routes(name, batch)
        cols = {k: _arrow(k, v) for k, v in batch.columns.items()}
        cols["rank"] = _flat(pa.int32(), np.full(batch.tokens, self.rank, np.int32))
        shard = write_token_shard(self.path / rundir.TOKENS / f"{name}.parquet", cols, meta)
        self._index.commit(shard, batch.tokens)
        r = self._record
        self._record = r = replace(
            r,
            steps=r.steps if batch.step in r.steps else [*r.steps, batch.step],
            rows=r.rows + batch.tokens,
            shards=r.shards + 1,
            next_sequence_id=self._next_seq,
            updated=time.time(),
        )
        rundir.atomic_write_json(self.record_path, to_json(r))

    def _write_routes(self, name: str, batch: StepBatch) -> None:
        """The batch's routes, written before its token shard: a token shard on disk always has its routes."""
        import pyarrow.parquet as pq

        from ..routing.layout import ROUTES
        from .routes import routes_table

        assert self.routing is not None  # add() refuses routes without it
        table = routes_table(self.routing, batch.columns["sequence_id"], batch.columns["position"], batch.experts or {})
        path = self.path / ROUTES / f"{name}.parquet"
        with rundir.atomic_path(path) as tmp:
            pq.write_table(table, tmp, **WRITE_OPTIONS)
        rundir.ShardIndex(self.path, ROUTES, self._tag).commit(path, table.num_rows)

    def _shards_on_disk(self, step: int | None = None) -> list[Path]:
        head = "step-*" if step is None else f"step-{step:06d}"
        return sorted((self.path / rundir.TOKENS).glob(f"{head}-{self._tag}*.parquet"))

    def _drop_earlier_shards(self, step: int) -> None:
        """A step recorded again after a resume replaces what this rank wrote for it before.

        The files on disk are the truth, not the rank record: a job killed
        between a shard's rename and the record's update leaves a shard the
        record does not list.
        """
        if self._resumed:
            for f in self._shards_on_disk(step):
                self._index.forget(f)
                f.unlink()
            routes = rundir.ShardIndex(self.path, rundir.ROUTES, self._tag)
            for f in sorted((self.path / rundir.ROUTES).glob(f"step-{step:06d}-{self._tag}*.parquet")):
                routes.forget(f)
                f.unlink()

    def _max_sequence_id_on_disk(self) -> int:
        """The largest sequence id in this rank's shards, from their footers (-1 when none)."""
        import pyarrow.parquet as pq

        top = -1
        for f in self._shards_on_disk():
            md = pq.ParquetFile(f).metadata
            j = md.schema.names.index("sequence_id")
            for g in range(md.num_row_groups):
                st = md.row_group(g).column(j).statistics
                if st is not None and st.has_min_max:
                    top = max(top, int(st.max))
        return top


@json_edge
def _provenance_record(value: Any) -> dict[str, Any] | None:
    """The manifest's provenance entry for what ``Recorder(provenance=...)`` was given (checked now, not at close)."""
    if value is None:
        return None
    from ..execution.collect import record_of
    from ..execution.record import to_record

    return to_record(record_of(value))


def _rank_and_world(rank: int | None, world_size: int | None) -> tuple[int, int | None]:
    """This process's rank and the number of ranks (torchrun's ``RANK`` / ``WORLD_SIZE`` when not given), checked."""
    rank = int(os.environ.get("RANK", 0)) if rank is None else int(rank)
    env_world = os.environ.get("WORLD_SIZE")
    world_size = world_size if world_size is not None else (int(env_world) if env_world else None)
    if world_size is not None and (isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1):
        raise UsageError(
            f"world_size must be a positive integer (the number of ranks), got {world_size!r}",
            hint="leave it out to read WORLD_SIZE, or pass the number of processes writing the run",
        )
    if rank < 0 or (world_size is not None and not 0 <= rank < world_size):
        raise UsageError(f"rank {rank} is not in [0, {world_size})" if world_size else f"rank must be >= 0, got {rank}")
    return rank, world_size


def _arrow(name: str, values: np.ndarray) -> pa.Array:
    """numpy -> Arrow without pandas; ``[N, K]`` top-k arrays become fixed-length lists."""
    typ = COLUMNS[name].type
    if values.ndim == 2:
        n, k = values.shape
        inner = _flat(typ.value_type, values.reshape(-1))
        return pa.ListArray.from_arrays(_flat(pa.int32(), np.arange(0, n * k + 1, k, dtype=np.int32)), inner)
    return _flat(typ, values)


def _flat(typ: pa.DataType, values: np.ndarray) -> pa.Array:
    # from_buffers, not pa.array(ndarray): the latter imports pandas (~0.5 s) to ask if it was given a pandas object
    values = np.ascontiguousarray(values, dtype=typ.to_pandas_dtype())
    return pa.Array.from_buffers(typ, len(values), [None, pa.py_buffer(values)])
