"""What the pictures need beyond the report, gathered in the same analysis
pass (``analyse(..., on_terms=acc.add)``): two fixed-bin histograms.

Fixed bins keep the pass streaming and make two runs' histograms directly
comparable (the gate overlays them):

* the log ratio ``l = log p - log q`` on a symmetric log grid: ``|l|`` from
  1e-9 to 1e2 nats in tenths of a decade on each side, plus one bin for
  ``|l| < 1e-9`` (fp32 against fp32 lands there); ``|l| >= 100`` is counted
  in the outermost bins;
* sampler probability ``q`` against trainer probability ``p`` on a 2-D grid of
  ``log10`` from -8 to 0 in twentieths of a decade; smaller probabilities are
  counted in the first row or column.
"""

from __future__ import annotations

import numpy as np

L_MIN_DECADE, L_MAX_DECADE, L_PER_DECADE = -9, 2, 10
_L_SIDE = (L_MAX_DECADE - L_MIN_DECADE) * L_PER_DECADE
P_MIN_DECADE, P_PER_DECADE = -8, 20
_P_BINS = -P_MIN_DECADE * P_PER_DECADE


def log_ratio_edges() -> np.ndarray:
    """Bin edges in nats, increasing: ``2 * _L_SIDE + 1`` bins, the middle one ``[-1e-9, 1e-9]``."""
    pos = 10.0 ** (L_MIN_DECADE + np.arange(_L_SIDE + 1) / L_PER_DECADE)
    return np.concatenate([-pos[::-1], pos])


def prob_edges() -> np.ndarray:
    return 10.0 ** (P_MIN_DECADE + np.arange(_P_BINS + 1) / P_PER_DECADE)


class PlotAccumulator:
    """Streaming histograms of one run (``add`` is the ``on_terms`` hook of ``analyse``)."""

    def __init__(self) -> None:
        self.log_ratio_counts = np.zeros(2 * _L_SIDE + 1, np.int64)
        self.prob_counts_QP = np.zeros((_P_BINS, _P_BINS), np.int64)
        """rows: sampler q bins, columns: trainer p bins."""
        self.tokens = 0

    def add(self, terms, batch=None) -> None:
        l = terms.log_ratio_T
        if l.size == 0:
            return
        self.tokens += l.size
        a = np.abs(l)
        with np.errstate(divide="ignore"):
            k = np.floor((np.log10(a) - L_MIN_DECADE) * L_PER_DECADE)
        k = np.clip(np.nan_to_num(k, nan=-1.0, neginf=-1.0), -1, _L_SIDE - 1).astype(np.int64)
        idx = np.where(k < 0, _L_SIDE, np.where(l > 0, _L_SIDE + 1 + k, _L_SIDE - 1 - k))
        self.log_ratio_counts += np.bincount(idx, minlength=self.log_ratio_counts.size)
        iq = self._prob_bin(terms.q_T)
        ip = self._prob_bin(terms.p_T)
        self.prob_counts_QP += np.bincount(iq * _P_BINS + ip, minlength=_P_BINS * _P_BINS).reshape(_P_BINS, _P_BINS)

    @staticmethod
    def _prob_bin(x: np.ndarray) -> np.ndarray:
        with np.errstate(divide="ignore"):
            i = np.floor((np.log10(x) - P_MIN_DECADE) * P_PER_DECADE)
        return np.clip(np.nan_to_num(i, nan=0.0, neginf=0.0), 0, _P_BINS - 1).astype(np.int64)
