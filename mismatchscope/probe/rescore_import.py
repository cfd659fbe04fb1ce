"""``rescore`` of an imported run: a checkpoint scores the stack's own tokens and records its routes.

An import with ``--routes`` holds, per routed sequence, every prompt and
completion token id (``sequences.parquet``), the stack's sampler logprobs
(``tokens/``) and the sampler's routes (``routes/``, trainer side null). A
rescore with ``--trainer-checkpoint`` feeds each sequence through that
checkpoint once, as a probe's trainer does, and writes a new run:

* ``tokens/``: the imported tokens (and their columns: step, advantage,
  reward, ...) with ``trainer_logprob`` and the trainer's top-k and entropy
  from the checkpoint, at the positions the import kept;
* ``routes/``: one row per input position, the imported sampler ids as they
  were (null where the stack did not capture them) beside the trainer's own,
  so ``report``'s ``routing`` section gives flip rates and routing's share of
  the gap for the stack's own routes;
* ``sequences.parquet``, copied: the rescored run can be rescored again.

The sampler's temperature is not in any stack's dump. The trainer divides its
logits by it, and a wrong one would fold a temperature gap into every
logprob difference, so an imported run needs ``--temperature`` (a rescored
import keeps the one it was given). Everything that can be checked without
loading the model is checked before the new run exists: the checkpoint's
weights against its config, every token id against its vocabulary, every
sequence against its context length, and the imported routes' layers,
experts and top-k against its router.
"""

from __future__ import annotations

import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from .. import rundir
from .._version import __version__
from ..errors import InputError, UsageError
from ..importers.routes import SEQUENCES
from ..progress import Progress
from ..redact import redact_command
from ..routing import layout
from ..schema import SUMMARY_NAMES
from .types import SamplingConfig, Scored, ScoreRequest, TrainerConfig

if TYPE_CHECKING:
    from ..routing.io import Shape
    from .checkpoint import CheckpointInfo
    from .trainer import HFTrainer
from ..documents import json_edge, to_json
from .provenance import copy_sampler_side, record_side, refresh_fallbacks, trainer_side
from .writer import RunDir, finish, open_session, save_progress, token_shards

TRAINER_COLUMNS = ("trainer_logprob", "trainer_topk_ids", "trainer_topk_logprobs", "trainer_entropy")
"""what the checkpoint gives each kept token; the imported values of these (the stack's trainer's) are replaced."""
DROPPED_COLUMNS = (
    *TRAINER_COLUMNS,
    "trainer_logprobs_at_sampler_topk",
    "sampler_kept_logmass",
    "trainer_step",
    *SUMMARY_NAMES,
)
"""imported columns that describe the stack's trainer, not this checkpoint: not carried into the rescored run
(the top-k summaries among them: the rescored run's writer summarises its own lists)."""


def is_imported(run_path: Path) -> bool:
    """A run whose tokens came from ``import`` (sequences, no sampled rounds), or a rescore of one."""
    run = Path(run_path)
    return (run / SEQUENCES).is_file() and not any((run / "samples").glob("round-*.parquet"))


@dataclass(frozen=True)
class ImportedRun:
    """What a rescore reads from an imported run, checked once."""

    path: Path
    manifest: dict[str, Any]
    sequences: pa.Table
    """sorted by sequence id."""
    meta: layout.RoutingMeta | None
    temperature: float | None
    """the temperature a rescore of this import was given (None: the import's own manifest, which has none)."""


