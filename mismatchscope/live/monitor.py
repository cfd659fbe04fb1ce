"""``Monitor``: the mismatch of each step as a flat dict for any logger, and alerts when it changes.

Per step the Monitor computes the timeline's own values
(``timeline.series.step_metrics``: ``divergence.token_terms`` and the rule
registry, as every command does) on the step's tokens, cleaned as the reader
cleans them (-9999 sentinels read as -inf, non-finite pairs left out and
counted), so what a logger shows during the run is what ``timeline`` and
``report`` show on the written shards afterwards.

Alerts: after each step the timeline's spike and shift/drift detectors
(``timeline.changes.detect``) run over the series so far (the last
``window`` steps), with the same scales and rare-event rule as ``timeline``.
Every metric here is worse when higher (``metrics.CATALOG``), so only rises alert, and only by
at least ``min_rise`` (25%) over the level before: the detectors see a 5%
rise over a long run, which ``timeline`` shows but is no reason to alert. A rising spike
at the newest step is an alert at once (the detector mirrors the series at
its end). A rising shift or drift is an alert once segmentation has placed
it, within two steps, in ``CONFIRM`` consecutive steps' runs: re-running a
segmentation at every step would otherwise alert on every change it tries
and drops (on pure noise, unconfirmed shifts alerted in 9 of 10 runs of 100
steps). Each change is reported once.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..metrics import COUNTED, Metric
from ..rules import RuleInstance, parse_rule
from ..schema import LOGPROB_SENTINEL
from ..timeline import DEFAULT_RULES
from ..timeline.changes import ChangeConfig, detect
from ..timeline.series import step_metrics
from .inputs import StepBatch, prepare

ONLINE_CHANGES = ChangeConfig(min_steps=16)
"""the timeline's detectors, with more steps before the first alert: run after every step, the 8 steps a
whole-run ``timeline`` needs made most false shifts (on pure noise, 7 of 8 fell at steps 9-11)."""
MIN_RISE = 0.25
"""a change is an alert only when the new level is at least this much (relative) above the old: a 5% rise
in k3 is statistically visible over a long run and not worth waking anyone for (``timeline`` shows it)."""
WINDOW = 256
"""steps the detectors look back over (their cost grows with it; see docs/recorder.md)."""
SHIFT_SLACK = 2
"""a shift within this many steps of one already seen is the same shift."""
CONFIRM = 3
"""a shift or drift is an alert once segmentation has placed it in this many consecutive steps' runs."""


@dataclass(frozen=True)
class Alert:
    metric: str
    kind: str
    """"spike", "shift" or "drift"."""
    step: int
    message: str
    detail: dict = field(default_factory=dict)

    def __str__(self) -> str:
        return self.message


class StepReport(dict):
    """The flat ``{prefix + metric: value}`` dict of one step, plus ``.alerts`` (new this step) and ``.step``."""

    def __init__(self, values: dict[str, float], step: int, alerts: list[Alert]):
        super().__init__(values)
        self.step = step
        self.alerts = alerts


def _check_options(recorder: Any, rules: Any, prefix: Any, window: Any, changes: ChangeConfig, min_rise: Any) -> None:
    """Options that would otherwise fail at the first ``add()`` with an error of an inner function, or never:
    a window shorter than the detectors' minimum means no alert can ever fire, without a word."""
    import math

    from ..errors import UsageError

    if recorder is not None and not callable(getattr(recorder, "add", None)):
        raise UsageError(
            f"recorder must be a Recorder, got {type(recorder).__name__}", hint="pass Monitor(Recorder(path))"
        )
    if isinstance(rules, str):
        raise UsageError(
            f"rules must be a list of rule names, got the string {rules!r}", hint=f"write rules=[{rules!r}]"
        )
    if not isinstance(prefix, str):
        raise UsageError(f"prefix must be a string, got {type(prefix).__name__}", hint="e.g. prefix='mismatch/'")
    if isinstance(window, bool) or not isinstance(window, int) or window < changes.min_steps:
        raise UsageError(
            f"window must be an integer of at least {changes.min_steps} steps, got {window!r}",
            hint=f"the change detectors need {changes.min_steps} steps before the first alert; default {WINDOW}",
        )
    if (
        isinstance(min_rise, bool)
        or not isinstance(min_rise, (int, float))
        or not (math.isfinite(min_rise) and min_rise >= 0)
    ):
        raise UsageError(f"min_rise must be a finite number >= 0 (0.25: +25%), got {min_rise!r}")


