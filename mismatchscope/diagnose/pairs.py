"""Every compared pair kept as an ordinary run directory.

The decomposition compares four pairs on identical tokens (sampler vs
trainer, sampler vs reference, trainer vs reference, sampler decode vs
sampler prefill). Each is written as a run directory whose two logprob
columns hold the pair, so ``report``, ``compare-masks`` and ``gate`` read
it like any probe run and :func:`~mismatchscope.analysis.engine.analyse`
gives the same metric names for every gap. The column roles are fixed so
``trainer_logprob - sampler_logprob`` is the pair's error:

* sampler vs reference: ``sampler_logprob = lq``, ``trainer_logprob = lr``;
* trainer vs reference: ``sampler_logprob = lr``, ``trainer_logprob = lp``;
* decode vs prefill: ``sampler_logprob`` = decode, ``trainer_logprob`` = prefill.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from .. import rundir
from ..probe.types import ScoreRequest
from ..schema import write_table

KEY_COLUMNS = ("sequence_id", "position", "token_id", "prompt_id", "sample_index")


def load_tokens(run_dir: Path) -> dict[str, np.ndarray]:
    """A run's token rows, sorted by (sequence_id, position), as numpy columns."""
    files = sorted((Path(run_dir) / "tokens").glob("part-*.parquet"))
    names = [*KEY_COLUMNS, "sampler_logprob", "trainer_logprob"]
    # each shard alone: a writer stores a column of float32 values as float32, so shards may differ in width
    parts = [pq.ParquetFile(f).read(columns=names) for f in files]
    parts = [
        t.cast(pa.schema([pa.field(n, pa.float64() if "logprob" in n else t.schema.field(n).type) for n in names]))
        for t in parts
    ]
    table = pa.concat_tables(parts).sort_by([("sequence_id", "ascending"), ("position", "ascending")])
    return {name: table.column(name).to_numpy() for name in table.column_names}


def sequence_slices(sequence_id: np.ndarray) -> list[tuple[int, slice]]:
    """(sequence id, its rows) for sorted ``sequence_id``."""
    if sequence_id.size == 0:
        return []
    starts = np.flatnonzero(np.r_[True, sequence_id[1:] != sequence_id[:-1]])
    ends = np.r_[starts[1:], sequence_id.size]
    return [(int(sequence_id[a]), slice(int(a), int(b))) for a, b in zip(starts, ends, strict=True)]


def write_pair_run(
    path: Path, keys: dict[str, np.ndarray], sampler_lp: np.ndarray, trainer_lp: np.ndarray, meta: dict[str, Any]
) -> Path:
    """A complete run directory holding one pair (``meta`` goes into the manifest and the shard metadata)."""
    path = Path(path)
    cols = {name: keys[name].tolist() for name in KEY_COLUMNS}
    cols["sampler_logprob"] = np.asarray(sampler_lp, dtype=np.float64).tolist()
    cols["trainer_logprob"] = np.asarray(trainer_lp, dtype=np.float64).tolist()
    shard = write_table(path / rundir.TOKENS / "part-00000-00000.parquet", cols, meta)
    rundir.ShardIndex(path, rundir.TOKENS).commit(shard, len(cols["token_id"]))
    rundir.write_manifest(
        path,
        {
            "status": rundir.COMPLETE,
            "config": meta,
            "shard_index": rundir.INDEX_VERSION,
            "timings": {"tokens": len(cols["token_id"])},
        },
    )
    return path


def prompt_ids(run_dir: Path) -> list[list[int]]:
    """A run's prompts as token ids, in prompt order."""
    from ..probe.writer import RunDir

    return [r["prompt_token_ids"] for r in RunDir(run_dir).read_prompts().to_pylist()]


def score_requests(run_dir: Path, prompt_ids: list[list[int]]) -> list[ScoreRequest]:
    """A run's sampled sequences as the trainer's scoring requests, in (prompt, sample) order."""
    from ..probe.writer import RunDir

    done = sorted(RunDir(run_dir).read_samples(), key=lambda c: (c.prompt_index, c.sample_index))
    return [ScoreRequest(prompt_ids[c.prompt_index], c.token_ids, c.topk_ids) for c in done]
