"""Routing metrics of an MoE run: which tokens the two sides sent through different experts.

A token whose router picks a different top-k *set* in the sampler than in the
trainer goes through different weights; its logprob moves by far more than
rounding. This module reads a run's ``routes/`` shards (layout:
:mod:`mismatchscope.routing.layout`), checks them against the manifest's
:class:`~mismatchscope.routing.layout.RoutingMeta`, and counts, per MoE layer
(named by its decoder-layer index), how often the two sides' sets differ:

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
one key and one flag per completion row (the :class:`FlipIndex` the token pass
joins on), flat in the number of layers. Sets are compared by sorting each
row's k ids with a sorting network over contiguous columns: a few dozen
vectorised min/max calls per batch instead of a per-row sort.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

import numpy as np
import pyarrow as pa

from ..arrow import to_numpy
from ..errors import FileFormatError, InputError
from ..routing.layout import MANIFEST_KEY, ROUTES, SAMPLER_EXPERTS, SIDES, TRAINER_EXPERTS, TRAINER_MARGIN, RoutingMeta

MARGIN_EDGES = (0.0, 1e-4, 1e-3, 1e-2, 1e-1)
"""lower edges of the trainer-margin buckets (the last one is open): a flip is expected where the margin is small."""
ROUTE_BATCH_ROWS = 1 << 14
"""route rows analysed at once: 40 layers x top-8 of them is 5 MB of ids per side (the reader queues a few
batches per row group decoded ahead, so this sets most of the memory)."""
EXPERT_COLUMNS = {"sampler": SAMPLER_EXPERTS, "trainer": TRAINER_EXPERTS}
"""each side's column of expert ids."""
_POSITION_BITS = 32
"""a completion row's join key is ``rank of its sequence id << 32 | token_position``."""
_NETWORK_MAX_K = 32
"""up to this top-k the columns are sorted by a network; beyond it by ``np.sort``."""


@dataclass(frozen=True)
class RoutesRun:
    """A run directory's route shards and what its manifest says about them."""

    root: Path
    files: list[Path]
    meta: RoutingMeta


def locate_routes(files: list[Path]) -> tuple[RoutesRun | None, str | None]:
    """The routes of the run these token shards belong to, and a warning when they cannot be used.

    Routing metrics need one run: a folder holding several runs with routes
    is analysed without them (and says so). A run with ``routes/`` but no
    ``"routing"`` entry in its manifest, or an unreadable entry, is an error.
    """
    from ..rundir import read_manifest, run_roots

    roots = [r for r in run_roots(files) if (r / ROUTES).is_dir()]
    if not roots:
        return None, None
    if len(roots) > 1:
        return None, (
            f"{len(roots)} runs with routes/ in the input ({roots[0]}, {roots[1]}, ...): routing metrics "
            "are per run, none are shown (give one run directory)"
        )
    root = roots[0]
    from ..routing.io import route_shards

    shards = route_shards(root)
    if not shards:
        return None, None
    raw = (read_manifest(root) or {}).get(MANIFEST_KEY)
    if not isinstance(raw, dict):
        raise InputError(
            f"{root}: routes/ holds {len(shards)} shard(s) but the manifest has no {MANIFEST_KEY!r} entry",
            hint="the manifest must say which layers route and how many experts they choose from",
        )
    try:
        meta = RoutingMeta.from_dict(raw)
    except (KeyError, TypeError, ValueError) as e:
        raise InputError(
            f"{root}: the manifest's {MANIFEST_KEY!r} entry cannot be read ({type(e).__name__}: {e})",
            hint="it needs family, num_layers, moe_layers, num_experts and top_k",
        ) from None
    _check_meta(root, meta)
    return RoutesRun(root, shards, meta), None


