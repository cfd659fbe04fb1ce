"""``shifted``: compared on the same rows, never fooled by sequences too short to realign."""

from __future__ import annotations

import numpy as np

from mismatchscope.doctor import doctor
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
