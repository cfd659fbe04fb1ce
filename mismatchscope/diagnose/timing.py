"""Throughput ratios that survive a busy machine: interleaved repeats, a median and an interval.

Timing each configuration once, one after another, lets load at one moment
read as a property of a configuration: on a shared 2-core machine a variant
sampled while the baseline's neighbours had finished looked 5x faster. So
diagnose times each variant against the baseline in alternating rounds
(baseline, variant, baseline, variant, ...) of the same small workload,
with both engines started once and kept warm (the baseline's sampler process
serves rounds for every sampler-side variant; trainer-side variants score
the same sequences as the baseline's trainer, in this process). Load that
lasts longer than a round slows both sides of a pair alike and cancels in
their ratio; what varies faster shows as spread between rounds, so each
ratio carries the median of its rounds and a bootstrap interval of that
median, and an interval wider than ``SPREAD_LIMIT`` is reported as too wide
to rank the configurations by.

A ratio is of pipeline throughput, tokens / (sampling + scoring time): the
side the variant changes is timed in the rounds, the other side is the
baseline's own time per token from its probe (the same for both).
"""

from __future__ import annotations

import json
import os
import select
import statistics
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import IO, TYPE_CHECKING, Any, Literal

from ..documents import json_edge

if TYPE_CHECKING:
    from .document import Costs, Timing, VariantEntry

TIMING_PROMPTS = 8
"""prompts per timed sampling round (each with the run's samples per prompt): a quarter of the bundled
prompts, a fraction of a second to a few seconds a round on 2 cores (trainer rounds score every sequence)"""
MIN_ROUNDS = 5
SLOW_MIN_ROUNDS = 3
"""the minimum for a variant whose first round alone takes half the budget (max_num_seqs=1)"""
MAX_ROUNDS = 30
ROUND_BUDGET_S = 6.0
"""more rounds while a pair's rounds so far took less than this: many short rounds on a fast machine, the
minimum on a slow one (max_num_seqs=1 samples one sequence at a time)"""
CONFIDENCE = 0.95
"""the interval: a percentile bootstrap of the rounds' median"""
SPREAD_LIMIT = 1.25
"""an interval whose high end exceeds its low end by more than this cannot rank configurations"""


@dataclass(frozen=True)
class Round:
    """One timed round: seconds and tokens (per-token seconds compare rounds that sampled other tokens)."""

    seconds: float
    tokens: int

    @property
    def per_token(self) -> float:
        return self.seconds / max(self.tokens, 1)


def interleave(baseline: Callable[[], Round], variant: Callable[[], Round]) -> list[tuple[Round, Round]]:
    """Alternate baseline and variant rounds (B V B V ...): MIN_ROUNDS (SLOW_MIN_ROUNDS for a variant whose first
    round takes half the budget) to MAX_ROUNDS pairs, more while the pairs so far took under the budget."""
    pairs: list[tuple[Round, Round]] = []
    spent = 0.0
    least = MIN_ROUNDS
    while len(pairs) < least or (len(pairs) < MAX_ROUNDS and spent < ROUND_BUDGET_S):
        b = baseline()
        v = variant()
        pairs.append((b, v))
        spent += b.seconds + v.seconds
        if len(pairs) == 1 and v.seconds > ROUND_BUDGET_S / 2:
            least = SLOW_MIN_ROUNDS
    return pairs


def summarize(pairs: list[tuple[Round, Round]], side: Literal["sampler", "trainer"], other_per_token: float) -> Timing:
    """The pipeline throughput ratio variant / baseline of each round, their median and range.

    ``side``: which side the rounds timed ("sampler" or "trainer"); ``other_per_token``: the baseline's
    seconds per token on the other side, added to both."""
    ratios = [(b.per_token + other_per_token) / (v.per_token + other_per_token) for b, v in pairs]
    from .document import Timing

    low, high = median_interval(ratios)
    return Timing(
        side_timed=side,
        rounds=len(ratios),
        ratios=ratios,
        median=statistics.median(ratios),
        low=low,
        high=high,
        rankable=high <= low * SPREAD_LIMIT,
        baseline_seconds=[b.seconds for b, _ in pairs],
        variant_seconds=[v.seconds for _, v in pairs],
    )


def median_interval(values: list[float], resamples: int = 2000, seed: int = 0) -> tuple[float, float]:
    """A percentile bootstrap interval of the median of ``values`` (seeded: the same rounds, the same interval)."""
    import numpy as np

    x = np.asarray(values, dtype=np.float64)
    idx = np.random.default_rng(seed).integers(0, x.size, size=(resamples, x.size))
    medians = np.median(x[idx], axis=1)
    alpha = (1 - CONFIDENCE) / 2
    return float(np.quantile(medians, alpha)), float(np.quantile(medians, 1 - alpha))