def _check_meta(root: Path, meta: RoutingMeta) -> None:
    bad = [x for x in meta.moe_layers if not 0 <= x < meta.num_layers]
    if meta.num_layers < 1 or not meta.moe_layers or bad or len(set(meta.moe_layers)) != len(meta.moe_layers):
        raise InputError(
            f"{root}: the manifest's routing entry names MoE layers {list(meta.moe_layers)} for a "
            f"model of {meta.num_layers} decoder layers",
            hint="MoE layers are distinct decoder-layer indices",
        )
    if not 1 <= meta.top_k <= meta.num_experts:
        raise InputError(
            f"{root}: the manifest's routing entry says top_k {meta.top_k} of {meta.num_experts} experts",
            hint="top_k is between 1 and the number of routed experts",
        )


# -- sets: sort each row's k ids ----------------------------------------------------------


@cache
def sorting_network(k: int) -> tuple[tuple[int, int], ...]:
    """Batcher's odd-even merge sort comparators for ``k`` inputs (the power of two above, cut to ``k``).

    A comparator that touches a padding input never swaps (the padding is
    larger than every id), so it is simply left out.
    """
    n = 1
    while n < k:
        n *= 2
    pairs: list[tuple[int, int]] = []

    def merge(lo: int, hi: int, r: int) -> None:
        step = r * 2
        if step < hi - lo:
            merge(lo, hi, step)
            merge(lo + r, hi, step)
            pairs.extend((i, i + r) for i in range(lo + r, hi - r, step))
        else:
            pairs.append((lo, lo + r))

    def sort(lo: int, hi: int) -> None:
        if hi - lo >= 1:
            mid = lo + (hi - lo) // 2
            sort(lo, mid)
            sort(mid + 1, hi)
            merge(lo, hi, 1)

    sort(0, n - 1)
    return tuple((i, j) for i, j in pairs if j < k)


def sorted_columns(ids: np.ndarray) -> list[np.ndarray]:
    """``ids`` ``[M, k]`` -> its k columns, each row's values sorted ascending across them."""
    k = ids.shape[1]
    if k > _NETWORK_MAX_K:
        s = np.sort(ids, axis=1)
        return [s[:, j] for j in range(k)]
    cols = list(np.ascontiguousarray(ids.T))  # one transposing copy: each column contiguous for the min/max calls
    for i, j in sorting_network(k):
        lo = np.minimum(cols[i], cols[j])
        np.maximum(cols[i], cols[j], out=cols[j])
        cols[i] = lo
    return cols


# -- one side of one batch ----------------------------------------------------------------


@dataclass
class SideIds:
    """One side's ids of a batch at the MoE layers: sorted columns ``k x [rows * moe]`` and what is missing."""

    cols: list[np.ndarray]
    missing: np.ndarray
    """``[rows, moe]``: null row, null entry or all-zero entry."""


