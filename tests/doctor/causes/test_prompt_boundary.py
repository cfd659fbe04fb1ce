"""``prompt_boundary``: the share of sequences whose first tokens are off, so one outlier names nothing."""

from __future__ import annotations

import numpy as np

from mismatchscope.doctor import doctor
from mismatchscope.doctor.causes.prompt_boundary import (
    _PROB_EDGES,
    FLOOR,
    MIN_AT_POSITION,
    MIN_OFF,
    POSITIONS,
    RATIO,
    SHARE,
    _bucket,
    affected_positions,
)
from mismatchscope.doctor.sample import Sample
from tests.doctor import runs


def _finding(doc, cause: str):
    return next(f for f in doc.findings if f.cause == cause)


def test_one_outlier_token_at_position_0_is_no_prompt_boundary(tmp_path):
    cols = runs.clean_columns(runs.make(1, sequences=40, noise=1e-3))
    first = np.flatnonzero(cols["position"] == 0)[3]
    cols["trainer_logprob"] = cols["trainer_logprob"].copy()
    cols["trainer_logprob"][first] -= 4.0  # one token, 4 nats off
    f = _finding(doctor(runs.write(cols, tmp_path)), "prompt_boundary")
    assert f.status == "clear", f.sentence


def test_the_need_it_names_is_the_one_it_has(tmp_path):
    # 300 tokens, none at position 8 or later (50 sequences of 6): the check needs 50 tokens from position 8 on,
    # and says that, not "needs at least 50 tokens" with 300 in hand
    cols = runs.clean_columns(runs.make(2, sequences=50, length=6, noise=1e-3))
    f = _finding(doctor(runs.write(cols, tmp_path)), "prompt_boundary")
    assert f.status == "not_checked" and f.needs == ["at least 50 tokens at position 8 or later"], f.needs
    assert f.sentence == "not checked: 0 tokens at position 8 or later, needs at least 50"


def _plain_affected(s: Sample, rows: np.ndarray | None = None) -> tuple[int, float]:
    """affected_positions the plain way: every row's bucket by ``searchsorted``, each bucket's median over a mask,
    every position read over every row."""
    pos, d = s.columns["position"], np.abs(s.gap())
    bucket = np.searchsorted(_PROB_EDGES, -s.lq)
    later = pos >= POSITIONS
    med = np.full(_PROB_EDGES.size + 1, float(np.median(d[later])))
    for b in np.unique(bucket[later]):
        if (later & (bucket == b)).sum() >= 10:
            med[b] = float(np.median(d[later & (bucket == b)]))
    off = (d >= RATIO * np.maximum(med[bucket], 1e-12)) & (d >= FLOOR)
    inside = np.ones(len(s), dtype=bool) if rows is None else rows
    affected, share0 = 0, float("nan")
    for j in range(POSITIONS):
        at = inside & (pos == j)
        if at.sum() < MIN_AT_POSITION:
            break
        share = float(off[at].mean())
        share0 = share if j == 0 else share0
        if share < SHARE or off[at].sum() < MIN_OFF or affected < j:
            break
        affected += 1
    return affected, share0


def test_the_leading_positions_read_from_their_rows_alone_read_as_every_row_read():
    # the buckets are counted edge by edge (NaN in the last, where searchsorted puts it), the later rows grouped
    # by bucket once, and only the leading rows compared: the same positions and shares as the plain reading,
    # on a run whose first two positions are off, with a few buckets too thin for a median of their own
    cols = runs.clean_columns(runs.make(2, sequences=40, noise=1e-3))
    lp, lq = cols["trainer_logprob"].copy(), cols["sampler_logprob"].copy()
    thin = np.flatnonzero((cols["position"] >= POSITIONS) & (_bucket(lq) == 1))[5:]
    lq[thin], lp[thin] = -5e-3, -5e-3 - 1e-5  # the later rows of bucket 1 but five moved to bucket 2
    lp[cols["position"] < 2] -= 0.5
    cols["trainer_logprob"], cols["sampler_logprob"] = lp, lq
    s = Sample({c: np.asarray(v) for c, v in cols.items()}, rows_seen=lp.size, sampled=False)
    assert affected_positions(s) == _plain_affected(s) and affected_positions(s)[0] == 2
    some = cols["sequence_id"] < 120
    assert affected_positions(s, some) == _plain_affected(s, some)
    lq = np.r_[-_PROB_EDGES, -np.nextafter(_PROB_EDGES, 0), -np.nextafter(_PROB_EDGES, 9), np.nan, -np.inf, 0.0]
    assert _bucket(lq).tolist() == np.searchsorted(_PROB_EDGES, -lq).tolist()