def open_imported(run_path: Path) -> ImportedRun:
    run = Path(run_path)
    c = rundir.completion(run)
    if c is not None and not c.complete:
        raise UsageError(
            f"{run} is an incomplete run ({c.reason}); rescore needs a complete one",
            hint="import the dump again into a new folder (or finish the interrupted rescore with --resume)",
        )
    manifest = rundir.read_manifest(run)
    if manifest is None:
        raise UsageError(
            f"{run / rundir.MANIFEST} is not a readable JSON manifest",
            hint="the run was damaged: import the dump again",
        )
    try:
        sequences = pq.read_table(run / SEQUENCES)
    except (OSError, pa.ArrowInvalid) as e:
        raise InputError(f"{run / SEQUENCES}: cannot read it ({e})") from None
    need = {"sequence_id", "prompt_token_ids", "completion_token_ids", "completion_kept"}
    if not need <= set(sequences.column_names):
        raise InputError(
            f"{run / SEQUENCES} lacks {', '.join(sorted(need - set(sequences.column_names)))}",
            hint="import the run again with --routes",
        )
    raw = manifest.get(layout.MANIFEST_KEY)
    try:
        meta = layout.RoutingMeta.from_dict(raw) if isinstance(raw, dict) else None
    except (KeyError, TypeError, ValueError) as e:
        raise InputError(f"{run}: the manifest's routing entry cannot be read ({e})") from None
    t = ((manifest.get("config") or {}).get("sampling") or {}).get("temperature")
    temperature = float(t) if isinstance(t, int | float) and not isinstance(t, bool) else None
    return ImportedRun(run, manifest, sequences.sort_by("sequence_id"), meta, temperature)


def sampling_for(src: ImportedRun, temperature: float | None) -> SamplingConfig:
    """The trainer's processing: logits / T over the full vocabulary (the stack's top-p/top-k are not known)."""
    from .options import check_temperature

    if temperature is not None:
        check_temperature(temperature, greedy=False)
    if temperature is None:
        temperature = src.temperature
    elif src.temperature is not None and temperature != src.temperature:
        raise UsageError(
            f"--temperature {temperature:g}: {src.path} was scored at temperature {src.temperature:g}",
            hint="leave --temperature out: a rescore keeps the temperature the run was scored at",
        )
    if temperature is None:
        raise UsageError(
            f"{src.path} is an imported run and its dump does not record the sampler's temperature: "
            "pass --temperature T, the temperature its sampler ran at",
            hint="the trainer divides its logits by T: a wrong T would be counted as mismatch",
        )
    check_temperature(temperature, greedy=False)
    longest = max((len(c) for c in src.sequences["completion_token_ids"].to_pylist()), default=1)
    return SamplingConfig(temperature=temperature, n=1, max_tokens=max(longest, 1))


def check_checkpoint_fits(src: ImportedRun, info: CheckpointInfo, trainer_cfg: TrainerConfig) -> None:
    """Every id inside the vocabulary, every sequence inside the context, the routes the checkpoint's shape."""
    _check_vocabulary(src, info)
    _check_context(src, info)
    if src.meta is not None and trainer_cfg.record_routes:
        _check_routes_fit(src, src.meta, info)


def _check_vocabulary(src: ImportedRun, info: CheckpointInfo) -> None:
    """An id past the embedding would fail inside the forward pass, after the new run exists."""
    prompts, completions = src.sequences["prompt_token_ids"], src.sequences["completion_token_ids"]
    sids = src.sequences["sequence_id"].to_numpy()
    flat = [np.asarray(col.combine_chunks().flatten()) for col in (prompts, completions)]
    top = max((int(a.max()) for a in flat if a.size), default=0)
    if top >= info.vocab_size:
        where, bad = next(  # the first such sequence, and its own first id past the vocabulary (not the run's max)
            (int(s), next(t for t in p + c if t >= info.vocab_size))
            for s, p, c in zip(sids, prompts.to_pylist(), completions.to_pylist(), strict=True)
            if max(p + c) >= info.vocab_size
        )
        raise InputError(
            f"sequence {where} of {src.path} holds token id {bad}, outside the vocabulary of {info.path} "
            f"(0..{info.vocab_size - 1}); the largest id in the run is {top}",
            hint="rescore with the checkpoint (and tokenizer) the run was sampled with",
        )


