"""The probe's writer: the run directory a probe or a rescore leaves on disk, written as work completes.

    DIR/manifest.json        configuration, versions, devices, timings; "status"
                             becomes "complete" only after the last flush
    DIR/prompts.parquet      prompt_id, prompt_token_ids, text, answer
    DIR/samples/round-*.parquet   the sampler's raw completions (for resume and rescore)
    DIR/samples/turns/round-*-turn-*.parquet   probe --turns: each turn as it is sampled (for resume)
    DIR/tokens/part-*.parquet     token pairs in the analysis format
    DIR/routes/part-*.parquet     MoE routes of both sides (mismatchscope.routing.layout)
    DIR/index/tokens.jsonl   the shard index: each token shard's name, rows and size (routes.jsonl: route shards)

    DIR/.lock                the writer lock: one process writes the directory at a time

Layout, manifest and atomic writes follow :mod:`mismatchscope.rundir`: every
file is written to a temporary name and renamed, so a killed probe leaves only
whole files behind, and ``--resume`` can trust what it finds.
"""

from __future__ import annotations

import contextlib
import platform
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

import pyarrow as pa
import pyarrow.parquet as pq

from .. import rundir
from ..analysis.summaries import write_token_shard
from ..documents import json_edge
from ..errors import UsageError
from .types import Completion

MANIFEST = rundir.MANIFEST
T = TypeVar("T")
SHARD_TOKENS = 200_000
"""completion tokens per trainer call and token shard: the unit of progress a resume keeps."""

_SAMPLE_SCHEMA = pa.schema(
    [
        ("prompt_index", pa.int64()),
        ("sample_index", pa.int32()),
        ("token_ids", pa.list_(pa.int64())),
        ("sampler_logprobs", pa.list_(pa.float64())),
        ("topk_ids", pa.list_(pa.list_(pa.int64()))),
        ("topk_logprobs", pa.list_(pa.list_(pa.float64()))),
        ("finish_reason", pa.string()),
    ]
)

_PREFILL = "sampler_prefill_logprobs"
"""optional samples column: the engine's prefill logprobs of its own completions (``--sampler-prefill``)."""
_TURNS = "turns"
"""optional samples column (``probe --turns``): each token's turn in its conversation."""


def unstarted_run(path: Path) -> bool:
    """A probe run with no sampled round and no scored shard (a start that failed or was killed).

    Only a probe's own start qualifies, since what qualifies is deleted: its
    manifest carries the probe's fingerprint and is still running, and no
    shard of any name is there. A Recorder's or an imported run names its
    shards otherwise and must never be taken for an empty start.
    """
    path = Path(path)
    if any((path / "samples").glob("round-*.parquet")) or any((path / rundir.TOKENS).glob("*.parquet")):
        return False
    if any((path / "samples" / "turns").glob("round-*.parquet")):  # a multi-turn round's first turns
        return False
    if not (path / MANIFEST).exists():
        return True  # the start failed before its first manifest: only the empty folders it made
    try:
        manifest = rundir.read_json(path / MANIFEST)
    except OSError:  # unreadable: not ours to delete
        return False
    return manifest is not None and "fingerprint" in manifest and manifest.get("status") == rundir.RUNNING


