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
import inspect
import math
from collections.abc import Callable
from typing import cast

import numpy as np

from ..errors import UsageError

RewardFn = Callable[..., float]
EPS = 1e-6


DEFAULT_REWARD = "exact_match(answer)"
"""the reward a run records when no ``--reward-fn`` was given: :func:`exact_match` with the prompt's answer."""

ANSWER_MARKER = "####"


def final_answer(completion: str) -> str:
    """The text after the last ``####``, stripped; the whole completion stripped when there is none."""
    return completion.rpartition(ANSWER_MARKER)[2].strip()  # no marker: ("", "", completion)


def exact_match(*, prompt: str, completion: str, answer: str | None) -> float:
    return float(answer is not None and final_answer(completion) == answer.strip())


def load_reward_fn(spec: str | None) -> RewardFn:
    """The reward function ``module:function``, checked to accept ``prompt=, completion=, answer=``
    before any engine starts; it is wrapped so that what it raises or returns in a run is one line naming
    it and the prompt (never a traceback)."""
    if not spec:
        return exact_match
    module, _, name = spec.partition(":")
    if not module or not name:
        raise UsageError(f"--reward-fn {spec!r}: write it as module:function")
    try:
        fn = getattr(importlib.import_module(module), name)
    except Exception as e:  # ImportError, AttributeError, or whatever the module raises when imported
        raise UsageError(f"--reward-fn {spec!r}: cannot load it ({type(e).__name__}: {e})") from None
    if not callable(fn):
        raise UsageError(f"--reward-fn {spec!r} is not callable")
    try:
        inspect.signature(fn).bind(prompt="", completion="", answer=None)
    except TypeError as e:
        raise UsageError(
            f"--reward-fn {spec!r} cannot be called as fn(prompt=..., completion=..., answer=...) ({e})",
            hint="give it those three keyword parameters (or **kwargs)",
        ) from None
    except ValueError:  # a builtin without a signature: its call says
        pass
    return _Checked(spec, cast(RewardFn, fn))


class _Checked:
    """A user's reward function whose failures name it and the prompt."""

    def __init__(self, spec: str, fn: RewardFn):
        self.spec, self.fn = spec, fn

    def __call__(self, *, prompt: str, completion: str, answer: str | None) -> float:
        where = f"--reward-fn {self.spec} on the prompt {_short(prompt)}"
        try:
            value = self.fn(prompt=prompt, completion=completion, answer=answer)
        except Exception as e:
            raise UsageError(
                f"{where} raised {type(e).__name__}: {_short(str(e), 120, quote=False)}",
                hint="fix the function; the probe so far is kept, --resume continues it",
            ) from None
        if isinstance(value, (str, bytes)) or not isinstance(value, (int, float, np.integer, np.floating)):
            raise UsageError(
                f"{where} returned {_short(repr(value), 60, quote=False)}, not a number", hint="return a float"
            )
        try:
            reward = float(value)
        except OverflowError:
            reward = float("inf")
        if not math.isfinite(reward):
            raise UsageError(
                f"{where} returned {_short(repr(value), 60, quote=False)}, not a finite float",
                hint="return a finite float (advantages are normalised over each prompt's rewards)",
            )
        return reward


def _short(text: str, n: int = 60, quote: bool = True) -> str:
    cut = text if len(text) <= n else text[: n - 3] + "..."
    return repr(cut) if quote else cut


def group_advantages(rewards_G: np.ndarray) -> np.ndarray:
    """GRPO advantages for one prompt's group of rewards."""
    r = np.asarray(rewards_G, dtype=np.float64)
    if r.size < 2:
        return np.zeros_like(r)
    std = r.std(ddof=1)
    return (r - r.mean()) / (std + EPS)