def _check_context(src: ImportedRun, info: CheckpointInfo) -> None:
    """A sequence longer than the checkpoint's positions cannot be scored by it."""
    prompts, completions = src.sequences["prompt_token_ids"], src.sequences["completion_token_ids"]
    sids = src.sequences["sequence_id"].to_numpy()
    p_len, c_len = (np.asarray(col.combine_chunks().value_lengths(), dtype=np.int64) for col in (prompts, completions))
    lengths = p_len + c_len
    if lengths.size and int(lengths.max()) > info.max_model_len:
        i = int(np.argmax(lengths))
        raise InputError(
            f"sequence {int(sids[i])} of {src.path} is {int(lengths[i])} tokens long, more than the "
            f"{info.max_model_len} positions of {info.path}",
            hint="rescore with the checkpoint the run was sampled with (its context is long enough)",
        )


def _check_routes_fit(src: ImportedRun, meta: layout.RoutingMeta, info: CheckpointInfo) -> None:
    """The imported routes are recorded beside the trainer's: both must be of one router shape."""
    if not info.is_moe:
        raise InputError(
            f"{src.path} holds routes of an MoE model ({meta.family}) but {info.path} is dense",
            hint="rescore with the checkpoint the routes came from",
        )
    from ..importers.routes_model import RoutesModel
    from ..routing.families import family_for
    from .routes import model_type_of, unknown_family

    if family_for(model_type_of(info)) is None:
        raise UsageError(f"cannot record the trainer's routes: {unknown_family(info)}")
    model = RoutesModel.from_config(info.config, where=str(info.path / "config.json"))
    want = (model.family, model.num_layers, model.moe_layers, model.num_experts, model.top_k)
    got = (meta.family, meta.num_layers, tuple(meta.moe_layers), meta.num_experts, meta.top_k)
    if want != got:
        raise InputError(
            f"{src.path}'s routes are of {got[0]}: {got[1]} decoder layers (MoE layers {list(got[2])}), "
            f"top-{got[4]} of {got[3]} experts; {info.path} is {want[0]}: {want[1]} layers (MoE layers "
            f"{list(want[2])}), top-{want[4]} of {want[3]} experts",
            hint="rescore with the checkpoint the routes came from",
        )


def check_replay(src: ImportedRun, trainer_cfg: TrainerConfig) -> None:
    if trainer_cfg.replay is not None:
        raise UsageError(
            f"--replay-routes: {src.path} is an imported run; replaying imported routes is not supported "
            "(their rows may start past the prompt or miss captures)",
            hint="rescore it without --replay-routes for its flip rates",
        )


# ------------------------------------------------------------------ the rescore


@dataclass(frozen=True)
class _ImportRescore:
    """What scoring an imported run reads, checked before the new run exists."""

    src: ImportedRun
    dst: RunDir
    info: CheckpointInfo
    """the checkpoint that scores the stack's tokens."""
    trainer_cfg: TrainerConfig
    sampling: SamplingConfig
    sampler_routes: pa.Table | None
    """the imported sampler routes, where routes are recorded."""
    resume: bool
    progress: Progress


def rescore_imported(
    run_path: Path,
    out: Path,
    trainer_cfg: TrainerConfig,
    checkpoint: Path | None,
    temperature: float | None,
    resume: bool,
    progress: Progress,
) -> Path:
    """Score an imported run's sequences with ``checkpoint`` into ``out`` (checks first, then the run)."""
    src = open_imported(run_path)
    check_replay(src, trainer_cfg)
    sampling = sampling_for(src, temperature)
    info = _checked_checkpoint(src, checkpoint, trainer_cfg)
    sampler_routes = _sampler_routes(src) if trainer_cfg.record_routes and src.meta is not None else None
    s = _ImportRescore(src, RunDir(out), info, trainer_cfg, sampling, sampler_routes, resume, progress)
    fingerprint = {
        "rescored_from": str(src.path),
        "checkpoint_sha256": info.sha256,
        "sampling": sampling.to_dict(),
        "trainer": trainer_cfg.to_dict(),
    }
    with s.dst.lock():
        manifest = s.dst.open(fingerprint, resume)
        try:
            return _score(s, manifest)
        except BaseException:
            s.dst.discard_unstarted()
            raise


