"""SkyRL routes straight from the ``dump_data_batch`` pickles, no routes file to write.

With router replay on, SkyRL's batch holds the sampler's routes beside the
tokens (SkyRL 0.4.0, ``skyrl/train/dataset/preprocess.py``):
``rollout_expert_indices`` as a packed tensor, ``values``
``[sum of real tokens, layers, top_k]`` plus ``cu_seqlens``, one segment per
row over its real (unpadded) tokens, or, in earlier releases, a dense
``[batch, seq, layers, top_k]`` tensor left-padded like ``sequences``; and
``router_padding_mask`` ``[batch, seq]``, True on left padding and on tokens
whose route the engine did not capture (the last token, which is never fed
forward, and anything after it; a release without the mask has every row
read as captured). Those rows hold SkyRL's dummy route
(experts ``0..k-1``: expert 0 with top-1 routing), not a capture: they are
passed on as ``uncaptured`` and stored as missing, whatever they hold.

Each record is keyed by its batch row (``{"file", "record"}``), as the
SkyRL importer keys the sequences it imports, so a row the token import
skipped (a bad record under ``--skip-bad``, a row that trains no token)
takes no other row's routes. The batch padding SkyRL adds itself
(``metadata["pad_size"]``) holds no routes of its own and is not read.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from ..documents import json_edge
from ..errors import ImportFormatError

ROUTES_FIELD = "rollout_expert_indices"


def is_dump(src: Path) -> bool:
    """An ``export_path`` (or its ``dumped_data/``, or one pickle) rather than a routes JSONL."""
    src = Path(src)
    return src.suffix == ".pkl" or (src / "dumped_data").is_dir() or any(src.glob("global_step_*_training_input.pkl"))


def files(src: Path) -> list[tuple[Path, str]]:
    from .skyrl import discover

    return [(f.path, f.rel) for f in discover(Path(src))]


@json_edge
def records(path: Path, rel: str, trust_pickle: bool) -> Iterator[tuple[dict[str, Any], dict[str, Any]]]:
    """``(where, record)`` per batch row, in the routes-file layout (``sequence_id`` left out)."""
    from ._base import SourceFile
    from .skyrl import pad_rows, read_batch

    f = SourceFile(path=path, rel=rel)
    batch = read_batch(f, trust_pickle)
    routes, pad = batch.get(ROUTES_FIELD), batch.get("router_padding_mask")
    if routes is None:
        raise ImportFormatError(
            f"the batch has no {ROUTES_FIELD}: the run did not record routes (router replay off)", file=rel
        )
    seq = np.asarray(batch["sequences"])
    attn = np.asarray(batch["attention_mask"]) != 0
    resp = np.asarray(batch["response_mask"]) != 0
    loss = batch.get("loss_mask")
    width = resp.shape[1]
    for k in range(seq.shape[0] - pad_rows(f, batch, seq.shape[0])):
        where = {"file": rel, "record": k}
        real = int(attn[k].sum())
        start = seq.shape[1] - real  # left-padded: the real tokens are the last `real`
        rows = _rows(routes, k, start, seq.shape[1], rel)
        uncaptured = np.zeros(real, dtype=bool) if pad is None else np.asarray(pad[k, start:], dtype=bool)
        if len(rows) != real or len(uncaptured) != real:
            raise ImportFormatError(f"{len(rows)} route rows for {real} real tokens", **where)
        r = int(resp[k].sum())
        tokens = seq[k, start:].astype(np.int64)
        rec: dict[str, Any] = {
            "prompt_token_ids": tokens[: real - r].tolist(),
            "completion_token_ids": tokens[real - r :].tolist(),
            ROUTES_FIELD: rows,
            "uncaptured": uncaptured,  # SkyRL's dummy route: a missing capture
        }
        if loss is not None:
            rec["loss_mask"] = (np.asarray(loss[k, width - r :]) != 0).astype(int).tolist()
        yield where, rec


def _rows(routes: Any, k: int, start: int, seq_len: int, rel: str) -> np.ndarray:
    if isinstance(routes, tuple):  # packed: values, cu_seqlens
        values, offsets = np.asarray(routes[0]), np.asarray(routes[1]).astype(np.int64)
        if values.ndim != 3 or k + 1 >= len(offsets):
            raise ImportFormatError(f"{ROUTES_FIELD} is not a packed [rows, layers, k] tensor", file=rel)
        return values[offsets[k] : offsets[k + 1]]
    dense = np.asarray(routes)
    if dense.ndim != 4 or dense.shape[1] != seq_len:
        raise ImportFormatError(
            f"{ROUTES_FIELD} is {list(dense.shape)}; expected [batch, {seq_len}, layers, k]", file=rel
        )
    return dense[k, start:]
