"""``shifted``: compared on the same rows, never fooled by sequences too short to realign."""

from __future__ import annotations

import numpy as np

from mismatchscope.doctor import doctor
from mismatchscope.doctor.causes.shifted import (
    MIN_PARTNERED,
    SHIFT_CONTRAST,
    SHIFT_GAIN,
    SHIFTS,
    best_shift,
    screen,
)
from mismatchscope.doctor.findings import MIN_TOKENS
from mismatchscope.doctor.sample import Sample
from tests.doctor import runs


def test_a_boundary_bug_on_one_to_three_token_sequences_is_not_a_shift(tmp_path):
    # 400 sequences of 1 to 3 tokens whose first token the sides score differently (0.5 nats): a shift by one
    # drops each sequence's first row, which would halve the gap if the two alignments were not compared on the
    # same rows; on the same rows, moving the sampler a position pairs each token with another's value
    rng = np.random.default_rng(0)
    lengths = rng.integers(1, 4, 400)
    seq = np.repeat(np.arange(400), lengths)
    pos = np.concatenate([np.arange(n) for n in lengths])
    lp = -rng.exponential(0.8, seq.size)
    lq = lp + rng.normal(0, 1e-3, seq.size) + np.where(pos == 0, 0.5, 0.0)
    cols = {"sequence_id": seq, "position": pos, "token_id": rng.integers(3, 300, seq.size)}
    cols.update(sampler_logprob=np.minimum(lq, 0.0), trainer_logprob=lp)
    doc = doctor(runs.write(cols, tmp_path))
    shift = next(f for f in doc.findings if f.cause == "shifted")
    assert shift.status != "detected", shift.sentence


def _each_shift_alone(s: Sample) -> tuple[dict[str, float] | None, np.ndarray]:
    """The best shift and the screen's sequences read the plain way: each shift's partners gathered on their own,
    every shift's medians taken."""
    seq, pos, lp, lq = s.columns["sequence_id"], s.columns["position"], s.lp, s.lq
    n = len(s)

    def partners(k: int) -> tuple[np.ndarray, np.ndarray]:
        i = np.array([r for r in range(n) if 0 <= r + k < n and seq[r + k] == seq[r] and pos[r + k] == pos[r] + k])
        return i.astype(np.int64), (i + k).astype(np.int64)

    best = None
    for k in SHIFTS:
        i, j = partners(k)
        if i.size < max(MIN_TOKENS, MIN_PARTNERED * n):
            continue
        moved, recorded = np.abs(lq[j] - lp[i]), np.abs(lq[i] - lp[i])
        row = {
            "k": float(k),
            "gap_after": float(moved.mean()),
            "gap_before": float(recorded.mean()),
            "median_after": float(np.median(moved)),
            "median_before": float(np.median(recorded)),
            "contrast": float(np.mean(np.abs(lq[j] - lq[i]))),
            "rows": float(i.size),
        }
        if best is None or row["gap_after"] / row["gap_before"] < best["gap_after"] / best["gap_before"]:
            best = row
    ids, of_row = np.unique(seq, return_inverse=True)
    hit = np.zeros(ids.size, dtype=bool)
    for k in (-2, -1, 1, 2):
        i, j = partners(k)

        def total(v: np.ndarray, i: np.ndarray = i) -> np.ndarray:
            return np.bincount(of_row[i], weights=v, minlength=ids.size)

        n_k = np.bincount(of_row[i], minlength=ids.size)
        moved, recorded = total(np.abs(lq[j] - lp[i])), total(np.abs(lq[i] - lp[i]))
        contrast = total(np.abs(lq[j] - lq[i]))
        hit |= (n_k >= 4) & (moved < SHIFT_GAIN * recorded) & (moved < SHIFT_CONTRAST * contrast)
    return best, ids[hit]


def test_the_shifts_read_in_pairs_from_one_mask_read_as_each_shift_read_alone_to_the_bit():
    # the shifts by k and -k pair the same rows the other way round, so one mask serves both and they share the
    # contrast; a shift's medians are taken only where its mean gap already gains. Neither changes a number:
    # a run shifted by one in a third of its sequences, and the same run clean
    clean = runs.clean_columns(runs.make(3, sequences=30, length=30, k=0))
    for cols, fires in ((runs.shifted(clean, 1, np.arange(100, 110)), False), (runs.shifted(clean, -2), True)):
        s = Sample({c: np.asarray(v) for c, v in cols.items()}, rows_seen=len(cols["sequence_id"]), sampled=False)
        plain_best, plain_hit = _each_shift_alone(s)
        best = best_shift(s)
        assert best is not None and plain_best is not None
        medians = {"median_after", "median_before"}
        assert {k: v for k, v in best.items() if k not in medians} == {
            k: v for k, v in plain_best.items() if k not in medians
        }
        if fires:  # the means gain: the medians are read, and are the plain ones
            assert best["median_after"] == plain_best["median_after"] and best["k"] == 2
            assert best["median_before"] == plain_best["median_before"]
        else:
            assert np.isnan(best["median_after"]) or best["median_after"] == plain_best["median_after"]
        assert screen(s).tolist() == plain_hit.tolist()
        assert screen(s).size > 0