def side_ids(col: pa.Array, meta: RoutingMeta, name: str, where: str, rows: int) -> SideIds:
    """Decode and check one ``*_experts`` column of a batch (``where`` names the shard in errors)."""
    L, k, moe = meta.num_layers, meta.top_k, np.asarray(meta.moe_layers)
    at = _layer_index(meta)
    if isinstance(col, pa.ChunkedArray):
        col = col.combine_chunks()
    if not (
        pa.types.is_list(col.type)
        and pa.types.is_list(col.type.value_type)
        and pa.types.is_integer(col.type.value_type.value_type)
    ):
        raise FileFormatError(
            f"{where}: column {name} is {col.type}, not list<list<int>> indexed [layer][k]",
            hint="write routes with the layout of docs/format.md",
        )
    valid = ~to_numpy(col.is_null()).astype(bool) if col.null_count else np.ones(rows, bool)
    nv = int(valid.sum())
    lens = to_numpy(col.value_lengths().fill_null(L))
    if (lens != L).any():
        r = int(np.flatnonzero(lens != L)[0])
        raise FileFormatError(
            f"{where}: {name} row {r} has {lens[r]} layers; the manifest says {L} decoder layers",
            hint="routes are indexed by every decoder layer, dense layers null",
        )
    inner = col.flatten()
    ilen = to_numpy(inner.value_lengths().fill_null(0)).reshape(nv, L)
    bad = (ilen != 0) & (ilen != k)
    if bad.any():
        r, layer = (int(x[0]) for x in np.nonzero(bad))
        raise FileFormatError(
            f"{where}: {name} layer {layer} of a row holds {ilen[r, layer]} expert ids; the manifest says top_k {k}",
            hint="each MoE layer's entry lists the top-k ids it chose",
        )
    values = inner.flatten()
    if values.null_count:
        raise FileFormatError(
            f"{where}: {name} holds a null expert id inside a layer's list",
            hint="a side that could not record leaves the whole row (or layer) null",
        )
    v = to_numpy(values)
    if v.size and (int(v.max()) >= meta.num_experts or (v.dtype.kind == "i" and int(v.min()) < 0)):
        worst = int(v.max()) if int(v.max()) >= meta.num_experts else int(v.min())
        raise FileFormatError(
            f"{where}: {name} holds expert id {worst}; the model routes to ids 0..{meta.num_experts - 1}",
            hint="routes hold logical expert ids, below the manifest's num_experts",
        )
    if v.size == nv * moe.size * k and (ilen[:, at] == k).all():  # common: the values are the MoE layers' ids in order
        ids = v.reshape(nv, moe.size, k)
    else:
        full = np.zeros((nv * L, k), v.dtype)
        full[(ilen == k).ravel()] = v.reshape(-1, k)
        ids = full.reshape(nv, L, k)[:, at]
    if nv < rows:
        out = np.zeros((rows, moe.size, k), v.dtype)
        out[valid] = ids
        ids = out
    side, repeated = sort_side(ids)
    if repeated is not None:
        r, j = repeated
        raise FileFormatError(
            f"{where}: {name} row {r} names an expert twice in decoder layer {int(moe[j])}",
            hint="a layer's top-k ids are distinct experts",
        )
    return side


def sort_side(ids: np.ndarray) -> tuple[SideIds, tuple[int, int] | None]:
    """``ids`` ``[rows, moe, k]`` (>= 0; all zeros where nothing was captured) -> sorted columns and missing entries,
    and the first ``(row, MoE-layer ordinal)`` that names an expert twice (None when none does)."""
    rows, n_moe, k = ids.shape
    cols = sorted_columns(ids.reshape(-1, k))
    missing = cols[-1] == 0  # ids are >= 0: the largest is 0 only when all are (or nothing was written)
    dup = np.zeros_like(missing)
    for a, b in zip(cols[:-1], cols[1:]):
        dup |= a == b
    dup &= ~missing
    first = None
    if dup.any():
        first = divmod(int(np.flatnonzero(dup)[0]), n_moe)
    return SideIds(cols, missing.reshape(rows, n_moe)), first


def compare_sides(a: SideIds, b: SideIds) -> tuple[np.ndarray, np.ndarray]:
    """``[rows, moe]`` (compared: both sides captured; flipped: compared and the two top-k sets differ)."""
    compared = ~(a.missing | b.missing)
    differ = np.zeros(compared.size, bool)
    for x, y in zip(a.cols, b.cols):
        differ |= x != y
    return compared, differ.reshape(compared.shape) & compared


# -- the scan ----------------------------------------------------------------------------


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
        return self.meta.sampler.recorded and self.meta.trainer.recorded


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