def _checked_checkpoint(src: ImportedRun, checkpoint: Path | None, trainer_cfg: TrainerConfig) -> CheckpointInfo:
    """The checkpoint to score with (given, or the one a rescored import recorded), checked against the import."""
    from .checkpoint import check_weights_cover_config, inspect_checkpoint
    from .tokenizer import check_tokenizer, load_tokenizer

    recorded = ((src.manifest.get("config") or {}).get("checkpoint") or {}).get("path")
    if checkpoint is None and isinstance(recorded, str):
        checkpoint = Path(recorded)  # a rescored import: scored again with the checkpoint it was scored with
    if checkpoint is None:
        raise UsageError(
            f"{src.path} is an imported run: it records no checkpoint to score it with",
            hint="pass --trainer-checkpoint CHECKPOINT, the model (same tokenizer) the stack trained",
        )
    trust = trainer_cfg.trust_remote_code
    info = inspect_checkpoint(checkpoint, allow_pickle=trainer_cfg.allow_pickle, trust_remote_code=trust)
    check_weights_cover_config(info, trust_remote_code=trust)
    check_tokenizer(load_tokenizer(info.path, trust_remote_code=trust), info, [])
    check_checkpoint_fits(src, info, trainer_cfg)
    return info


@json_edge
def _config(src: ImportedRun, info, trainer_cfg: TrainerConfig, sampling: SamplingConfig) -> dict[str, Any]:
    source = src.manifest.get("source") or {}
    return {
        "mismatchscope_version": __version__,
        "checkpoint": to_json(info.record()),
        "imported": {"format": source.get("format"), "semantics": source.get("semantics")},
        "sampling": sampling.to_dict(),
        "semantics": {
            "sampler_logprob": "the imported stack's sampler logprobs, as its dump holds them",
            "trainer_logprob": f"the checkpoint's logits / T (T={sampling.temperature:g}), full vocabulary",
            "sampler_kept_logmass": None,
        },
        "sampler": {"kind": "imported", "format": source.get("format")},
        "trainer": trainer_cfg.to_dict(),
        "rescored_from": str(src.path),
    }


def _score(s: _ImportRescore, manifest: dict[str, Any]) -> Path:
    """Every sequence not yet scored, shard by shard, into the new run."""
    config = _config(s.src, s.info, s.trainer_cfg, s.sampling)
    manifest.update(
        {
            "config": config,
            "status": "running",
            "command": redact_command(sys.argv[1:]) if sys.argv else None,
            "source": s.src.manifest.get("source"),
        }
    )
    timings = open_session(manifest, s.resume)
    s.dst.write_manifest(manifest)
    if not (s.dst.path / SEQUENCES).exists():
        with rundir.atomic_path(s.dst.path / SEQUENCES) as tmp:
            shutil.copyfile(s.src.path / SEQUENCES, tmp)
    copy_sampler_side(s.src.manifest, manifest)  # the import's sampler: what its stack's dump says
    trainer, shape = _load_trainer(s, manifest)
    record_side(manifest, "trainer", trainer_side(trainer, s.info, s.sampling, "rescore"))
    tokens = _imported_tokens(s.src)
    done = s.dst.scored_sequences() if s.resume else set()
    rows = [r for r in s.src.sequences.to_pylist() if r["sequence_id"] not in done]
    shards = token_shards(rows, lambda r: len(r["completion_token_ids"]))
    s.progress.stage("scoring", sum(len(r["completion_token_ids"]) for shard in shards for r in shard))
    existing = len(list(s.dst.tokens.glob("part-*.parquet")))
    for b, shard in enumerate(shards):
        name = f"part-00000-{existing + b:05d}.parquet"
        timings["scoring_seconds"] += _score_shard(s, trainer, shape, config, tokens, name, shard)
        s.progress.advance("scoring", sum(len(r["completion_token_ids"]) for r in shard))
        save_progress(s.dst, manifest)
    refresh_fallbacks(manifest, "rescore")
    finish(s.dst, manifest)
    return s.dst.path


