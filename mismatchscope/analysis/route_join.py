"""The join of a run's routes with its tokens: which token pairs went through different experts.

The route scan leaves one key and two flags per completion row (a
:class:`FlipIndex`); the token pass looks each batch's tokens up in it and
tallies the gap ``|log p - log q|`` of flipped and unflipped tokens apart
(:class:`GapTally`), so the report can say how much of the mismatch the
routing flips carry.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

_POSITION_BITS = 32
"""a completion row's join key is ``rank of its sequence id << 32 | token_position``."""


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