class RunDir:
    def __init__(self, path: Path):
        self.path = Path(path)
        self.tokens = self.path / rundir.TOKENS
        self.samples = self.path / "samples"
        self.prompts = self.path / "prompts.parquet"
        self.manifest_path = self.path / MANIFEST
        self.token_index = rundir.ShardIndex(self.path, rundir.TOKENS)

    # ---- lifecycle -------------------------------------------------------

    def exists(self) -> bool:
        return self.manifest_path.is_file()

    def lock(self) -> rundir.WriterLock:
        """The directory's writer lock; taken before :meth:`open` looks at what is there."""
        return rundir.lock_run(self.path)

    @json_edge
    def open(self, fingerprint: dict[str, Any], resume: bool) -> dict[str, Any]:
        """Create the directory, or check a resumed one was made by the same configuration.

        A run that never got to its first round (its start failed or was
        killed) holds nothing to keep: a new run replaces it without --resume.
        """
        if self.exists() and not resume and self.unstarted():
            self.discard_unstarted()
        if self.exists():
            if not resume:
                raise UsageError(
                    f"{self.path} already holds a probe run",
                    hint="pass --resume to continue it, or choose another --out",
                )
            manifest = self.read_manifest()
            old = manifest.get("fingerprint", {})
            diff = sorted(k for k in set(old) | set(fingerprint) if old.get(k) != fingerprint.get(k))
            if diff:
                raise UsageError(
                    f"cannot resume {self.path}: its configuration differs in {', '.join(diff)}",
                    hint="resume with the same options, or start a new --out",
                )
            # a shard renamed into place just before a kill (or written before runs kept an index) is the run's
            self.token_index.adopt("part-*.parquet")
            rundir.ShardIndex(self.path, rundir.ROUTES).adopt("part-*.parquet")
            manifest["shard_index"] = rundir.INDEX_VERSION
            return manifest
        if self.path.exists() and not rundir.is_empty_dir(self.path):
            raise UsageError(
                f"{self.path} exists and is not a probe run directory", hint="choose an empty or new --out"
            )
        self.tokens.mkdir(parents=True, exist_ok=True)
        self.samples.mkdir(parents=True, exist_ok=True)
        return {"fingerprint": fingerprint, "status": "running", "shard_index": rundir.INDEX_VERSION}

    def unstarted(self) -> bool:
        """Nothing sampled and nothing scored: only the manifest and prompts a start writes first."""
        return unstarted_run(self.path)

    def discard_unstarted(self) -> None:
        """Take back what :meth:`open` and the first manifest wrote, if nothing was sampled or scored.

        A probe that fails before its first round (an engine that does not
        start, a server that refuses) would otherwise leave a "running" run
        that a plain re-run refuses as already holding a probe run, with
        nothing in it to resume. Anything sampled or scored stays, for
        ``--resume``. The writer lock then takes back the folder it created.
        """
        if not self.unstarted():
            return
        for path in (self.manifest_path, self.prompts):
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
        for folder in (self.samples, self.tokens):
            with contextlib.suppress(OSError):
                folder.rmdir()  # only when empty

    @json_edge
    def read_manifest(self) -> dict[str, Any]:
        manifest = rundir.read_manifest(self.path)
        if manifest is None:
            raise UsageError(f"{self.manifest_path} is not a readable JSON manifest")
        return manifest

    def write_manifest(self, manifest: dict[str, Any]) -> None:
        rundir.write_manifest(self.path, manifest)

    # ---- prompts ---------------------------------------------------------

    def write_prompts(
        self, prompt_ids: list[int], token_ids: list[list[int]], texts: list[str], answers: list[str | None]
    ) -> None:
        table = pa.table(
            {
                "prompt_id": pa.array(prompt_ids, pa.int64()),
                "prompt_token_ids": pa.array(token_ids, pa.list_(pa.int64())),
                "text": pa.array(texts, pa.string()),
                "answer": pa.array(answers, pa.string()),
            }
        )
        with rundir.atomic_path(self.prompts) as tmp:
            pq.write_table(table, tmp, write_page_checksum=True)

    def read_prompts(self) -> pa.Table:
        return pq.read_table(self.prompts)

    # ---- samples ---------------------------------------------------------

    def samples_path(self, round_index: int) -> Path:
        return self.samples / f"round-{round_index:05d}.parquet"

    def turn_samples_path(self, round_index: int, turn: int) -> Path:
        """``probe --turns``: one turn of a round, saved as soon as it is sampled (a resume goes on from the next)."""
        return self.samples / "turns" / f"round-{round_index:05d}-turn-{turn:03d}.parquet"

    def write_samples(self, round_index: int, completions: list[Completion], path: Path | None = None) -> None:
        prefill = any(c.sampler_prefill_logprobs is not None for c in completions)
        turns = any(c.turns is not None for c in completions)
        schema = _SAMPLE_SCHEMA.append(pa.field(_PREFILL, pa.list_(pa.float64()))) if prefill else _SAMPLE_SCHEMA
        if turns:
            schema = schema.append(pa.field(_TURNS, pa.list_(pa.int32())))
        table = pa.Table.from_pylist(
            [
                {
                    "prompt_index": c.prompt_index,
                    "sample_index": c.sample_index,
                    "token_ids": c.token_ids,
                    "sampler_logprobs": c.sampler_logprobs,
                    "topk_ids": c.topk_ids,
                    "topk_logprobs": c.topk_logprobs,
                    "finish_reason": c.finish_reason,
                    **({_PREFILL: c.sampler_prefill_logprobs} if prefill else {}),
                    **({_TURNS: c.turns} if turns else {}),
                }
                for c in completions
            ],
            schema=schema,
        )
        path = path or self.samples_path(round_index)
        path.parent.mkdir(parents=True, exist_ok=True)
        with rundir.atomic_path(path) as tmp:
            pq.write_table(table, tmp, write_page_checksum=True)

    def read_samples(self, round_index: int | None = None, path: Path | None = None) -> list[Completion]:
        paths = (
            [path]
            if path is not None
            else [self.samples_path(round_index)]
            if round_index is not None
            else sorted(self.samples.glob("round-*.parquet"))
        )
        out = []
        for p in paths:
            for row in pq.read_table(p).to_pylist():
                out.append(Completion(**row))
        return out

    # ---- tokens ----------------------------------------------------------

    def token_shard(self, round_index: int, batch_index: int) -> Path:
        return self.tokens / f"part-{round_index:05d}-{batch_index:05d}.parquet"

    def write_tokens(self, round_index: int, batch_index: int, columns: dict[str, Any], config: dict[str, Any]) -> Path:
        """Write one token shard atomically, then list it in the run's shard index."""
        path = write_token_shard(self.token_shard(round_index, batch_index), columns, config)
        self.token_index.commit(path, len(columns["sequence_id"]))
        return path

    def scored_sequences(self) -> set[int]:
        """Sequence ids already written: a resumed probe scores only the rest."""
        from ..reader.streaming import _guard, _open

        done: set[int] = set()
        for p in sorted(self.tokens.glob("part-*.parquet")):  # the reader's way: pages verified, errors one line
            ids = _guard(p, lambda p=p: _open(p).read(columns=["sequence_id"]).column(0))
            done.update(ids.unique().to_pylist())
        return done