def _load_trainer(s: _ImportRescore, manifest: dict[str, Any]) -> tuple[HFTrainer, Shape | None]:
    """The trainer on the checkpoint, recorded; the shape its routes are written in (None: none are)."""
    from .routes import routing_manifest
    from .trainer import HFTrainer

    s.progress.note(f"loading trainer ({s.trainer_cfg.dtype}, weights of {s.info.path})")
    trainer = HFTrainer(s.info, s.trainer_cfg)
    manifest["trainer_info"] = trainer.describe()
    shape = None
    if s.src.meta is not None and s.trainer_cfg.record_routes:
        shape = routing_manifest(manifest, trainer, s.src.meta.sampler, None, s.progress.note)
    return trainer, shape


def _score_shard(
    s: _ImportRescore,
    trainer: HFTrainer,
    shape: Shape | None,
    config: dict[str, Any],
    tokens: pa.Table,
    name: str,
    shard: list[dict[str, Any]],
) -> float:
    """Score one shard of sequences and write its routes, then its tokens; the seconds the trainer took."""
    from ..analysis.summaries import write_token_shard

    reqs = [ScoreRequest(r["prompt_token_ids"], r["completion_token_ids"], []) for r in shard]
    t0 = time.perf_counter()
    scored = trainer.score(reqs, s.sampling)
    elapsed = time.perf_counter() - t0
    if shape is not None and s.sampler_routes is not None:  # before the token shard: scored tokens imply routes
        _write_routes(s.dst, name, shape, shard, scored, s.sampler_routes)
    cols = _token_columns(tokens, shard, scored)
    path = write_token_shard(s.dst.tokens / name, cols, config)
    s.dst.token_index.commit(path, len(cols["sequence_id"]))
    return elapsed


def _imported_tokens(src: ImportedRun) -> pa.Table:
    """The imported token rows (integrity-checked against the run's index), sorted by sequence and position."""
    from ..reader import Hygiene, open_source, read_batches
    from ..schema import COLUMNS

    if not any(p for p in (src.path / rundir.TOKENS).glob("*.parquet") if not p.name.startswith(".")):
        raise InputError(f"{src.path} holds no token shard to rescore")
    source = open_source(src.path)  # the run's index, footer hashes and every shard's columns, as report checks them
    keep = [c for c in COLUMNS if source.has(c) and c not in DROPPED_COLUMNS]
    batches = []
    for raw in read_batches(source, keep):  # types, ranges, damaged pages: report's checks, report's errors
        raw.clean(Hygiene())
        batches.append(raw.full_batch().select(keep))
    if not batches:
        raise InputError(f"{src.path} holds no token to rescore")
    table = pa.Table.from_batches([b.replace_schema_metadata(None) for b in batches])
    return table.sort_by([("sequence_id", "ascending"), ("position", "ascending")])


