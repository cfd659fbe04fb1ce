"""Routing metrics of an MoE run: which tokens the two sides sent through different experts.

A token whose router picks a different top-k *set* in the sampler than in the
trainer goes through different weights; its logprob moves by far more than
rounding. The scan reads a run's ``routes/`` shards (located by
:func:`mismatchscope.routing.io.locate_routes`) once and counts, per MoE
layer (named by its decoder-layer index), how often the two sides' sets differ:

* completion rows (the row whose ``token_position`` is ``j`` predicts
  completion token ``j``) and prompt rows apart;
* a token is flipped at layer ``l`` when the two sets differ there, and
  flipped when it is flipped in any layer where both sides have a capture;
* a side's MoE-layer entry that is null or all zeros is a missing capture
  (engines zero-fill what they failed to write), never expert 0: counted,
  reported, and left out of every rate;
* flips by the trainer's router margin (how close its k-th and (k+1)-th
  scores were), where the run has it.

The shards are read batch by batch: memory is that of one batch of ids plus
one key and one flag per completion row (the :class:`~.route_join.FlipIndex`
the token pass joins on), flat in the number of layers. Decoding and checking
a batch's columns is :mod:`.route_columns`; comparing sets, :mod:`.expert_sets`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa

from ..arrow import to_numpy
from ..errors import FileFormatError
from ..routing.io import RoutesRun, check_unique_rows
from ..routing.layout import ROUTES, SIDES, TRAINER_MARGIN, RoutingMeta
from .expert_sets import compare_sides
from .route_columns import EXPERT_COLUMNS, MARGIN_EDGES, margin_counts, side_ids
from .route_join import FlipIndex

ROUTE_BATCH_ROWS = 1 << 14
"""route rows analysed at once: 40 layers x top-8 of them is 5 MB of ids per side (the reader queues a few
batches per row group decoded ahead, so this sets most of the memory)."""


@dataclass
class LayerFlips:
    """Per MoE layer: rows where both sides have a capture, and those whose sets differ; plus the any-layer counts."""

    compared: np.ndarray
    flipped: np.ndarray
    rows: int = 0
    rows_compared: int = 0
    rows_flipped: int = 0

    @classmethod
    def zeros(cls, n: int) -> LayerFlips:
        return cls(np.zeros(n, np.int64), np.zeros(n, np.int64))

    def add(self, compared: np.ndarray, flipped: np.ndarray) -> None:
        """``compared``, ``flipped``: ``[rows, moe]`` booleans of these rows."""
        self.compared += compared.sum(axis=0)
        self.flipped += flipped.sum(axis=0)
        self.rows += compared.shape[0]
        self.rows_compared += int(compared.any(axis=1).sum())
        self.rows_flipped += int(flipped.any(axis=1).sum())


@dataclass
class RoutingScan:
    """Everything the routes say, before the tokens are joined."""

    run: RoutesRun
    completion: LayerFlips
    prompt: LayerFlips
    missing: dict[str, int]
    """side -> MoE-layer entries missing (null or all zero), over every row."""
    entries: int = 0
    """rows x MoE layers."""
    margin_compared: np.ndarray = field(default_factory=lambda: np.zeros(len(MARGIN_EDGES), np.int64))
    margin_flipped: np.ndarray = field(default_factory=lambda: np.zeros(len(MARGIN_EDGES), np.int64))
    has_margin: bool = False
    index: FlipIndex | None = None

    @property
    def meta(self) -> RoutingMeta:
        return self.run.meta

    @property
    def both_sides(self) -> bool:
        return self.run.both_sides


@dataclass
class _BatchPart:
    """What one batch of route rows contributes; computed on a worker thread, folded in file order."""

    seq: np.ndarray
    input_position: np.ndarray
    missing: dict[str, int]
    entries: int
    flips: tuple | None = None
    """(completion compared, completion flipped, prompt compared, prompt flipped): ``[rows, moe]`` each."""
    completion_keys: tuple | None = None
    """(sequence_id, token_position, [compared_any, flipped_any]) of the completion rows."""
    margins: tuple | None = None
    """(compared, flipped) counts per margin bucket."""


@dataclass
class _Keys:
    """The row keys the fold gathers: every row's (for the uniqueness check), the completion rows' (for the index)."""

    seq: list[np.ndarray] = field(default_factory=list)
    input_position: list[np.ndarray] = field(default_factory=list)
    completion: tuple[list[np.ndarray], list[np.ndarray], list[np.ndarray]] = field(
        default_factory=lambda: ([], [], [])
    )
    """(sequence ids, token positions, flags) of the completion rows, batch by batch."""


def scan_routes(run: RoutesRun, batch_rows: int = ROUTE_BATCH_ROWS, workers: int | None = None) -> RoutingScan:
    """Read every route shard once: per-layer flips, missing captures, margins, and the completion rows' flip index.

    Batches are decoded ahead by the reader's threads and analysed on ``workers`` threads (numpy releases the
    GIL), then folded in file order: the same numbers, and the first bad batch's error, on any number of cores.
    """
    from ..reader.streaming import _record_batches
    from .parallel import ordered_map

    meta = run.meta
    sides = [s for s in SIDES if getattr(meta, s).recorded]
    n_moe = len(meta.moe_layers)
    scan = RoutingScan(run, LayerFlips.zeros(n_moe), LayerFlips.zeros(n_moe), dict.fromkeys(sides, 0))
    schema_names = _check_schemas(run, [EXPERT_COLUMNS[s] for s in sides])
    scan.has_margin = scan.both_sides and all(TRAINER_MARGIN in n for n in schema_names)
    cols = ["sequence_id", "input_position", "token_position"] + [EXPERT_COLUMNS[s] for s in sides]
    cols += [TRAINER_MARGIN] if scan.has_margin else []

    def one_batch(item: tuple[Path, pa.RecordBatch]) -> _BatchPart:
        return _scan_batch(item[0], item[1], meta, sides, scan.both_sides, scan.has_margin)

    keys = _Keys()
    batches = ((f, rb) for f, rb in _record_batches(run.files, cols, batch_rows) if rb.num_rows)
    for part in ordered_map(one_batch, batches, workers):
        _fold(scan, keys, part)
    check_unique_rows(run.root / ROUTES, keys.seq, keys.input_position)
    if scan.both_sides:
        scan.index = FlipIndex.build(*keys.completion)
    return scan


def _fold(scan: RoutingScan, keys: _Keys, part: _BatchPart) -> None:
    """Add one batch's counts to the scan and its keys to those gathered, in file order."""
    keys.seq.append(part.seq)
    keys.input_position.append(part.input_position)
    scan.entries += part.entries
    for s, n in part.missing.items():
        scan.missing[s] += n
    if part.flips is not None:
        scan.completion.add(part.flips[0], part.flips[1])
        scan.prompt.add(part.flips[2], part.flips[3])
    if part.completion_keys is not None:
        for gathered, k in zip(keys.completion, part.completion_keys, strict=True):
            gathered.append(k)
    if part.margins is not None:
        scan.margin_compared += part.margins[0]
        scan.margin_flipped += part.margins[1]


