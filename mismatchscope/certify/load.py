"""The certified tokens of a run, read as recorded: no row dropped, no value cleaned away.

The analysis reader drops non-finite rows with a warning, which is right for
statistics and wrong here: a certificate over "every token except the NaNs"
would claim more than it holds. So the values are read raw, and a run with a
non-finite logprob, no token, or a token recorded twice is refused with the
first offending token named.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq

from ..arrow import to_numpy
from ..errors import InputError, NoTokensError
from ..reader import Source, open_source
from ..schema import LOGPROB_SENTINEL
from .compare import PAIRINGS, Tokens

LOGPROB_COLUMNS = tuple(dict.fromkeys(c for p in PAIRINGS for c in (p.left, p.right)))
STEP_COLUMNS = ("sampler_step", "trainer_step")


@dataclass(frozen=True)
class Loaded:
    source: Source
    tokens: Tokens
    steps: dict[str, np.ndarray]
    """``sampler_step``/``trainer_step`` per token, where the run records both."""
    root: Path | None
    """the run directory (manifest, routes), None for plain shards."""


def load(path: str | os.PathLike, mapping: Mapping[str, str] | None = None) -> Loaded:
    source = open_source(path, mapping)
    wanted = ["sequence_id", "position", "token_id", *(c for c in LOGPROB_COLUMNS if source.has(c))]
    steps = [c for c in STEP_COLUMNS if source.has(c)]
    wanted += steps if len(steps) == len(STEP_COLUMNS) else []
    parts: dict[str, list[np.ndarray]] = {c: [] for c in wanted}
    for f in source.files:
        table = pq.read_table(f, columns=[source.mapping.get(c, c) for c in wanted])
        for c in wanted:
            col = table.column(source.mapping.get(c, c))
            if col.null_count and c not in LOGPROB_COLUMNS:
                raise InputError(
                    f"{f}: column {c!r} has {col.null_count} null value(s)",
                    hint="every certified token needs its sequence, position and token id",
                )
            values = to_numpy(col.cast("float64") if c in LOGPROB_COLUMNS else col.cast("int64"))
            parts[c].append(np.asarray(values, dtype=np.float64 if c in LOGPROB_COLUMNS else np.int64))
    cols = {c: np.concatenate(v) if v else np.zeros(0) for c, v in parts.items()}
    n = len(cols["sequence_id"])
    if n == 0:
        raise NoTokensError(
            f"{path}: the run holds no token: there is nothing to certify",
            hint="certify a run with at least one completion token",
        )
    order = np.lexsort((cols["position"], cols["sequence_id"]))
    cols = {c: v[order] for c, v in cols.items()}
    _refuse_duplicates(path, cols["sequence_id"], cols["position"])
    logprobs = {c: np.where(cols[c] == LOGPROB_SENTINEL, -np.inf, cols[c]) for c in LOGPROB_COLUMNS if c in cols}
    for c, v in logprobs.items():
        _refuse_nonfinite(path, c, v, cols["sequence_id"], cols["position"])
    tokens = Tokens(cols["sequence_id"], cols["position"], cols["token_id"], logprobs)
    return Loaded(source, tokens, {c: cols[c] for c in steps if c in cols}, _root(path, source))


def _refuse_duplicates(path: Any, seq: np.ndarray, pos: np.ndarray) -> None:
    same = (seq[1:] == seq[:-1]) & (pos[1:] == pos[:-1])
    if same.any():
        i = int(np.flatnonzero(same)[0])
        raise InputError(
            f"{path}: sequence {seq[i]} position {pos[i]} is recorded {int(same.sum()) + 1} or more times",
            hint="a certificate pairs each token once; remove the duplicate shards",
        )


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
