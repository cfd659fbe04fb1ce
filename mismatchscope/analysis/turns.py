"""The turns of a multi-turn run, checked exactly and tallied per (sequence, turn), in flat memory.

A sequence's rows may be spread over batches and files, in any order, so
whether its turns are in order cannot be told one batch at a time. Each batch
is reduced instead to one row per run of a (sequence, turn) in it: the run's
lowest and highest position, the lowest and highest ``position -
turn_position`` (the position the turn began at), and its tokens. The rows of
every batch are merged by (sequence, turn) now and then; at the end a
sequence's turns, in turn order, must cover increasing, disjoint position
ranges, and each turn must begin after the one before ends with its
``turn_position`` at 0 there. A turn that decreases, or a ``turn_position``
that runs on across a turn instead of restarting, fails that, however the
rows were split.

Memory grows with (sequence, turn) pairs, not tokens; what is kept doubles
as the per-(sequence, turn) token counts compare-masks' ``--by turn`` needs
for the sequence rules (a rejected sequence takes its tokens in every turn).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import TurnOrderError

COMPACT_ROWS = 1 << 20
"""merge the collected rows once this many are pending."""

_FIELDS = ("sequence_id", "turn", "pos_min", "pos_max", "start_min", "start_max", "tokens")


@dataclass(frozen=True)
class TurnRows:
    """Per (sequence, turn): its position range, the range of its start positions, its tokens (aligned arrays)."""

    sequence_id: np.ndarray
    turn: np.ndarray
    pos_min: np.ndarray
    pos_max: np.ndarray
    start_min: np.ndarray
    """``position - turn_position``: one value over a well-formed turn."""
    start_max: np.ndarray
    tokens: np.ndarray

    @property
    def size(self) -> int:
        return int(self.sequence_id.size)


def turn_rows(sequence_id: np.ndarray, position: np.ndarray, turn: np.ndarray, turn_position: np.ndarray) -> TurnRows:
    """One batch reduced to a row per run of equal (sequence, turn) in (sequence, position) order."""
    seq = sequence_id.astype(np.int64, copy=False)
    pos = position.astype(np.int64, copy=False)
    trn = turn.astype(np.int64, copy=False)
    start = pos - turn_position.astype(np.int64, copy=False)
    if seq.size > 1:
        ds, dp = np.diff(seq), np.diff(pos)
        if not ((ds > 0) | ((ds == 0) & (dp > 0))).all():
            order = np.lexsort((pos, seq))
            seq, pos, trn, start = seq[order], pos[order], trn[order], start[order]
    brk = np.flatnonzero((seq[1:] != seq[:-1]) | (trn[1:] != trn[:-1])) + 1
    at = np.concatenate(([0], brk)) if seq.size else np.zeros(0, np.intp)
    return _reduced(seq, trn, pos, pos, start, start, np.ones(seq.size, np.int64), at)


def _empty() -> TurnRows:
    e = np.zeros(0, np.int64)
    return TurnRows(e, e, e, e, e, e, e)


def _reduced(seq, trn, pmin, pmax, smin, smax, tokens, at: np.ndarray) -> TurnRows:
    if not at.size:
        return _empty()
    return TurnRows(
        seq[at],
        trn[at],
        np.minimum.reduceat(pmin, at),
        np.maximum.reduceat(pmax, at),
        np.minimum.reduceat(smin, at),
        np.maximum.reduceat(smax, at),
        np.add.reduceat(tokens, at),
    )


class TurnTracker:
    """Feed every batch's :func:`turn_rows`; :meth:`finish` checks the turns and returns the merged rows."""

    def __init__(self) -> None:
        self._parts: list[TurnRows] = []
        self._pending = 0

    def add(self, rows: TurnRows | None) -> None:
        if rows is None or not rows.size:
            return
        self._parts.append(rows)
        self._pending += rows.size
        if self._pending >= COMPACT_ROWS:
            self._compact()

    def _compact(self) -> None:
        if not self._parts:
            return
        cols = [np.concatenate([getattr(p, f) for p in self._parts]) for f in _FIELDS]
        order = np.lexsort((cols[1], cols[0]))
        seq, trn, pmin, pmax, smin, smax, tokens = (c[order] for c in cols)
        at = np.concatenate(([0], np.flatnonzero((seq[1:] != seq[:-1]) | (trn[1:] != trn[:-1])) + 1))
        self._parts = [_reduced(seq, trn, pmin, pmax, smin, smax, tokens, at)]
        self._pending = 0

    def finish(self) -> TurnRows:
        """The rows merged per (sequence, turn), sorted; raises :class:`TurnOrderError` on turns out of order."""
        if not self._parts:
            return _empty()
        self._compact()
        rows = self._parts[0]
        check_turns(rows)
        return rows


def check_turns(r: TurnRows) -> None:
    """The checks of the module docstring, on rows merged per (sequence, turn) and sorted."""
    same = r.sequence_id[1:] == r.sequence_id[:-1]
    overlap = np.flatnonzero(same & (r.pos_max[:-1] >= r.pos_min[1:]))
    if overlap.size:
        i = int(overlap[0])
        raise TurnOrderError(
            f"turn decreases within sequence {int(r.sequence_id[i])}: position {int(r.pos_min[i + 1])} is in "
            f"turn {int(r.turn[i + 1])}, the later position {int(r.pos_max[i])} in turn {int(r.turn[i])}",
            hint="a sequence's turns count up with its positions",
        )
    late = np.flatnonzero(same & (r.start_min[1:] <= r.pos_max[:-1]))
    if late.size:
        i = int(late[0]) + 1
        raise TurnOrderError(
            f"turn_position does not restart where turn {int(r.turn[i])} of sequence {int(r.sequence_id[i])} "
            f"begins (position {int(r.pos_min[i])} has turn_position {int(r.pos_min[i] - r.start_min[i])})",
            hint="turn_position counts each turn's tokens from 0",
        )
    uneven = np.flatnonzero((r.start_min != r.start_max) | (r.start_min < 0))
    if uneven.size:
        i = int(uneven[0])
        raise TurnOrderError(
            f"turn_position does not count up with position within turn {int(r.turn[i])} of sequence "
            f"{int(r.sequence_id[i])}",
            hint="turn_position counts each turn's tokens from 0, one a position",
        )


def tokens_by_turn(rows: TurnRows, sequences: np.ndarray | None = None) -> np.ndarray:
    """Tokens per turn index (``[turns]``), of every sequence or only of ``sequences`` (sorted ids)."""
    keep = slice(None) if sequences is None else np.isin(rows.sequence_id, sequences, assume_unique=False)
    turn, tokens = rows.turn[keep], rows.tokens[keep]
    n = int(rows.turn.max()) + 1 if rows.size else 0
    return np.bincount(turn, weights=tokens, minlength=n).astype(np.int64)
