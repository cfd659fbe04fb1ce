"""``misaligned_sequences``: the join statistic, made with fewer arrays, reads as the plain computation does."""

from __future__ import annotations

import numpy as np

from mismatchscope.doctor.causes.misaligned_sequences import (
    INFORMATIVE,
    JOIN_GAP,
    JOIN_RATIO,
    MIN_SPREAD,
    join_statistic,
)
from mismatchscope.doctor.sample import Sample
from tests.doctor import runs


def _plain(s: Sample) -> dict[str, np.ndarray]:
    """Each informative token against the tokens a third and half its sequence away, one loop per sequence."""
    seq, lp, lq = s.columns["sequence_id"], s.lp, s.lq
    ids = np.unique(seq)
    out = {k: np.zeros(ids.size) for k in ("informative", "share", "spread", "big")}
    for n_seq, sid in enumerate(ids):
        rows = np.flatnonzero((seq == sid) & (np.maximum(np.abs(lp), np.abs(lq)) >= INFORMATIVE))
        n = rows.size
        as_far, spread = np.zeros(n), np.zeros(n)
        for step in (3, 2):
            partner = rows[(np.arange(n) + max(n // step, 1)) % max(n, 1)]
            d_rand = np.abs(lp[rows] - lq[partner])
            as_far += (np.abs(lp[rows] - lq[rows]) >= JOIN_RATIO * d_rand) / 2
            spread += (d_rand >= MIN_SPREAD) / 2
        out["informative"][n_seq] = n
        out["share"][n_seq] = as_far.sum() / n if n else np.nan
        out["spread"][n_seq] = spread.sum() / n if n else np.nan
        out["big"][n_seq] = (np.abs(lp[rows] - lq[rows]) >= JOIN_GAP).sum() / n if n else np.nan
    return out


def test_the_join_statistic_reads_as_each_sequence_read_alone():
    # every other sequence's informative tokens vary in number (some tokens near-certain on both sides), a third of
    # them misjoined: the shares are counts of halves, so the vectorised sums are exact and match to the bit
    rng = np.random.default_rng(5)
    cols = runs.clean_columns(runs.make(4, sequences=24, length=40, k=0))
    cols = runs.misjoined(cols, np.arange(100, 108), rng)
    cols["sampler_logprob"] = np.where(rng.random(cols["sampler_logprob"].size) < 0.3, -1e-3, cols["sampler_logprob"])
    cols["trainer_logprob"] = np.where(cols["sampler_logprob"] == -1e-3, -2e-3, cols["trainer_logprob"])
    s = Sample({c: np.asarray(v) for c, v in cols.items()}, rows_seen=len(cols["sequence_id"]), sampled=False)
    st, plain = join_statistic(s), _plain(s)
    assert st["ids"].tolist() == sorted(set(cols["sequence_id"].tolist()))
    assert st["informative"].tolist() == plain["informative"].tolist()
    assert np.array_equal(st["share"], np.where(st["readable"], plain["share"], np.nan), equal_nan=True)
    assert st["readable"].tolist() == ((plain["informative"] >= 6) & (plain["spread"] >= 0.5)).tolist()
    assert st["flagged"][:8].all() and not st["flagged"][8:].any()
    assert (plain["big"][st["flagged"]] >= 0.5).all()
