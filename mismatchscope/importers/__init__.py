"""``mismatchscope import FORMAT SRC --out DIR``: a training framework's own dumps, converted.

Many RL frameworks already write per-token sampler and trainer logprobs to
disk. Each importer reads one framework's layout (module docstrings say which
source file defines it), keeps only generated tokens, and streams them into
the project's token-pair format: ``OUT/tokens/part-XXXXX.parquet`` shards
(every ~1M tokens) plus ``OUT/manifest.json``, written last.

Adding a format is one module with an importer class and one entry in
:data:`.registry.IMPORTERS` (which the command line reads for its list of
formats), declaring the protocol the class implements.

Output conventions, the same for every format:

* ``sequence_id`` is unique across the whole output, numbered from 0 in
  reading order (the generic formats keep a user's own ids); the manifest
  gives each source file's first id, and step, rank and prompt/group ids stay
  as columns where the source has them.
* ``position`` is the 0-based index among the sequence's kept tokens.
* the Parquet metadata and the manifest carry ``source``:
  ``{"format", "files", "semantics"}``, where ``semantics`` records what the
  framework's numbers mean (which logprob is which, alignment, temperature,
  policy lag). A report should show ``semantics["policy_lag"]`` when it is
  ``True`` (prime-rl): the gap then mixes policy lag with numerical mismatch.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._version import __version__
from ..documents import json_edge
from ..errors import InputError, UsageError
from ..progress import FileProgress
from ._base import ImportContext, Importer, ImportResult, JsonlImporter, SamplerOnlyImporter, SourceFile
from .registry import IMPORTERS, ROUTE_ENCODINGS, Format

if TYPE_CHECKING:
    from .routes import RoutesOptions

__all__ = [
    "IMPORTERS",
    "PICKLED_FORMATS",
    "ROUTE_ENCODINGS",
    "ImportResult",
    "describe",
    "import_run",
    "importer_class",
]

PICKLED_FORMATS = tuple(name for name, f in IMPORTERS.items() if f.pickled)
"""the formats whose dumps are pickles: ``--trust-pickle`` means something only for these."""


def importer_class(fmt: str) -> type[Importer]:
    return IMPORTERS[fmt].load()


def _other_stack(fmt: str, src: Path) -> str | None:
    """The stack whose dump ``src`` holds, where ``fmt`` found none of its own files (a verl dump given as ROLL):
    a file by the class its pickle names (read through the allow-list), a folder by the files it holds."""
    from ..errors import MismatchscopeError

    if not IMPORTERS[fmt].pickled:
        return None
    if src.is_file():
        from .stack_pickle import load_stack_pickle, stack_of

        try:
            return stack_of(load_stack_pickle(src, src.name, False, fmt))
        except MismatchscopeError:
            return None
    for other in IMPORTERS.values():
        if other.name == fmt or other.dump_files is None:
            continue
        try:
            if other.load()().discover(src):
                return other.name
        except MismatchscopeError:
            continue
    return None


def describe(fmt: str) -> str:
    """One line on what SRC should be for ``fmt`` (for ``--help`` and error hints)."""
    return IMPORTERS[fmt].layout


def import_run(
    fmt: str,
    src: Path,
    out: Path,
    *,
    columns: dict[str, str] | None = None,
    skip_bad: bool = False,
    trust_pickle: bool = False,
    progress: FileProgress | None = None,
    workers: int | None = None,
    flush_tokens: int | None = None,
    route_options: RoutesOptions | None = None,
) -> ImportResult:
    """Convert the dumps under ``src`` into token-pair shards under ``out``.

    ``columns`` maps canonical names to the source's (generic formats only).
    ``skip_bad`` skips and counts malformed records instead of stopping.
    ``trust_pickle`` allows full unpickling where the safe loader refuses a
    file (slime). ``progress(files_done, files_total, path)`` is called after
    each source file. ``workers``: processes parsing JSONL (None: one per
    core for inputs over 64 MiB on Linux, else none; 0: none). ``route_options``:
    a stack's recorded MoE routes to import beside the tokens (:mod:`.routes`),
    all checked before anything is written. Raises
    :class:`~mismatchscope.errors.UsageError` or
    :class:`~mismatchscope.errors.InputError` subclasses with a one-line
    message, and nothing of the import is left in ``out`` (:func:`mismatchscope.rundir.lock_run`).
    """
    if fmt not in IMPORTERS:
        raise UsageError(f"unknown import format {fmt!r}", hint=f"choose one of: {', '.join(IMPORTERS)}")
    src, out = Path(src), Path(out)
    if not src.exists():
        raise InputError(f"{src}: no such file or directory", hint=describe(fmt))
    spec = IMPORTERS[fmt]
    importer = spec.load()(columns=columns)  # type: ignore[call-arg]
    files = importer.discover(src)
    if not files:
        other = _other_stack(fmt, src)
        if other is not None:
            raise InputError(
                f"{src}: no {fmt} files found; it holds a {other} dump ({IMPORTERS[other].dump_files})",
                hint=f"import it with `mismatchscope import {other}`",
            )
        raise InputError(f"{src}: no {fmt} files found", hint=describe(fmt))
    from .. import rundir
    from ._writer import check_output_dir

    plan = None
    if route_options is not None:
        from .routes import prepare

        plan = prepare(route_options, trust_pickle=trust_pickle)
    # one writer per --out, what is there checked under the lock; a failure takes back all the import wrote
    with rundir.lock_run(out, discard=True):
        check_output_dir(out)
        stage = _fresh_stage(out)
        try:
            result = _import_locked(
                spec, importer, src, stage, out, files, skip_bad, trust_pickle, workers, flush_tokens, progress, plan
            )
        except BaseException:  # the lock takes back what is new in out; a staging folder it found there too
            import shutil

            shutil.rmtree(stage, ignore_errors=True)
            raise
        _publish(stage, out)
        return result


def _fresh_stage(out: Path) -> Path:
    """The staging folder (``rundir.STAGING``), emptied: an import writes the run there and moves it up when it is
    whole, so a killed import (SIGKILL, the SIGTERM of a CI timeout) leaves no ``tokens/`` without a manifest.
    One left there was a killed import's (the lock is held: its writer is gone)."""
    import shutil

    from ..rundir import STAGING

    stage = out / STAGING
    if stage.exists():
        shutil.rmtree(stage)
    stage.mkdir()
    return stage