class Monitor:
    """Watch a run step by step. Give it a :class:`Recorder` to record and watch with one call.

    ``rules``: rule names or ``name:k=v`` strings (default: the timeline's,
    icepop and ipo). Keys are ``prefix`` + the timeline's metric keys:
    ``abs_logprob_diff_mean``, ``abs_logprob_diff_p99``, ``tv_token_mean``,
    ``k3_mean``, ``ratio_outside_band`` (share of r = p/q outside [0.5, 2]), ``route_flip_rate`` (MoE
    runs given both sides' expert ids: share of tokens routed to another top-k set in some MoE layer),
    ``<rule>_reject_rate`` per rule, then ``tokens``, ``nonfinite_tokens``
    and ``alerts`` (how many new alerts this step).
    """

    def __init__(
        self,
        recorder: Any = None,
        *,
        rules: Sequence[str | RuleInstance] | None = None,
        prefix: str = "mismatch/",
        window: int = WINDOW,
        changes: ChangeConfig = ONLINE_CHANGES,
        min_rise: float = MIN_RISE,
        routing: Any = None,
    ):
        from .routes import routing_meta

        _check_options(recorder, rules, prefix, window, changes, min_rise)
        self.recorder = recorder
        self.routing = routing_meta(routing) or getattr(recorder, "routing", None)
        """the model's routing layout, for ``sampler_experts`` / ``trainer_experts`` (a Recorder's by default)."""
        self.rules = [r if isinstance(r, RuleInstance) else parse_rule(r) for r in (rules or DEFAULT_RULES)]
        self.prefix = prefix
        self.window = window
        self.min_rise = min_rise
        self.changes = changes
        self.metrics: list[Metric] = []
        self.history: dict[int, dict[str, float]] = {}
        """step -> the step's values (the timeline's keys, with ``tokens``)."""
        self._step_parts: list[dict[str, np.ndarray]] = []
        self._current: int | None = None
        self._reported: set[tuple] = set()
        self._shifts: dict[tuple, list[int]] = {}
        """changes already reported, by (kind, metric): their steps."""
        self._candidates: dict[tuple, dict[int, int]] = {}
        """changes seen in the last evaluation, by (kind, metric): step -> consecutive evaluations."""
        self.alerts: list[Alert] = []
        """every alert so far."""

    def close(self) -> None:
        """Close the Recorder (if any): the run is complete."""
        if self.recorder is not None:
            self.recorder.close()

    def __enter__(self) -> Monitor:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if self.recorder is not None:
            self.recorder.__exit__(exc_type, exc, tb)

    def add(
        self, step: int, sampler_logprobs: Any, trainer_logprobs: Any, mask: Any = None, **columns: Any
    ) -> StepReport:
        """Record (with a Recorder) and measure one batch; the values cover every batch of ``step`` so far."""
        if self.recorder is not None:
            batch = self.recorder.add(step, sampler_logprobs, trainer_logprobs, mask, **columns)
        else:
            from .routes import check_experts

            batch = prepare(step, sampler_logprobs, trainer_logprobs, mask, **columns)
            check_experts(batch, self.routing)
        return self.observe(batch)

    def observe(self, batch: StepBatch) -> StepReport:
        """Measure a batch already prepared (e.g. the return value of ``Recorder.add``)."""
        if batch.step != self._current:
            self._current, self._step_parts = batch.step, []
        columns = batch.columns
        if batch.experts and batch.routed:
            from ..timeline.series import ROUTE_FLAGS
            from .routes import route_flags

            flags = route_flags(batch.experts)
            if flags is not None:
                columns = {**columns, **dict(zip(ROUTE_FLAGS, flags, strict=True))}
        self._step_parts.append(_clean(columns))
        parts = self._step_parts
        cols = {k: np.concatenate([p[k] for p in parts]) for k in parts[0]} if len(parts) > 1 else parts[0]
        kept = int(cols["step"].size)
        values = {"tokens": float(kept), "nonfinite_tokens": float(sum(p["_all"].size for p in parts) - kept)}
        if kept:
            self.metrics, v = step_metrics({k: c for k, c in cols.items() if k != "_all"}, self.rules)
            values = {**v, **values}
        self.history[batch.step] = values
        new = self._detect(batch.step) if cols["step"].size else []
        self.alerts += new
        flat = {self.prefix + k: v for k, v in values.items()}
        flat[self.prefix + "alerts"] = float(len(new))
        return StepReport(flat, batch.step, new)

    def _detect(self, step: int) -> list[Alert]:
        steps = np.array(sorted(s for s, v in self.history.items() if "tokens" in v and v["tokens"] > 0))[
            -self.window :
        ]
        if steps.size < self.changes.min_steps:
            return []
        tokens = np.array([self.history[s]["tokens"] for s in steps])
        out: list[Alert] = []
        for m in self.metrics:
            if m.worse != "higher":  # only a rise is an alert (the catalog says which way is worse)
                continue
            x = np.array([self.history[s].get(m.name, np.nan) for s in steps])
            ch = detect(steps, x, self.changes, m.scale, x * tokens if m.unit == COUNTED else None)
            out += [
                self._spike(m, s)
                for s in ch.spikes
                if self._rises(s["baseline"], s["value"]) and self._first(("spike", m.name, s["step"]))
            ]
            rising = [s for s in ch.shifts if self._rises(s["before"], s["after"])]
            out += [self._shift(m, s) for s in self._confirmed(("shift", m.name), rising, "step")]
            up = [d for d in ch.drifts if self._rises(d["before"], d["after"])]
            out += [self._drift(m, d) for d in self._confirmed(("drift", m.name), up, "from_step")]
        return out

    def _rises(self, old: float, new: float) -> bool:
        return new > old * (1.0 + self.min_rise) if old > 0 else new > old

    def _confirmed(self, key: tuple, found: list[dict], at: str) -> list[dict]:
        """Changes found at (about) the same step in ``CONFIRM`` consecutive evaluations, each reported once.

        Segmentation re-run every step may place a change and drop it the
        next step; only one that stays is an alert.
        """
        seen = self._candidates.setdefault(key, {})
        reported = self._shifts.setdefault(key, [])
        now: dict[int, int] = {}
        confirmed = []
        for c in found:
            near = [s for s in seen if abs(s - c[at]) <= SHIFT_SLACK]
            count = (seen[near[0]] if near else 0) + 1
            now[c[at]] = count
            if count >= CONFIRM and not any(abs(c[at] - r) <= SHIFT_SLACK for r in reported):
                reported.append(c[at])
                confirmed.append(c)
        self._candidates[key] = now
        return confirmed

    def _spike(self, m: Metric, s: dict) -> Alert:
        return Alert(
            m.name,
            "spike",
            s["step"],
            f"mismatch alert: {m.name} spiked at step {s['step']}: "
            f"{s['value']:.4g} against {s['baseline']:.4g} around it",
            s,
        )

    def _shift(self, m: Metric, s: dict) -> Alert:
        return Alert(
            m.name,
            "shift",
            s["step"],
            f"mismatch alert: {m.name} rose at step {s['step']}: mean {s['before']:.4g} before, {s['after']:.4g} since",
            s,
        )

    def _drift(self, m: Metric, d: dict) -> Alert:
        return Alert(
            m.name,
            "drift",
            d["to_step"],
            f"mismatch alert: {m.name} crept up from step {d['from_step']} to "
            f"{d['to_step']}: {d['before']:.4g} -> {d['after']:.4g} over {d['shifts']} shifts",
            d,
        )

    def _first(self, key: tuple) -> bool:
        if key in self._reported:
            return False
        self._reported.add(key)
        return True


def _clean(columns: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The reader's hygiene on one batch: sentinels to -inf, then only pairs with both logprobs finite."""
    lp, lq = columns["trainer_logprob"], columns["sampler_logprob"]
    lp = np.where(lp == LOGPROB_SENTINEL, -np.inf, lp)
    lq = np.where(lq == LOGPROB_SENTINEL, -np.inf, lq)
    keep = np.isfinite(lp) & np.isfinite(lq)
    out = {
        "trainer_logprob": lp[keep],
        "sampler_logprob": lq[keep],
        "sequence_id": columns["sequence_id"][keep],
        "step": columns["step"][keep],
    }
    for name in ("advantage", "route_compared", "route_flipped"):
        if name in columns:
            out[name] = columns[name][keep]
    out["_all"] = keep
    return out