def too_wide(variants: list[VariantEntry]) -> list[str]:
    """Variants whose throughput ratio's rounds spread too far to rank them (the machine's load varied)."""
    from .document import VariantOk

    return [
        v.name
        for v in variants
        if isinstance(v, VariantOk) and v.throughput.timing is not None and not v.throughput.timing.rankable
    ]


class SamplerServer:
    """A sampler worker process kept alive after its probe to time sampling rounds on request.

    Commands go on its stdin (``time``, ``quit``); replies come back, one JSON line each, on a pipe of their
    own (its stdout and stderr are the engine's log)."""

    def __init__(self, proc: subprocess.Popen, replies: IO[str]):
        self.proc = proc
        self.replies = replies

    @staticmethod
    def pipe() -> tuple[int, int]:
        r, w = os.pipe()
        os.set_inheritable(w, True)
        return r, w

    def wait_ready(self, timeout_s: float) -> bool:
        """True once the worker has written its result and serves rounds; False if it ended or timed out."""
        reply = self._reply(timeout_s)
        return bool(reply and reply.get("ready"))

    def round(self, timeout_s: float = 900.0) -> Round:
        assert self.proc.stdin is not None
        self.proc.stdin.write("time\n")
        self.proc.stdin.flush()
        reply = self._reply(timeout_s)
        if not reply or "seconds" not in reply:
            raise RuntimeError("the sampler process stopped serving timing rounds")
        return Round(float(reply["seconds"]), int(reply["tokens"]))

    def close(self) -> None:
        try:
            if self.proc.stdin is not None and self.proc.poll() is None:
                self.proc.stdin.write("quit\n")
                self.proc.stdin.close()
            self.proc.wait(timeout=120)
        except (OSError, subprocess.TimeoutExpired):
            self.proc.kill()
            self.proc.wait()
        self.replies.close()

    @json_edge
    def _reply(self, timeout_s: float) -> dict[str, Any] | None:
        deadline = time.monotonic() + timeout_s
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            ready, _, _ = select.select([self.replies], [], [], min(left, 5.0))
            if ready:
                line = self.replies.readline()
                return json.loads(line) if line.strip() else None
            if self.proc.poll() is not None:
                return None


def serve(sampler, prompt_ids: list, sampling, reply_fd: int, stdin: IO[str]) -> None:
    """The worker's side: answer ``time`` with one sampling round of the first TIMING_PROMPTS prompts."""
    prompts = prompt_ids[:TIMING_PROMPTS]
    with os.fdopen(reply_fd, "w") as reply:
        reply.write(json.dumps({"ready": True}) + "\n")
        reply.flush()
        for line in stdin:
            if line.strip() != "time":
                break
            t0 = time.perf_counter()
            out = sampler.sample(prompts, sampling)
            seconds = time.perf_counter() - t0
            reply.write(json.dumps({"seconds": seconds, "tokens": sum(len(c.token_ids) for c in out)}) + "\n")
            reply.flush()


def time_trainers(baseline, variant, requests: list, sampling) -> list[tuple[Round, Round]]:
    """Interleaved scoring rounds of the same requests by the baseline's and the variant's trainer."""
    subset = requests  # scoring is fast: every sequence, so a round is long enough to time
    tokens = sum(len(r.completion_token_ids) for r in subset)

    def timed(trainer) -> Callable[[], Round]:
        def one() -> Round:
            t0 = time.perf_counter()
            trainer.score(subset, sampling)
            return Round(time.perf_counter() - t0, tokens)

        return one

    timed(baseline)()  # a first call pays one-time costs (kernels, caches) on both: not a round
    timed(variant)()
    return interleave(timed(baseline), timed(variant))


def _per_token(costs: Costs, key: Literal["sampling_s", "scoring_s"]) -> float:
    seconds, tokens = getattr(costs, key), costs.tokens
    return float(seconds) / tokens if seconds and tokens else 0.0


@dataclass(frozen=True)
class Timer:
    """Times each variant against the baseline: sampler-side ones on two warm sampler processes, trainer-side
    ones on two trainers in this process. A timing that cannot run leaves the single measurement alone."""

    server: SamplerServer | None
    info: Any
    base_trainer: Any
    requests: list
    sampling: Any

    def sampler(self, server: SamplerServer | None, base_costs: Costs) -> Timing | None:
        if server is None:
            return None
        try:
            if self.server is None:
                return None
            pairs = interleave(self.server.round, server.round)
        except (RuntimeError, OSError):
            return None
        finally:
            server.close()
        return summarize(pairs, "sampler", _per_token(base_costs, "scoring_s"))

    def trainer(self, trainer_cfg, base_costs: Costs) -> Timing | None:
        from ..probe.trainer import HFTrainer

        try:
            pairs = time_trainers(
                HFTrainer(self.info, self.base_trainer), HFTrainer(self.info, trainer_cfg), self.requests, self.sampling
            )
        except Exception:  # the variant's own run already scored; only its timing is lost
            return None
        return summarize(pairs, "trainer", _per_token(base_costs, "sampling_s"))
