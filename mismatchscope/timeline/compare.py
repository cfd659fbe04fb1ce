"""``timeline RUN_A RUN_B --x step|wall``: two or more runs side by side, per step or against wall-clock hours.

The question a zero-mismatch run answers is not "is it slower per step" but
"does it reach the same reward sooner or later": so each run is one line of
reward and mismatch, against its step or against the hours since it started.

* **Hours** come from the ``wall_time`` column the Recorder stamps on every
  step (the clock of the step that produced it, never a clock of this
  reader). A run's start is its first step's stamp less that step's own
  sampling and training seconds where the loop recorded them (else the
  first stamp itself: the first step then sits at 0 h). ``--x wall`` with a
  run that has no ``wall_time`` is a usage error naming the runs.
* **Cost per step**: the median of ``step_sampling_seconds + step_training_seconds``
  where the loop recorded them, else the median gap between consecutive
  stamps: the median, because a first step that warms its engines up (or a
  step stalled by a checkpoint) is not what each further step costs. The
  slower run's cost is stated against the fastest one.
* **Reward**: the mean over the step's sequences of their reward (the
  column repeats it on every token, so each sequence counts once);
  **mismatch**: the mean ``|log p - log q|`` over the step's tokens, and the
  share of tokens whose two logprobs are not equal at all.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from ..documents import optional
from ..errors import UsageError

XAxis = Literal["step", "wall"]
COLUMNS = ["step", "reward", "wall_time", "step_sampling_seconds", "step_training_seconds"]


@dataclass(frozen=True)
class StepPoint:
    step: int
    hours: float | None = field(metadata={"doc": "hours since the run started (None without wall_time)"})
    reward_mean: float | None = field(metadata={"doc": "mean reward over the step's sequences (None: no reward)"})
    abs_logprob_diff_mean: float = field(metadata={"doc": "mean |log p - log q| over the step's tokens"})
    unequal_share: float = field(metadata={"doc": "share of the step's tokens whose two logprobs differ at all"})
    tokens: int


@dataclass(frozen=True)
class SkippedStep:
    """A step whose clock cannot be read: left out of the hours or of the cost per step, and said."""

    step: int
    left_out_of: Literal["wall clock", "cost per step"]
    reason: str


@dataclass(frozen=True)
class RunLine:
    run: str
    steps: list[StepPoint]
    has_wall_time: bool
    seconds_per_step: float | None = field(
        metadata={"doc": "median recorded sampling + training seconds per step, else the median gap between stamps"}
    )
    seconds_source: str = field(metadata={"doc": "recorded (the loop's own seconds), stamps, or none"})
    skipped: list[SkippedStep] | None = field(
        default=None,
        metadata=optional(
            "steps left out of the wall clock (a wall_time that is not finite, or earlier than the step before's) "
            "or of the cost per step (recorded seconds that are not finite); absent when none is"
        ),
    )

    def skipped_lines(self) -> list[str]:
        """One warning line per step left out."""
        return [f"{self.run}: step {s.step} left out of the {s.left_out_of}: {s.reason}" for s in self.skipped or []]


@dataclass(frozen=True)
class TimelineComparison:
    x: str = field(metadata={"doc": "step or wall"})
    runs: list[RunLine]
    fastest: str | None = field(metadata={"doc": "the run with the lowest cost per step"})
    cost_per_step: dict[str, float] = field(
        metadata={"doc": "each run's seconds per step over the fastest run's (1.0 for the fastest)"}
    )
    statement: str


def _per_step(path: str) -> tuple[dict[str, np.ndarray], bool]:
    """Per-token columns of a run (step, reward, wall_time, the step's seconds, |log p - log q|)."""
    from ..reader import Hygiene, iter_batches, open_source

    source = open_source(path)
    if not source.has("step"):
        raise UsageError(f"{path}: no step column: the runs are compared step by step", hint="record with a step")
    parts: dict[str, list[np.ndarray]] = {}
    for b in iter_batches(source, COLUMNS, Hygiene()):
        parts.setdefault("diff", []).append(np.abs(b["trainer_logprob"] - b["sampler_logprob"]))
        parts.setdefault("seq", []).append(b["sequence_id"])
        for c in COLUMNS:
            if c in b:
                parts.setdefault(c, []).append(np.asarray(b[c]))
    cols = {k: np.concatenate(v) for k, v in parts.items()}
    return cols, "wall_time" in cols


def _mean_reward(cols: dict[str, np.ndarray], sel: np.ndarray) -> float | None:
    if "reward" not in cols:
        return None
    _, first = np.unique(cols["seq"][sel], return_index=True)
    return float(np.mean(cols["reward"][sel][first]))


def run_line(path: str) -> RunLine:
    """One run's per-step points and its cost per step; a step whose clock cannot be read is left out, and said."""
    cols, has_wall = _per_step(path)
    steps = np.unique(cols["step"])
    recorded = "step_sampling_seconds" in cols and "step_training_seconds" in cols
    firsts = [int(np.flatnonzero(cols["step"] == s)[0]) for s in steps]
    step_s = (
        [float(cols["step_sampling_seconds"][i] + cols["step_training_seconds"][i]) for i in firsts] if recorded else []
    )
    stamps = [float(cols["wall_time"][cols["step"] == s].max()) for s in steps] if has_wall else []
    skipped: list[SkippedStep] = []
    kept = _kept_stamps(steps, stamps, skipped)
    for k, s in enumerate(steps):
        if step_s and not math.isfinite(step_s[k]):
            skipped.append(SkippedStep(int(s), "cost per step", "its recorded seconds are NaN"))
    skipped.sort(key=lambda x: x.step)
    start = _start(kept, stamps, step_s)
    points = []
    for i, s in enumerate(steps):
        sel = np.flatnonzero(cols["step"] == s)
        diff = cols["diff"][sel]
        points.append(
            StepPoint(
                step=int(s),
                hours=(stamps[i] - start) / 3600 if start is not None and i in kept else None,
                reward_mean=_mean_reward(cols, sel),
                abs_logprob_diff_mean=float(diff.mean()),
                unequal_share=float(np.mean(diff != 0)),
                tokens=int(sel.size),
            )
        )
    finite_s = [x for x in step_s if math.isfinite(x)]
    order = sorted(kept)
    gaps = [(stamps[b] - stamps[a]) / (b - a) for a, b in zip(order, order[1:], strict=False)]
    if finite_s:
        per_step, source = float(np.median(finite_s)), "recorded"
    elif gaps:
        per_step, source = float(np.median(gaps)), "stamps"
    else:
        per_step, source = None, "none"
    return RunLine(os.fspath(path), points, has_wall, per_step, source, skipped or None)


def _kept_stamps(steps: np.ndarray, stamps: list[float], skipped: list[SkippedStep]) -> set[int]:
    """The indices of the steps whose stamp reads as a clock: finite, and not earlier than the last kept one."""
    kept: set[int] = set()
    last: int | None = None
    for i, t in enumerate(stamps):
        if not math.isfinite(t):
            skipped.append(SkippedStep(int(steps[i]), "wall clock", f"wall_time is {t}".replace("nan", "NaN")))
        elif last is not None and t < stamps[last]:
            skipped.append(
                SkippedStep(
                    int(steps[i]),
                    "wall clock",
                    f"wall_time {t:g} is {stamps[last] - t:g} s before step {int(steps[last])}'s",
                )
            )
        else:
            kept.add(i)
            last = i
    return kept


def _start(kept: set[int], stamps: list[float], step_s: list[float]) -> float | None:
    """When the run started: its first readable stamp less the recorded seconds of the steps up to it."""
    if not kept:
        return None
    first = min(kept)
    before = sum(x for x in step_s[: first + 1] if math.isfinite(x)) if step_s else 0.0
    return stamps[first] - before


def _refuse_repeats(paths: list[str]) -> None:
    """A run given twice (however spelled: ``RUN/``, ``RUN/tokens``, a shard of it) would be "compared" with
    itself: 1.00x per step, equal lines. Two inputs that share a shard are one run."""
    from ..reader import resolve_files

    seen: dict[str, str] = {}
    for p in paths:
        shards = {os.path.realpath(f) for f in resolve_files(p)}
        for f in shards:
            if f in seen:
                raise UsageError(
                    f"{seen[f]} and {p} are one run (they share its shards): it would be compared with itself",
                    hint="give each run once",
                )
        seen.update(dict.fromkeys(shards, p))


def compare(paths: list[str], x: XAxis) -> TimelineComparison:
    """The runs side by side; ``--x wall`` needs every run's wall times."""
    if x not in ("step", "wall"):
        raise UsageError(f"--x {x!r}", hint="use --x step or --x wall")
    _refuse_repeats(paths)
    lines = [run_line(p) for p in paths]
    lacking = [line.run for line in lines if not line.has_wall_time]
    if x == "wall" and lacking:
        raise UsageError(
            f"--x wall needs wall times, and {', '.join(lacking)} {'has' if len(lacking) == 1 else 'have'} none "
            "(no wall_time column)",
            hint="record with mismatchscope's Recorder (it stamps every step), or use --x step",
        )
    timed = [line for line in lines if line.seconds_per_step]
    if not timed:
        return TimelineComparison(x, lines, None, {}, "no run says how long its steps took")
    fastest = min(timed, key=lambda line: line.seconds_per_step or 0.0)
    base = fastest.seconds_per_step or 1.0
    cost = {line.run: (line.seconds_per_step or 0.0) / base for line in timed}
    slowest = max(timed, key=lambda line: line.seconds_per_step or 0.0)
    if len(timed) == 1:
        only = f"{fastest.run}: a median {fastest.seconds_per_step:.3g} s per step ({fastest.seconds_source} seconds)"
        return TimelineComparison(x, lines, fastest.run, cost, only)
    statement = (
        f"{slowest.run} costs {cost[slowest.run]:.2f}x per step: a median {slowest.seconds_per_step:.3g} s against "
        f"{fastest.seconds_per_step:.3g} s for {fastest.run} ({slowest.seconds_source} seconds)"
    )
    return TimelineComparison(x, lines, fastest.run, cost, statement)