def _token_columns(
    tokens: pa.Table, shard: list[dict[str, Any]], scored: list[Scored]
) -> dict[str, pa.ChunkedArray | list]:
    """The shard's imported token rows, each given the checkpoint's numbers at its completion index."""
    sids = [r["sequence_id"] for r in shard]
    part = tokens.filter(pa.array(np.isin(tokens["sequence_id"].to_numpy(), sids)))
    by_sid = {s: i for i, s in enumerate(sids)}
    out: dict[str, list] = {name: [] for name in TRAINER_COLUMNS}
    order: list[int] = []
    seq = part["sequence_id"].to_numpy()
    for sid in sids:
        r, s = shard[by_sid[sid]], scored[by_sid[sid]]
        kept = np.flatnonzero(np.asarray(r["completion_kept"], dtype=bool))
        count = int(np.searchsorted(seq, sid, side="right") - np.searchsorted(seq, sid, side="left"))
        first = int(np.searchsorted(seq, sid, side="left"))
        if count != len(kept):
            raise InputError(
                f"sequence {sid}: the import holds {count} tokens but its sequences file keeps {len(kept)}",
                hint="the imported run was damaged; import it again",
            )
        order += range(first, first + count)
        out["trainer_logprob"] += [s.trainer_logprobs[j] for j in kept]
        out["trainer_topk_ids"] += [s.topk_ids[j] for j in kept]
        out["trainer_topk_logprobs"] += [s.topk_logprobs[j] for j in kept]
        out["trainer_entropy"] += [s.entropy[j] for j in kept]
    part = part.take(pa.array(order, pa.int64()))
    cols: dict[str, pa.ChunkedArray | list] = {name: part[name] for name in part.column_names}
    cols.update(out)
    return cols


# ------------------------------------------------------------------ routes


def _sampler_routes(src: ImportedRun) -> pa.Table:
    """The imported sampler side (ids, and weights where recorded), keyed by ``(sequence_id, input_position)``."""
    from ..reader import read_routes

    columns = ["sequence_id", "input_position", layout.SAMPLER_EXPERTS, layout.SAMPLER_WEIGHTS]
    table = read_routes(src.path, columns=columns)
    return table.sort_by([("sequence_id", "ascending"), ("input_position", "ascending")])


def _write_routes(
    dst: RunDir, name: str, shape, shard: list[dict[str, Any]], scored: list[Scored], sampler: pa.Table
) -> None:
    """One route shard: the trainer's rows over every input position, the imported sampler's beside them."""
    from ..routing.io import routes_table, write_shard

    sids = [r["sequence_id"] for r in shard]
    prompt_lengths = [len(r["prompt_token_ids"]) for r in shard]
    rows = [p + len(r["completion_token_ids"]) - 1 for p, r in zip(prompt_lengths, shard, strict=True)]
    table = routes_table(shape, sids, prompt_lengths, rows, None, [s.routes for s in scored])
    seq, ip = sampler["sequence_id"].to_numpy(), sampler["input_position"].to_numpy()
    take, token = [], []
    for sid, p, n, r in zip(sids, prompt_lengths, rows, shard, strict=True):
        lo, hi = int(np.searchsorted(seq, sid, side="left")), int(np.searchsorted(seq, sid, side="right"))
        idx = np.full(n, -1, dtype=np.int64)
        pos = ip[lo:hi]
        if pos.size and (pos.max() >= n or pos.min() < 0):
            raise InputError(f"sequence {sid}: imported routes at input position {int(pos.max())} past its {n} rows")
        idx[pos] = np.arange(lo, hi)
        take.append(idx)
        kept = np.asarray(r["completion_kept"], dtype=bool)
        rank = np.where(kept, np.cumsum(kept) - 1, -1)  # the k-th kept completion token has position k
        c = np.arange(n) - (p - 1)
        token.append(np.where(c >= 0, rank[np.clip(c, 0, None)], -1))
    idx = np.concatenate(take) if take else np.zeros(0, np.int64)
    tp = np.concatenate(token) if token else np.zeros(0, np.int64)
    indices = pa.array(idx, mask=idx < 0)
    schema = table.schema
    columns = {
        "token_position": pa.array(tp.astype(np.int32), mask=tp < 0),
        layout.SAMPLER_EXPERTS: sampler[layout.SAMPLER_EXPERTS].take(indices),
        layout.SAMPLER_WEIGHTS: sampler[layout.SAMPLER_WEIGHTS].take(indices),
    }
    table = pa.table(
        [columns[f.name].cast(f.type) if f.name in columns else table[f.name] for f in schema], schema=schema
    )
    path = dst.path / layout.ROUTES / name
    write_shard(path, table)
    rundir.ShardIndex(dst.path, layout.ROUTES).commit(path, table.num_rows)