def _scan_batch(
    f: Path, rb: pa.RecordBatch, meta: RoutingMeta, sides: list[str], both: bool, margins: bool
) -> _BatchPart:
    n = rb.num_rows
    seq = to_numpy(rb.column("sequence_id")).astype(np.int64, copy=False)
    tok = rb.column("token_position")
    is_comp = ~to_numpy(tok.is_null()).astype(bool) if tok.null_count else np.ones(n, bool)
    got = {s: side_ids(rb.column(EXPERT_COLUMNS[s]), meta, EXPERT_COLUMNS[s], str(f), n) for s in sides}
    part = _BatchPart(
        seq,
        to_numpy(rb.column("input_position")).astype(np.int64, copy=False),
        {s: int(ids.missing.sum()) for s, ids in got.items()},
        n * len(meta.moe_layers),
    )
    if not both:
        return part
    compared, flipped = compare_sides(got["sampler"], got["trainer"])
    all_comp = bool(is_comp.all())
    c_cmp, c_flp = (compared, flipped) if all_comp else (compared[is_comp], flipped[is_comp])
    part.flips = (c_cmp, c_flp, compared[~is_comp], flipped[~is_comp])
    tpos = to_numpy(tok.fill_null(0) if tok.null_count else tok).astype(np.int64)
    part.completion_keys = (
        seq if all_comp else seq[is_comp],
        tpos if all_comp else tpos[is_comp],
        np.stack([c_cmp.any(axis=1), c_flp.any(axis=1)], axis=1),
    )
    if margins:
        part.margins = margin_counts(rb.column(TRAINER_MARGIN), meta, compared & is_comp[:, None], flipped, str(f))
    return part


def _check_schemas(run: RoutesRun, needed: list[str]) -> list[set[str]]:
    import pyarrow.parquet as pq

    out = []
    for f in run.files:
        try:
            names = set(pq.read_schema(f).names)
        except (pa.ArrowException, OSError) as e:
            raise FileFormatError(f"{f}: not a Parquet file, or truncated ({str(e).splitlines()[0][:160]})") from None
        miss = [c for c in ("sequence_id", "input_position", "token_position", *needed) if c not in names]
        if miss:
            raise FileFormatError(
                f"{f}: route shard without column(s) {', '.join(miss)}",
                hint="the manifest says these sides were recorded; see docs/format.md for the layout",
            )
        out.append(names)
    return out