@json_edge
def open_session(manifest: dict, resumed: bool) -> dict[str, Any]:
    """Start this process's record in ``manifest["sessions"]`` and return it (its seconds grow as work is done).

    A resumed run keeps every earlier session's record, so its timings cover all
    of them. A manifest written before sessions were recorded keeps its totals as
    one earlier session.
    """
    sessions = manifest.setdefault("sessions", [])
    old = manifest.get("timings") or {}
    if not sessions and ("sampling_seconds" in old or "scoring_seconds" in old):
        sessions.append(
            {
                "started_at": None,
                "resumed": False,
                "sampling_seconds": old.get("sampling_seconds", 0.0),
                "scoring_seconds": old.get("scoring_seconds", 0.0),
            }
        )
    session = {
        "started_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "resumed": resumed,
        "sampling_seconds": 0.0,
        "scoring_seconds": 0.0,
    }
    sessions.append(session)
    total_timings(manifest)
    return session


@json_edge
def total_timings(manifest: dict) -> dict[str, Any]:
    """``manifest["timings"]``: the sum over every session of the run."""
    timings = manifest.setdefault("timings", {})
    for key in ("sampling_seconds", "scoring_seconds"):
        timings[key] = sum(s.get(key) or 0.0 for s in manifest.get("sessions", []))
    timings["sessions"] = len(manifest.get("sessions", []))
    return timings


def save_progress(run: RunDir, manifest: dict) -> None:
    """Write the manifest after a round: a run killed later keeps this process's timings and engine records."""
    total_timings(manifest)
    run.write_manifest(manifest)


def finish(run: RunDir, manifest: dict) -> None:
    tokens = sum(pq.ParquetFile(p).metadata.num_rows for p in run.tokens.glob("part-*.parquet"))
    timings = total_timings(manifest)
    timings["tokens"] = tokens
    if timings["scoring_seconds"] > 0:
        timings["scoring_tokens_per_second"] = tokens / timings["scoring_seconds"]
    if timings["sampling_seconds"] > 0:
        timings["sampling_tokens_per_second"] = tokens / timings["sampling_seconds"]
    manifest["host"] = {"python": platform.python_version(), "platform": platform.platform()}
    manifest["status"] = "complete"
    run.write_manifest(manifest)


def token_shards(items: Sequence[T], tokens: Callable[[T], int]) -> list[list[T]]:
    """Split ``items`` in order into shards of at most :data:`SHARD_TOKENS` completion tokens (a longer item
    gets a shard of its own), so probe, rescore and an imported run's rescore resume from the same unit."""
    shards: list[list[T]] = []
    size = SHARD_TOKENS + 1
    for item in items:
        n = tokens(item)
        if size + n > SHARD_TOKENS and (not shards or shards[-1]):
            shards.append([])
            size = 0
        shards[-1].append(item)
        size += n
    return shards
