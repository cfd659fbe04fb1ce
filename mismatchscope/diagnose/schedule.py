"""The order diagnose works in: engine start-ups on the second core, timed rounds alone.

A sampler-side variant is mostly waiting for its own process: a fresh
interpreter imports vLLM, starts an engine and probes (20 to 40 s on 2 CPU
cores) while this process has nothing to do. Its timed rounds against the
baseline (:mod:`.timing`) are the opposite: they price the configuration, so
nothing else may start or sample while they run. The plan therefore starts
the sampler-side variants' processes in groups of ``ahead`` and lets them
start up together, while this process does its own untimed work (the
reference forward and the determinism checks for the first group, the
trainer-side variants' rescoring and records, the records of the group
before); when the whole group has probed and sits idle, its members' rounds
run one variant after another, and only then does the next group start.
Trainer-side variants' rounds come last, when no engine but the idle
baseline's is up (a record holds no timing until its rounds: the ratios are
computed once every variant has run).

So at most ``ahead`` variant engines are up at once besides the baseline's,
and every timed round (sampler or trainer side) runs while every other
process is idle: :func:`run_plan` settles every started process before each
``time`` step. The records are in the matrix's order whatever the order of
work.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, Protocol

AHEAD_CPU = 2
"""sampler-side variants started together on a CPU: two engines' start-ups fill two cores (a start-up is
mostly one thread importing), and three engines (the baseline's and two) stay within 6 GB."""
AHEAD_GPU = 0
"""on a GPU each engine claims its share of the device's memory as it starts, and the reference forward loads
onto the same device: no engine starts ahead of its turn there (the order before groups existed)."""

StepKind = Literal["launch", "baseline", "prepare", "time", "record"]


@dataclass(frozen=True)
class Step:
    """One piece of work: ``launch`` a sampler-side variant's process; the ``baseline``'s own analysis
    (reference forward, decomposition, determinism); ``prepare`` a trainer-side variant (rescore its
    tokens); ``time`` a variant's rounds against the baseline; ``record`` its gaps and costs (a sampler-side
    variant's after its rounds, which close its process; a trainer-side one's before)."""

    kind: StepKind
    index: int = -1
    """the variant's place among those that run (-1 for the baseline)."""


def plan(sides: list[str], ahead: int) -> list[Step]:
    """The steps for variants of these sides (see the module's docstring); ``ahead`` 0: one variant after
    another in the matrix's order, each engine started at its turn."""
    if ahead < 1:
        steps = [Step("baseline")]
        for i, side in enumerate(sides):
            kinds = ("launch", "time", "record") if side == "sampler" else ("prepare", "record", "time")
            steps += [Step(kind, i) for kind in kinds]
        return steps
    sampler = [i for i, side in enumerate(sides) if side == "sampler"]
    trainer = [i for i, side in enumerate(sides) if side != "sampler"]
    groups = [sampler[k : k + ahead] for k in range(0, len(sampler), ahead)]
    steps = [Step("launch", i) for i in (groups[0] if groups else [])]
    steps += [Step("baseline"), *[Step(kind, i) for i in trainer for kind in ("prepare", "record")]]
    for g, group in enumerate(groups):
        steps += [Step("time", i) for i in group]
        if g + 1 < len(groups):
            steps += [Step("launch", i) for i in groups[g + 1]]
        steps += [Step("record", i) for i in group]
    return steps + [Step("time", i) for i in trainer]


class Started(Protocol):
    """A started sampler process (:class:`.sampler_process.Launched`)."""

    @property
    def settled(self) -> bool: ...

    def settle(self) -> None: ...

    def kill(self) -> None: ...


class Engines:
    """The sampler processes started ahead of their turn, by variant index; each is taken at its ``time`` step
    (which closes it), and whatever is left when the diagnose stops is killed."""

    def __init__(self) -> None:
        self.started: dict[int, Started] = {}

    def add(self, index: int, proc: Started) -> None:
        self.started[index] = proc

    def settle_all(self) -> None:
        """Wait until every started process is idle (probed and serving, or ended)."""
        for proc in self.started.values():
            proc.settle()

    def take(self, index: int) -> Started:
        return self.started.pop(index)

    def close(self) -> None:
        for proc in self.started.values():
            proc.kill()
        self.started.clear()


def run_plan(steps: list[Step], engines: Engines, launch: Callable[[int], Started], do: Callable[[Step], None]) -> None:
    """Each step in order; before a ``time`` step every started process is settled, so no engine starts or
    samples during a timed round. The caller's ``do`` takes a ``time`` step's process with ``engines.take``."""
    try:
        for step in steps:
            if step.kind == "launch":
                engines.add(step.index, launch(step.index))
                continue
            if step.kind == "time":
                engines.settle_all()
            do(step)
    finally:
        engines.close()