def _publish(stage: Path, out: Path) -> None:
    """Move the staged run into ``out``: every entry by one rename, the manifest (which marks it complete) last."""
    from ._writer import MANIFEST

    names = sorted(p.name for p in stage.iterdir() if p.name != MANIFEST) + [MANIFEST]
    for name in names:
        target = out / name
        if target.is_dir() and not target.is_symlink() and not any(target.iterdir()):
            target.rmdir()  # an empty tokens/ the user made: check_output_dir let it be
        os.replace(stage / name, target)
    stage.rmdir()


def _import_locked(
    spec: Format,
    importer: Any,
    src: Path,
    stage: Path,
    out: Path,
    files,
    skip_bad: bool,
    trust_pickle: bool,
    workers,
    flush_tokens,
    progress,
    routes_plan=None,
) -> ImportResult:
    # imported here: the writer pulls in pyarrow, the engine multiprocessing
    fmt = spec.name
    from ._writer import FLUSH_TOKENS, ShardWriter, write_manifest

    semantics = importer.semantics()
    base_meta = {"source": {"format": fmt, "semantics": semantics}, "importer": {"mismatchscope_version": __version__}}
    writer = ShardWriter(stage, importer.columns, base_meta, flush_tokens=flush_tokens or FLUSH_TOKENS)
    result = ImportResult(format=fmt, out=out)
    ctx = ImportContext(writer, result, skip_bad=skip_bad, trust_pickle=trust_pickle)
    shards = _read_all(spec, importer, files, ctx, writer, workers, progress)
    check_trainer_side(fmt, src, ctx)  # refused: the lock takes all back
    result.steps = len(ctx.steps)
    result.shards = len(shards)
    result.warnings = list(importer.warnings) + _count_warnings(result, ctx)
    if result.tokens_written == 0:
        if result.bad_records_skipped:
            raise InputError(
                f"{src}: no token imported ({result.bad_records_skipped} bad record(s) skipped)",
                hint="run without --skip-bad to see the first bad record",
            )
        raise InputError(f"{src}: no token imported: the {fmt} files hold no record", hint=describe(fmt))
    manifest = _manifest(fmt, src, stage, files, semantics, shards, writer, result, ctx)
    manifest["provenance"] = _provenance(fmt)
    if spec.implements(SamplerOnlyImporter):  # the sequences rescore scores for the trainer's side
        result.sampler_only = True
        _write_sequences(stage, out, None if routes_plan else importer.sequence_rows, fmt, result, manifest)
    if routes_plan is not None:
        from .routes import write

        entries, route_warnings = write(
            stage, routes_plan, shards, skip_bad=skip_bad, source_rows=ctx.source_rows
        )  # refused: the lock takes all back
        manifest.update(entries)
        result.routes = entries["routes"]
        manifest["warnings"] = result.warnings = result.warnings + route_warnings
    write_manifest(stage, manifest)
    return result


