"""Rewards and GRPO-style advantages, so advantage-dependent rules see real signs.

Default reward: 1.0 when the completion's final answer equals the prompt's
``answer`` (both stripped); else 0.0. The completion is decoded without special
tokens; its final answer is the text after its last ``####`` (the GSM8K
convention, so a worked solution can end in a checkable answer) or, without
that marker, the whole completion. A user reward is
``module:function`` called as ``fn(prompt=..., completion=..., answer=...)``
returning a float.

Advantages: per prompt group of n samples, ``(r - mean) / (std + 1e-6)`` with
the unbiased std (torch.std, as TRL and verl use); a group with one sample or
identical rewards gets advantage 0.
"""

from __future__ import annotations

import importlib
from typing import Callable

import numpy as np

from ..errors import UsageError

RewardFn = Callable[..., float]
EPS = 1e-6


ANSWER_MARKER = "####"


def final_answer(completion: str) -> str:
    """The text after the last ``####``, stripped; the whole completion stripped when there is none."""
    return completion.rpartition(ANSWER_MARKER)[2].strip()  # no marker: ("", "", completion)


def exact_match(*, prompt: str, completion: str, answer: str | None) -> float:
    return float(answer is not None and final_answer(completion) == answer.strip())


def load_reward_fn(spec: str | None) -> RewardFn:
    if not spec:
        return exact_match
    module, _, name = spec.partition(":")
    if not module or not name:
        raise UsageError(f"--reward-fn {spec!r}: write it as module:function")
    try:
        fn = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as e:
        raise UsageError(f"--reward-fn {spec!r}: cannot load it ({e})") from None
    if not callable(fn):
        raise UsageError(f"--reward-fn {spec!r} is not callable")
    return fn


def group_advantages(rewards_G: np.ndarray) -> np.ndarray:
    """GRPO advantages for one prompt's group of rewards."""
    r = np.asarray(rewards_G, dtype=np.float64)
    if r.size < 2:
        return np.zeros_like(r)
    std = r.std(ddof=1)
    return (r - r.mean()) / (std + EPS)