def scan_routes(run: RoutesRun, batch_rows: int = ROUTE_BATCH_ROWS, workers: int | None = None) -> RoutingScan:
    """Read every route shard once: per-layer flips, missing captures, margins, and the completion rows' flip index.

    Batches are decoded ahead by the reader's threads and analysed on ``workers`` threads (numpy releases the
    GIL), then folded in file order: the same numbers, and the first bad batch's error, on any number of cores.
    """
    from ..reader.streaming import _record_batches
    from .parallel import ordered_map

    meta = run.meta
    n_moe = len(meta.moe_layers)
    sides = [s for s in SIDES if getattr(meta, s).recorded]
    scan = RoutingScan(run, LayerFlips.zeros(n_moe), LayerFlips.zeros(n_moe), dict.fromkeys(sides, 0))
    schema_names = _check_schemas(run, [EXPERT_COLUMNS[s] for s in sides])
    scan.has_margin = scan.both_sides and all(TRAINER_MARGIN in n for n in schema_names)
    cols = ["sequence_id", "input_position", "token_position"] + [EXPERT_COLUMNS[s] for s in sides]
    cols += [TRAINER_MARGIN] if scan.has_margin else []

    def one_batch(item: tuple[Path, pa.RecordBatch]) -> _BatchPart:
        return _scan_batch(item[0], item[1], meta, sides, scan.both_sides, scan.has_margin)

    keys_seq, keys_in, comp_seq, comp_pos, comp_flip = [], [], [], [], []
    batches = ((f, rb) for f, rb in _record_batches(run.files, cols, batch_rows) if rb.num_rows)
    for part in ordered_map(one_batch, batches, workers):
        keys_seq.append(part.seq)
        keys_in.append(part.input_position)
        scan.entries += part.entries
        for s, n in part.missing.items():
            scan.missing[s] += n
        if part.flips is not None:
            scan.completion.add(part.flips[0], part.flips[1])
            scan.prompt.add(part.flips[2], part.flips[3])
        if part.completion_keys is not None:
            comp_seq.append(part.completion_keys[0])
            comp_pos.append(part.completion_keys[1])
            comp_flip.append(part.completion_keys[2])
        if part.margins is not None:
            scan.margin_compared += part.margins[0]
            scan.margin_flipped += part.margins[1]
    _check_unique_rows(run, keys_seq, keys_in)
    if scan.both_sides:
        scan.index = FlipIndex.build(comp_seq, comp_pos, comp_flip)
    return scan


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
        part.margins = _margin_counts(rb.column(TRAINER_MARGIN), meta, compared & is_comp[:, None], flipped, str(f))
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


def _margin_counts(
    col: pa.Array, meta: RoutingMeta, compared: np.ndarray, flipped: np.ndarray, where: str
) -> tuple[np.ndarray, np.ndarray]:
    """(compared, flipped) ``[rows, moe]`` entries by bucket of the trainer's router margin at that layer.

    The margins are read in float32 straight from the values buffer (no float64 copy); an entry without a
    margin (a null or NaN) is counted in no bucket. One ``bincount`` over a code per entry (bucket, flipped
    or not, or "not counted") does both counts.
    """
    L, moe = meta.num_layers, _layer_index(meta)
    if isinstance(col, pa.ChunkedArray):
        col = col.combine_chunks()
    lens = to_numpy(col.value_lengths().fill_null(L))
    if (lens != L).any():
        raise FileFormatError(
            f"{where}: {TRAINER_MARGIN} has a row of {int(lens[lens != L][0])} layers; the manifest says {L}",
            hint="margins are indexed by every decoder layer, dense layers null",
        )
    values = col.flatten()
    flat = np.frombuffer(values.buffers()[1], np.float32, len(values), values.offset * 4).reshape(-1, L)[:, moe]
    ok = compared
    if col.null_count:
        valid = ~to_numpy(col.is_null()).astype(bool)
        m = np.zeros((len(col), flat.shape[1]), np.float32)
        m[valid] = flat
        ok = ok & valid[:, None]
    else:
        m = flat
    if values.null_count:  # a null MoE-layer margin: no bucket
        nulls = np.zeros(m.shape, bool)
        nulls[~to_numpy(col.is_null()).astype(bool) if col.null_count else slice(None)] = (
            to_numpy(values.is_null()).astype(bool).reshape(-1, L)[:, moe]
        )
        ok = ok & ~nulls
    nb = len(MARGIN_EDGES)
    code = np.zeros(m.shape, np.uint8)
    for edge in MARGIN_EDGES[1:]:  # a negative margin (a tie read in float) goes with the smallest
        code += m >= np.float32(edge)
    code += flipped.view(np.uint8) * np.uint8(nb)
    code[~(ok & np.isfinite(m))] = 2 * nb
    counts = np.bincount(code.ravel(), minlength=2 * nb + 1)
    return counts[:nb] + counts[nb : 2 * nb], counts[nb : 2 * nb]


