"""What a reader says about the runs of its input before it reads them: which runs the shards belong
to, whether each is complete, and whether its shards agree with its index."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from ..errors import ShardIndexError
from .index import hashed, located, shard_problems
from .layout import INDEX, MANIFEST, TOKENS, is_run_dir
from .manifest import Completion, completion, read_manifest


def contents_summary(files: list[Path]) -> str:
    """ "N shard(s), R rows, steps A-B" from the Parquet footers only (no data read)."""
    import pyarrow.parquet as pq

    rows, lo, hi = 0, None, None
    for f in files:
        try:
            md = pq.ParquetFile(f).metadata
        except Exception:  # an unreadable shard is reported by the reader itself
            continue
        rows += md.num_rows
        names = [md.schema.column(i).name for i in range(md.num_columns)]
        if "step" not in names:
            continue
        j = names.index("step")
        for g in range(md.num_row_groups):
            st = md.row_group(g).column(j).statistics
            if st is not None and st.has_min_max:
                lo = st.min if lo is None else min(lo, st.min)
                hi = st.max if hi is None else max(hi, st.max)
    steps = "" if lo is None else f", steps {lo}-{hi}" if lo != hi else f", step {lo}"
    return f"{len(files)} shard(s), {rows:,} rows{steps}"


def run_roots(files: list[Path]) -> list[Path]:
    """The run directories these shards belong to, in first-seen order.

    A shard belongs to run ``R`` when it lies under ``R/tokens/`` and ``R`` is a
    run directory. A folder given to a command may hold several runs, or a
    run may be reached through its ``tokens/`` folder or a single shard: each
    of these readings finds the same runs.
    """
    roots: dict[Path, None] = {}
    seen: dict[Path, Path | None] = {}
    for f in files:
        d = Path(f).parent
        if d not in seen:
            seen[d] = None
            # the path as given first (messages name the run as the user spelt it), then resolved:
            # a shard given from inside its tokens/ folder has no spelt-out parents
            real = Path(os.path.realpath(d))  # a link to a run's tokens/ folder, or a shard given from inside it
            for a in (d, *d.parents, real, *real.parents):
                if a.name == TOKENS and is_run_dir(a.parent):
                    seen[d] = a.parent
                    break
        root = seen[d]
        if root is not None:
            roots[root] = None
    return list(roots)


def input_runs(run: str | os.PathLike, files: list[Path]) -> list[Path]:
    """The run directories an input touches: those its shards belong to, and a given run (or folder of runs)
    even before it holds any shard.

    ``run`` is what the user gave: a run directory, its ``tokens/`` folder, a
    folder of runs, or shards.
    """
    p = Path(run)
    real = Path(os.path.realpath(p))
    given = p.parent if p.name == TOKENS and not is_run_dir(p) and is_run_dir(p.parent) else p
    if real.name == TOKENS and not is_run_dir(real) and is_run_dir(real.parent):  # a link to a run's tokens/
        given = real.parent
    roots = run_roots(files)
    resolved = {r.resolve() for r in roots}
    candidates = [given] if is_run_dir(given) else []
    if given.is_dir() and not is_run_dir(given):  # a folder of runs: also those without a shard yet
        found = {m.parent for m in given.rglob(MANIFEST)} | {t.parent for t in given.rglob(TOKENS) if t.is_dir()}
        candidates += sorted(d for d in found if is_run_dir(d) and TOKENS not in d.relative_to(given).parts)
    for c in candidates:
        rc = c.resolve()
        if rc not in resolved and not any(r in rc.parents for r in resolved):
            roots.append(c)
            resolved.add(rc)
    return roots


@dataclass(frozen=True)
class Contents:
    """What a reader must say about the runs of its input before it reads them."""

    warning: str | None
    """the incomplete-run warning (None when every run is complete)."""
    notes: list[str]
    """runs written without a shard index: read as they are, said once."""


def check_contents(run: str | os.PathLike, files: list[Path], rows: Mapping[Path, int] | None = None) -> Contents:
    """Hold the shards about to be read against each run's completion record and shard index.

    A complete run whose shards disagree with its index is refused
    (:class:`ShardIndexError`); an incomplete one says how in its warning. A
    run without an index (written before runs kept one) is read as before,
    with a note. Only the index, sizes and (given) footer row counts are read.
    """
    roots = input_runs(run, files)
    given = Path(os.path.realpath(run)) if Path(run).is_dir() else None
    resolved = {f: located(f) for f in files} if roots else {}
    open_runs: list[tuple[Path, Completion, list[str]]] = []
    legacy: list[Path] = []
    unhashed: list[Path] = []
    for r in roots:
        c = completion(r)
        problems = _run_problems(r, files, rows or {}, given, resolved)
        if problems is None:
            legacy.append(r)
            problems = []
        elif not hashed(r, TOKENS):
            unhashed.append(r)
        if c is not None and not c.complete:
            open_runs.append((r, c, problems))
        elif problems:
            more = f" (and {len(problems) - 1} more disagreement(s))" if len(problems) > 1 else ""
            raise ShardIndexError(
                f"{r}: {problems[0]}{more}; the run no longer holds what it recorded",
                hint=f"restore the run from a copy, or move foreign files out of its {TOKENS}/ folder",
            )
    notes = _unchecked_notes(legacy, unhashed)
    if not open_runs:
        return Contents(None, notes)
    first, c, problems = open_runs[0]
    others = f" (and {len(open_runs) - 1} more of the {len(roots)} runs in {run})" if len(open_runs) > 1 else ""
    disagree = f"; its shards disagree with its index: {'; '.join(problems[:2])}" if problems else ""
    return Contents(
        f"{first} is an incomplete run ({c.reason}: killed, or still being written){others}; "
        f"read what is there: {contents_summary(files)}{disagree}",
        notes,
    )


def _unchecked_notes(legacy: list[Path], unhashed: list[Path]) -> list[str]:
    """The notes for runs read with less checking than a run of today gets: no index, or no checksums."""
    notes = []
    if legacy:
        others = f" (and {len(legacy) - 1} more run(s))" if len(legacy) > 1 else ""
        notes.append(
            f"{legacy[0]}{others} has no shard index (written by an older mismatchscope, or by hand): "
            "its shards are read as they are, unchecked for missing or foreign ones"
        )
    if unhashed:
        others = f" (and {len(unhashed) - 1} more run(s))" if len(unhashed) > 1 else ""
        notes.append(
            f"{unhashed[0]}{others} was written before runs recorded their shards' checksums: "
            "a shard damaged in place is not detected"
        )
    return notes


def _run_problems(
    run: Path, files: list[Path], rows: Mapping[Path, int], given: Path | None, resolved: Mapping[Path, Path]
) -> list[str] | None:
    """The disagreements of one run's ``tokens/`` with its index; None for a run that keeps no index."""
    base = Path(os.path.realpath(run / TOKENS))
    mine = [f for f in files if base in resolved[f].parents]
    real = Path(os.path.realpath(run))
    whole = given is not None and (given in (real, base) or given in real.parents)
    problems = shard_problems(run, TOKENS, mine, rows, whole, resolved)
    if problems is not None:
        return problems
    if (read_manifest(run) or {}).get("shard_index") and mine:
        return [f"its shard index ({INDEX}/{TOKENS}.jsonl) is missing"]
    return None if mine else []


def incomplete_message(run: str | os.PathLike, files: list[Path]) -> str | None:
    """The one-line warning when a run among the input's is without its completion record; None otherwise
    (a complete run whose shards disagree with its index is refused: :func:`check_contents`)."""
    return check_contents(run, files).warning
