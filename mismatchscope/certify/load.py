"""The certified tokens of a run, read as recorded: no row dropped, no value cleaned away.

The tokens are read by the same reader as ``report``'s (:func:`mismatchscope.reader.read_batches`):
the same checks of types, ranges and damaged pages, the same one-line errors,
and no cast of its own (a column of text or booleans cast to float64 would
make numbers no side recorded). The reader widens float32 logprobs to float64
exactly, so the bytes compared are the bytes recorded. Where the reader leaves
rows out of the statistics (a non-finite logprob), a certificate over "every
token except the NaNs" would claim more than it holds: such a run, one with no
token, or one with a token recorded twice is refused with the first offending
token named.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import InputError, NoTokensError
from ..reader import Hygiene, Source, open_source, read_batches, token_keys
from ..schema import LOGPROB_SENTINEL, REQUIRED_NAMES
from .compare import PAIRINGS, Partial, Tokens

LOGPROB_COLUMNS = tuple(dict.fromkeys(c for p in PAIRINGS for c in (p.left, p.right)))
STEP_COLUMNS = ("sampler_step", "trainer_step")


@dataclass(frozen=True)
class Loaded:
    source: Source
    tokens: Tokens
    steps: dict[str, np.ndarray]
    """``sampler_step``/``trainer_step`` per token, where the run records both (on the rows of ``tokens.present``'s
    ``"steps"`` when only some shards do)."""
    root: Path | None
    """the run directory (manifest, routes), None for plain shards."""


def load(path: str | os.PathLike, mapping: Mapping[str, str] | None = None) -> Loaded:
    """Every token of the run with each logprob column some shard holds: a column only some shards hold is read
    from those, and the rows of the others are marked as lacking it (``Tokens.present``), never the whole run."""
    source = open_source(path, mapping)
    optional = [c for c in (*LOGPROB_COLUMNS, *STEP_COLUMNS) if c not in REQUIRED_NAMES and source.in_any(c)]
    wanted = ["sequence_id", "position", "token_id", *(c for c in LOGPROB_COLUMNS if c in REQUIRED_NAMES), *optional]
    parts: dict[str, list[np.ndarray]] = {c: [] for c in wanted}
    held: dict[str, list[np.ndarray]] = {c: [] for c in optional}
    keys: tuple[list[np.ndarray], list[np.ndarray]] = ([], [])
    dropped: tuple[list[np.ndarray], list[np.ndarray]] = ([], [])
    hygiene = Hygiene()
    for part in source.holding(optional):
        for raw in read_batches(part, [c for c in optional if part.has(c)]):
            batch = raw.clean(hygiene)
            n = len(batch["sequence_id"])
            for c in wanted:
                parts[c].append(np.asarray(batch[c]) if c in batch else _lacking(c, n))
            for c in optional:
                held[c].append(np.full(n, c in batch))
            for into, values in zip(keys, token_keys(batch), strict=True):
                into.append(values)
            if batch.dropped is not None:
                dropped[0].append(batch.dropped[0])
                dropped[1].append(batch.dropped[1])
    cols = {c: np.concatenate(v) if v else np.zeros(0) for c, v in parts.items()}
    if not keys[0]:
        raise NoTokensError(
            f"{path}: the run holds no token: there is nothing to certify",
            hint="certify a run with at least one completion token",
        )
    seq_all, pos_all = np.concatenate(keys[0]), np.concatenate(keys[1])
    order = np.lexsort((pos_all, seq_all))
    _refuse_duplicates(seq_all[order], pos_all[order])
    if hygiene.nonfinite_dropped:
        _refuse_dropped(path, hygiene, np.concatenate(dropped[0]), np.concatenate(dropped[1]), source)
    order = np.lexsort((cols["position"], cols["sequence_id"]))
    cols = {c: v[order] for c, v in cols.items()}
    present = _present(held, order, source, optional)
    logprobs = {c: np.where(cols[c] == LOGPROB_SENTINEL, -np.inf, cols[c]) for c in LOGPROB_COLUMNS if c in cols}
    for c, v in logprobs.items():
        rows = present[c].rows if c in present else slice(None)
        _refuse_nonfinite(path, c, v[rows], cols["sequence_id"][rows], cols["position"][rows])
    steps = {c: cols[c] for c in STEP_COLUMNS if c in cols}
    if len(steps) == len(STEP_COLUMNS) and any(c in present for c in STEP_COLUMNS):
        both = [present[c] if c in present else None for c in STEP_COLUMNS]
        rows = np.logical_and.reduce([p.rows if p is not None else np.ones(len(order), bool) for p in both])
        present["steps"] = Partial(
            rows, max((p.shards_without for p in both if p is not None), default=0), len(source.files)
        )
    elif len(steps) != len(STEP_COLUMNS):
        steps = {}
    tokens = Tokens(cols["sequence_id"], cols["position"], cols["token_id"], logprobs, present)
    return Loaded(source, tokens, steps, _root(path, source))


def _lacking(column: str, n: int) -> np.ndarray:
    """The placeholder of a column on the rows of a shard that lacks it (never compared: ``Tokens.present``)."""
    return np.full(n, -1, np.int64) if column in STEP_COLUMNS else np.full(n, np.nan)


def _present(
    held: dict[str, list[np.ndarray]], order: np.ndarray, source: Source, optional: list[str]
) -> dict[str, Partial]:
    """The rows holding each column that only some shards hold (columns every shard holds need no entry)."""
    out = {}
    for c in optional:
        rows = np.concatenate(held[c])[order] if held[c] else np.zeros(0, bool)
        if not rows.all():
            without = sum(1 for h in source.present if c not in h)
            out[c] = Partial(rows, without, len(source.files))
    return out


def _refuse_dropped(path: Any, hygiene: Hygiene, seq: np.ndarray, pos: np.ndarray, source: Source) -> None:
    """The rows the reader left out of the statistics: a non-finite sampler or trainer logprob."""
    from ..analysis.validate import rescore_hint

    i = int(np.lexsort((pos, seq))[0])
    raise InputError(
        f"{path}: {hygiene.nonfinite_dropped} of {hygiene.rows_read} tokens have a sampler or trainer logprob that "
        f"is not finite (NaN, inf, or a -9999 sentinel; first: sequence {seq[i]} position {pos[i]}): "
        "a non-finite pair cannot be certified",
        hint=rescore_hint(path, source)
        or "find where the run produced it: a bit-equal NaN on both sides is still no logprob",
    )


def _refuse_duplicates(seq: np.ndarray, pos: np.ndarray) -> None:
    """A token on two rows: the same error as every other command's (``report``'s, ``timeline``'s)."""
    from ..errors import DuplicatePositionError

    same = (seq[1:] == seq[:-1]) & (pos[1:] == pos[:-1])
    if same.any():
        i = int(np.flatnonzero(same)[0])
        raise DuplicatePositionError(int(seq[i]), int(pos[i]))


def _refuse_nonfinite(path: Any, column: str, values: np.ndarray, seq: np.ndarray, pos: np.ndarray) -> None:
    bad = ~np.isfinite(values)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise InputError(
            f"{path}: {int(bad.sum())} of {len(values)} {column} values are not finite (NaN, inf, or a -9999 sentinel; "
            f"first: sequence {seq[i]} position {pos[i]} = {values[i]}): a non-finite pair cannot be certified",
            hint="find where the run produced it: a bit-equal NaN on both sides is still no logprob",
        )


def _root(path: str | os.PathLike, source: Source) -> Path | None:
    from ..rundir import is_run_dir, run_roots

    p = Path(path)
    if is_run_dir(p):
        return p
    roots = run_roots(source.files)
    return roots[0] if len(roots) == 1 else None
