"""Turns: which assistant turn of a multi-turn conversation each token belongs to, read from a loss mask.

An agentic trajectory is several assistant turns separated by tool or
environment output that the loss masks out. Every stack that trains on such
trajectories keeps one 0/1 mask over the whole response (verl's agent loop
``response_mask``, SkyRL's ``loss_mask``, slime's ``loss_masks``, NeMo-RL's
``token_loss_mask``, ROLL's ``response_mask``): a turn is a maximal run of
1s, and the 0s between two runs are the tool span. The importers keep only the
1s (``position`` counts kept tokens), so the turn structure survives only as
the columns this module derives: ``turn`` (the run's 0-based index) and
``turn_position`` (the token's index within its run).

One derivation for every importer and the Recorder, so a mask means the same
turns wherever it is read. A mask with one run of 1s (prompt, then one
completion, then padding) is one turn: no columns, and the run is written as
before (``schema.TURN_COLUMNS``).
"""

from __future__ import annotations

import numpy as np

from .errors import InputError, TurnOrderError


def mask_turns(kept: np.ndarray, lengths: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray] | None:
    """``(turn, turn_position)`` of each kept token (int32, in order), or None when every row is one turn.

    ``kept``: booleans (or 0/1) over the tokens of one row, or of many rows laid end to end with
    ``lengths`` tokens each; a run of kept tokens never continues across two rows. Leading and trailing
    0s (the prompt, the padding) open no turn: only a 0 *between* two 1s of a row does.
    """
    kept = np.asarray(kept) != 0
    n = kept.size
    if n == 0:
        return None
    prev = np.zeros(n, dtype=bool)
    prev[1:] = kept[:-1]
    rows = None if lengths is None else np.asarray(lengths, dtype=np.int64)
    if rows is not None:
        starts_at = np.concatenate(([0], np.cumsum(rows)[:-1]))[rows > 0]
        prev[starts_at] = False
    start = kept & ~prev
    runs = np.cumsum(start, dtype=np.int64)
    turn = runs - 1
    if rows is not None:
        starts_at = np.concatenate(([0], np.cumsum(rows)[:-1]))[rows > 0]
        before = runs[starts_at] - start[starts_at]  # runs opened in earlier rows
        turn -= np.repeat(before, rows[rows > 0])
    turn_k = turn[kept]
    if not turn_k.size or int(turn_k.max()) == 0:
        return None
    idx = np.arange(n, dtype=np.int64)
    opened = np.maximum.accumulate(np.where(start, idx, 0))
    return turn_k.astype(np.int32), (idx - opened)[kept].astype(np.int32)


def explicit_turns(turn: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """``(turn, turn_position)`` from one sequence's explicit turn of each kept token (in position order), or
    None when it is all turn 0. A turn below an earlier token's raises :class:`TurnOrderError`."""
    t = np.asarray(turn)
    if t.size == 0:
        return None
    if t.dtype.kind == "f" and not (np.isfinite(t).all() and np.array_equal(t, np.round(t))):
        raise InputError("turn must hold whole numbers, one per token")
    t = t.astype(np.int64)
    if int(t.min()) < 0:
        raise InputError(f"turn {int(t.min())} is negative: turns count from 0")
    down = np.flatnonzero(np.diff(t) < 0)
    if down.size:
        i = int(down[0]) + 1
        raise TurnOrderError(
            f"turn decreases within a sequence: {int(t[i - 1])} then {int(t[i])} at kept token {i}",
            hint="a sequence's turns count up from its first assistant turn; write one sequence per trajectory",
        )
    if int(t.max()) == 0:
        return None
    first = np.concatenate(([True], t[1:] != t[:-1]))
    idx = np.arange(t.size, dtype=np.int64)
    opened = np.maximum.accumulate(np.where(first, idx, 0))
    return t.astype(np.int32), (idx - opened).astype(np.int32)


def row_turns(
    rows: np.ndarray, position: np.ndarray, turn: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray] | None:
    """``(turn, turn_position)`` of the kept tokens of a padded ``[B, T]`` batch, given in row-major order by their
    row and position along T (``np.nonzero`` of the mask); None when every row is one turn.

    Without ``turn`` the mask's runs are the turns: a kept token opens a turn where the token before it in its
    row was not kept. With ``turn`` (each kept token's explicit turn), a turn below an earlier one of its row
    raises :class:`TurnOrderError`. ``turn_position`` is the position's distance from its turn's first kept
    token, so a masked token inside an explicit turn leaves a gap there as it does in ``position``.
    """
    n = rows.size
    if n == 0:
        return None
    new_row = np.ones(n, dtype=bool)
    new_row[1:] = rows[1:] != rows[:-1]
    if turn is None:
        opened = new_row.copy()
        opened[1:] |= position[1:] - position[:-1] > 1
        runs = np.cumsum(opened, dtype=np.int64)
        t = runs - np.maximum.accumulate(np.where(new_row, runs, 0))
    else:
        t = np.asarray(turn).astype(np.int64)
        down = np.flatnonzero((np.diff(t) < 0) & ~new_row[1:]) + 1
        if down.size:
            i = int(down[0])
            raise TurnOrderError(
                f"turn decreases along row {int(rows[i])}: {int(t[i - 1])} at position {int(position[i - 1])}, "
                f"then {int(t[i])} at position {int(position[i])}",
                hint="a row's turn ids count up along T",
            )
        if int(t.min()) < 0:
            raise InputError(f"turn {int(t.min())} is negative: turns count from 0")
        opened = new_row.copy()
        opened[1:] |= t[1:] != t[:-1]
    if int(t.max()) == 0:
        return None
    idx = np.arange(n)
    first = np.maximum.accumulate(np.where(opened, idx, 0))
    return t.astype(np.int32), (position - position[first]).astype(np.int32)
