"""slime and miles routes straight from the ``--dump-details`` train dump, no routes file to write.

R3 runs (``--use-rollout-routing-replay``) keep ``rollout_routed_experts``
in the train data, ``(len(tokens) - 1, layers, top_k)`` int32 per sample; the
format_version 2 train dump transposes every per-sample field into its
``samples`` list, so each sample there holds its routes beside ``tokens``,
``response_lengths`` and ``loss_masks``. Samples are read in the order the
slime importer reads them, so the k-th sample read is the k-th sequence
imported; the check against each sequence's imported tokens catches any
drift (a sample skipped with ``--skip-bad`` shifts the rest).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from ..documents import json_edge
from ..errors import ImportFormatError

ROUTES_FIELD = "rollout_routed_experts"


def is_dump(src: Path) -> bool:
    """A ``--dump-details`` folder (or its ``train_data/``, or one train ``.pt``) rather than a routes JSONL."""
    src = Path(src)
    return src.suffix == ".pt" or (src / "train_data").is_dir() or (src.name == "train_data" and src.is_dir())


def files(src: Path) -> list[tuple[Path, str]]:
    from .slime import SlimeImporter

    return [(f.path, f.rel) for f in SlimeImporter().discover(Path(src))]


@json_edge
def records(path: Path, rel: str, trust_pickle: bool) -> Iterator[tuple[dict[str, Any], dict[str, Any]]]:
    """``(where, record)`` per train sample, the record in the routes-file layout (``sequence_id`` left out)."""
    from .slime import _load

    data = _load(path, rel, trust_pickle)
    samples = data.get("samples") if isinstance(data, dict) else None
    if not isinstance(samples, list):
        raise ImportFormatError("no 'samples' list: not a format_version 2 train dump", file=rel)
    for k, s in enumerate(samples):
        where = {"file": rel, "record": k}
        if not isinstance(s, dict) or s.get(ROUTES_FIELD) is None:
            raise ImportFormatError(
                f"the sample has no {ROUTES_FIELD}: the run did not record routes (--use-rollout-routing-replay)",
                **where,
            )
        tokens = _ints(s.get("tokens"))
        resp = int(np.asarray(_numpy(s.get("response_lengths"))).reshape(-1)[0])
        rec: dict[str, Any] = {
            "prompt_token_ids": tokens[: len(tokens) - resp],
            "completion_token_ids": tokens[len(tokens) - resp :],
            ROUTES_FIELD: _numpy(s[ROUTES_FIELD]),
        }
        if s.get("loss_masks") is not None:
            rec["loss_mask"] = _ints(s["loss_masks"])
        yield where, rec


def _numpy(value: Any) -> Any:
    if hasattr(value, "detach"):  # a torch tensor
        return value.detach().cpu().numpy()
    return value


def _ints(value: Any) -> list[int]:
    if value is None:
        raise ImportFormatError("the sample has no tokens / response_lengths")
    return np.asarray(_numpy(value)).reshape(-1).astype(np.int64).tolist()