@json_edge
def _provenance(fmt: str) -> dict[str, Any]:
    """What the dump says each side ran: the stack, its engines where it fixes them; the rest not recorded."""
    from ..execution.derived import imported
    from ..execution.record import to_record

    return to_record(imported(fmt))


_ZERO_TRAINER_HINTS = {
    "nemo-rl": "NeMo-RL's force_on_policy_ratio mode logs prev_logprobs as zeros: re-run with "
    "loss_fn.force_on_policy_ratio=false (or set grpo.seq_logprob_error_threshold)",
}


def check_trainer_side(fmt: str, src: Path, ctx: ImportContext) -> None:
    """Refuse an import whose trainer logprobs are all exactly 0 while the sampler's are not, however its tokens
    are spread over records (one generated token per record hides it from any per-record check): a stack that
    skipped the trainer's recompute logs zeros, which every command would read as no mismatch at all."""
    from ..errors import NoTrainerLogprobsError

    tokens = ctx.result.tokens_written
    if tokens >= 2 and ctx.trainer_tokens == 0 and ctx.sampler_tokens:
        raise NoTrainerLogprobsError(
            f"{src}: the trainer logprob of every one of the {tokens:,} imported tokens is exactly 0 while "
            f"{ctx.sampler_tokens:,} sampler logprobs are not: the dump holds no trainer side to compare with",
            hint=_ZERO_TRAINER_HINTS.get(fmt, "check which field holds the trainer's recompute"),
        )


def _read_all(spec: Format, importer: Any, files, ctx: ImportContext, writer, workers, progress) -> list:
    """Every source file through the importer into the writer, as its entry declares: JSONL records through the
    (parallel) engine, other files whole; the shards written, or nothing left of them on a failure."""
    from ._jsonl import import_files

    try:
        if spec.implements(JsonlImporter):
            import_files(importer, files, ctx, workers=workers, progress=progress)
        else:
            for i, f in enumerate(files, 1):
                importer.read(f, ctx)
                ctx.result.files_read += 1
                if progress is not None:
                    progress(i, len(files), f.path)
        return writer.close()
    except BaseException:
        writer.abort()
        raise


def _write_sequences(stage: Path, out: Path, rows: Any, fmt: str, result: ImportResult, manifest: dict) -> None:
    from .dataproto import NO_TRAINER_WARNING

    if rows is not None:  # with --routes, the routes' own sequences.parquet is written instead
        rows.write(stage)  # refused: the lock takes all back
    line = NO_TRAINER_WARNING.format(stack=fmt, out=out)
    manifest["warnings"] = result.warnings = [*result.warnings, line]
    manifest["sequences_file"] = "sequences.parquet"


def _count_warnings(result: ImportResult, ctx: ImportContext) -> list[str]:
    out = []
    if result.bad_records_skipped:
        first = ctx.bad_examples[0]
        where = first["file"] + (
            f":{first['line']}"
            if first["line"]
            else f" (record {first['record']})"
            if first["record"] is not None
            else ""
        )
        out.append(
            f"skipped {result.bad_records_skipped} bad record(s); first: {where}: {first['reason']} "
            "(all listed in manifest.json)"
        )
    if ctx.notes.get("nonfinite_logprobs"):
        out.append(
            f"{ctx.notes['nonfinite_logprobs']} imported token(s) have a non-finite logprob; the analysis excludes them"
        )
    return out


@json_edge
def _manifest(
    fmt: str,
    src: Path,
    out: Path,
    files: list[SourceFile],
    semantics: dict[str, Any],
    shards: list[Path],
    writer: Any,
    result: ImportResult,
    ctx: ImportContext,
) -> dict[str, Any]:
    counts = result.to_dict()
    for key in ("out", "warnings", "format", "routes", "sampler_only"):
        counts.pop(key)
    return {
        "complete": True,
        "source": {
            "format": fmt,
            "root": os.fspath(src),
            "files": [
                {
                    "path": f.rel,
                    "step": f.step,
                    "rank": f.rank,
                    **ctx.file_stats.get(f.rel, {"sequences": 0, "tokens": 0, "bad_records": 0}),
                }
                for f in files
            ],
            "semantics": semantics,
        },
        "counts": counts,
        "notes": dict(ctx.notes),
        "warnings": result.warnings,
        "bad_records": ctx.bad_examples,
        "columns": list(writer.columns),
        "shards": [p.relative_to(out).as_posix() for p in shards],
    }
