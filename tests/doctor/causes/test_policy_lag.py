"""``policy_lag``: the advantage test's false alarms on clean runs, with few sequences of each sign."""

from __future__ import annotations

import numpy as np

from mismatchscope.doctor.causes.policy_lag import MIN_GROUP, advantage_effect
from mismatchscope.doctor.sample import Sample


def _clean(seed: int, per_sign: int) -> Sample:
    """``per_sign`` sequences of each advantage sign, heavy-tailed per-sequence noise, no lag."""
    rng = np.random.default_rng(seed)
    n_seq, length = 2 * per_sign, 30
    seq = np.repeat(np.arange(n_seq), length)
    lp = -rng.exponential(1.0, seq.size)
    scale = 0.02 * np.exp(rng.normal(0, 1, n_seq))[seq]
    lq = np.minimum(lp + rng.standard_t(3, seq.size) * scale, 0.0)
    adv = np.repeat(np.r_[np.ones(per_sign), -np.ones(per_sign)] * rng.uniform(0.1, 2, n_seq), length)
    cols = {
        "sequence_id": seq,
        "position": np.tile(np.arange(length), n_seq),
        "trainer_logprob": lp,
        "sampler_logprob": lq,
        "advantage": adv,
    }
    return Sample(cols, seq.size, False)


def test_no_lag_is_read_from_a_handful_of_sequences_per_sign():
    # 5 to 8 sequences of each sign: a Welch interval at z = 3.29 alarmed on 2 of 240 such clean runs. Below
    # MIN_GROUP the sign is not tested at all
    assert MIN_GROUP >= 10
    assert all(advantage_effect(_clean(seed, 5 + seed % 4)) is None for seed in range(240))


def test_clean_runs_with_enough_sequences_per_sign_rarely_alarm():
    # 240 clean runs with 10 to 30 sequences per sign, heavy-tailed noise whose scale differs per sequence: the t
    # quantile and the rank test together keep the false alarms to the 1-in-1000 the interval promises
    alarms = 0
    for seed in range(240):
        effect = advantage_effect(_clean(1000 + seed, 10 + seed % 21))
        assert effect is not None
        alarms += effect[1] > 0 or effect[2] < 0
    assert alarms == 0