def _layer_index(meta: RoutingMeta) -> slice | np.ndarray:
    """The MoE layers as a slice when they are consecutive (a view, not a copy), else as an index array."""
    moe = np.asarray(meta.moe_layers)
    if moe.size and (np.diff(moe) == 1).all():
        return slice(int(moe[0]), int(moe[-1]) + 1)
    return moe


def _check_unique_rows(run: RoutesRun, seqs: list[np.ndarray], inputs: list[np.ndarray]) -> None:
    from ..routing.io import check_unique_rows

    check_unique_rows(run.root / ROUTES, seqs, inputs)


# -- the join with tokens/ -----------------------------------------------------------------


@dataclass(frozen=True)
class FlipIndex:
    """Completion rows by ``(sequence_id, token_position)``: whether both sides were compared, and flipped."""

    seq_U: np.ndarray
    key_R: np.ndarray
    compared_R: np.ndarray
    flipped_R: np.ndarray

    @classmethod
    def build(cls, seqs: list[np.ndarray], pos: list[np.ndarray], flags: list[np.ndarray]) -> FlipIndex:
        s = np.concatenate(seqs) if seqs else np.zeros(0, np.int64)
        p = np.concatenate(pos) if pos else np.zeros(0, np.int64)
        f = np.concatenate(flags) if flags else np.zeros((0, 2), bool)
        seq_U, rank = np.unique(s, return_inverse=True)
        key = (rank.astype(np.int64) << _POSITION_BITS) | p
        order = np.argsort(key, kind="stable")
        return cls(seq_U, key[order], f[order, 0], f[order, 1])

    def lookup(self, seq_T: np.ndarray, pos_T: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Per token: (compared: it has a row with both sides' captures, flipped in any compared layer)."""
        if not self.key_R.size:
            z = np.zeros(seq_T.shape, bool)
            return z, z
        r = np.minimum(np.searchsorted(self.seq_U, seq_T), self.seq_U.size - 1)
        known = self.seq_U[r] == seq_T
        key = (r.astype(np.int64) << _POSITION_BITS) | pos_T.astype(np.int64)
        i = np.minimum(np.searchsorted(self.key_R, key), self.key_R.size - 1)
        hit = known & (self.key_R[i] == key)
        return hit & self.compared_R[i], hit & self.flipped_R[i]


@dataclass
class GapTally:
    """|log p - log q| summed over flipped and unflipped tokens (the token pass adds one batch at a time)."""

    flipped_n: int = 0
    flipped_abs_l: float = 0.0
    unflipped_n: int = 0
    unflipped_abs_l: float = 0.0
    unrouted_n: int = 0
    total_abs_l: float = 0.0

    def add(self, index: FlipIndex, seq_T: np.ndarray, pos_T: np.ndarray, abs_l_T: np.ndarray) -> np.ndarray:
        """Tally one batch; returns its tokens' flipped flags (for the rules' counts)."""
        compared, flipped = index.lookup(seq_T, pos_T)
        unflipped = compared & ~flipped
        self.flipped_n += int(flipped.sum())
        self.flipped_abs_l += float(abs_l_T[flipped].sum())
        self.unflipped_n += int(unflipped.sum())
        self.unflipped_abs_l += float(abs_l_T[unflipped].sum())
        self.unrouted_n += int((~compared).sum())
        self.total_abs_l += float(abs_l_T.sum())
        return flipped

    def merge(self, other: GapTally) -> None:
        for k in ("flipped_n", "flipped_abs_l", "unflipped_n", "unflipped_abs_l", "unrouted_n", "total_abs_l"):
            setattr(self, k, getattr(self, k) + getattr(other, k))
