"""The order of diagnose's work: sampler processes start ahead of their turn, timed rounds run alone.

The processes here are stand-ins that record what happens to them (the real ones are vLLM engines: the slow
tests in test_run.py run the same plan with them). What is pinned: no timed round starts while a started
process has not settled (it would be starting an engine or sampling), at most ``ahead`` variant processes are up
at once, every variant is launched or prepared, timed and recorded once and in that order, and an interrupt
leaves no process running.
"""

from __future__ import annotations

import pytest

from mismatchscope.diagnose.schedule import AHEAD_CPU, Engines, Step, plan, run_plan

DEFAULT_CPU = ["sampler"] * 6 + ["trainer"] * 4
"""the default matrix on a CPU with a vLLM baseline: six sampler-side variants, then four trainer-side ones."""


class Proc:
    def __init__(self, index: int, log: list) -> None:
        self.index, self.log = index, log
        self.settled = False
        self.killed = False
        self.taken = False
        """taken by its round, which closes it"""

    def settle(self) -> None:
        if not self.settled:
            self.log.append(("settled", self.index))
        self.settled = True

    def kill(self) -> None:
        self.killed = True


def _run(sides: list[str], ahead: int, fail_at: Step | None = None, procs: dict[int, Proc] | None = None):
    """Run the plan with stand-in processes; check, at each step, what must hold then."""
    log: list = []
    procs = {} if procs is None else procs
    engines = Engines()

    def launch(i: int) -> Proc:
        assert sides[i] == "sampler"
        assert len(engines.started) < max(1, ahead)  # at most `ahead` variant engines up at once
        procs[i] = Proc(i, log)
        log.append(("launch", i))
        return procs[i]

    def do(step: Step) -> None:
        if step == fail_at:
            raise KeyboardInterrupt
        if step.kind == "time":
            # nothing starts an engine or samples while a round is timed
            assert all(p.settled for p in engines.started.values())
            if sides[step.index] == "sampler":
                engines.take(step.index)
                procs[step.index].taken = True
        log.append((step.kind, step.index))

    run_plan(plan(sides, ahead), engines, launch, do)
    return log, procs


@pytest.mark.parametrize("ahead", [0, 1, 2, 3])
@pytest.mark.parametrize(
    "sides",
    [DEFAULT_CPU, ["trainer", "sampler", "trainer", "sampler", "sampler"], ["trainer"] * 3, ["sampler"], []],
    ids=["default matrix", "mixed", "trainer only", "one sampler", "none"],
)
def test_every_variant_runs_once_in_order_and_no_round_overlaps_a_start_up(sides, ahead):
    log, procs = _run(sides, ahead)
    baseline = log.index(("baseline", -1))
    for i, side in enumerate(sides):
        kinds = [k for k, j in log if j == i and k != "settled"]
        # a sampler-side variant is recorded after its rounds closed its process; a trainer-side one before
        assert kinds == (["launch", "time", "record"] if side == "sampler" else ["prepare", "record", "time"])
        assert log.index(("time", i)) > baseline and log.index(("record", i)) > baseline
        if side == "sampler":
            assert log.index(("settled", i)) < log.index(("time", i))
    assert set(procs) == {i for i, s in enumerate(sides) if s == "sampler"}


def test_the_first_group_starts_before_the_baselines_own_work_and_the_next_while_records_are_made():
    """Two sampler processes start up together while the reference and determinism run; their rounds follow
    one after the other, the next two start, and the first two's records are made while they do."""
    steps = plan(DEFAULT_CPU, 2)
    assert steps[:3] == [Step("launch", 0), Step("launch", 1), Step("baseline")]
    assert steps[3:11] == [Step(k, i) for i in range(6, 10) for k in ("prepare", "record")]
    assert steps[11:17] == [
        Step("time", 0),
        Step("time", 1),
        Step("launch", 2),
        Step("launch", 3),
        Step("record", 0),
        Step("record", 1),
    ]
    # the trainer side's rounds last, when no variant engine is up
    assert steps[-4:] == [Step("time", i) for i in range(6, 10)]
    assert AHEAD_CPU == 2


def test_one_ahead_is_one_engine_at_a_time():
    steps = [s for s in plan(["sampler"] * 3, 1) if s.kind in ("launch", "time")]
    assert steps == [Step(k, i) for i in range(3) for k in ("launch", "time")]


def test_none_ahead_starts_each_engine_at_its_turn_after_the_baselines_work():
    """On a GPU: the matrix's order, nothing started before the reference forward."""
    steps = plan(["sampler", "trainer", "sampler"], 0)
    assert steps == [
        Step("baseline"),
        *[Step(k, 0) for k in ("launch", "time", "record")],
        *[Step(k, 1) for k in ("prepare", "record", "time")],
        *[Step(k, 2) for k in ("launch", "time", "record")],
    ]


@pytest.mark.parametrize("at", [Step("baseline"), Step("time", 1), Step("record", 2), Step("time", 4)])
def test_an_interrupt_leaves_no_started_process(at):
    procs: dict[int, Proc] = {}
    with pytest.raises(KeyboardInterrupt):
        _run(DEFAULT_CPU, 2, fail_at=at, procs=procs)
    assert procs and all(p.killed != p.taken for p in procs.values())  # each closed by its round, or killed
