"""Runs built for the timeline's tests: synthetic noise with a known shift or spike, and what they need."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

needs_ruptures = pytest.mark.skipif(
    importlib.util.find_spec("ruptures") is None,
    reason="timeline's change detection needs ruptures (pip install ruptures)",
)
"""Change detection runs on ruptures (the timeline extra)."""

H = ("tv_token_mean", "k3_mean", "abs_logprob_diff_mean", "abs_logprob_diff_p99")
"""The headline series a change is looked for in."""


def synthetic(
    seed: int, steps: int = 60, per_step: int = 400, shift_at: int | None = None, spike_at: int | None = None
) -> dict:
    """A run whose per-token log-ratio noise is 0.05 nats, 0.08 from ``shift_at`` on, 0.2 at ``spike_at``."""
    rng = np.random.default_rng(seed)
    sd = np.full(steps, 0.05)
    if shift_at is not None:
        sd[shift_at:] = 0.08
    if spike_at is not None:
        sd[spike_at] = 0.2
    n = steps * per_step
    step = np.repeat(np.arange(steps), per_step)
    lq = np.log(rng.uniform(0.05, 1.0, n))
    lp = np.minimum(lq + rng.normal(0, sd[step]), 0.0)
    return {
        "sequence_id": np.arange(n) // 20,
        "position": np.arange(n) % 20,
        "token_id": np.zeros(n, np.int64),
        "sampler_logprob": lq,
        "trainer_logprob": lp,
        "step": step,
    }
