"""``timeline``: the headline mismatch metrics per training step, and the steps where they change.

:func:`timeline` reads a file (or run) with a ``step`` column once
(``series.build_series``), then tests every series of every group for spikes,
shifts and drifts (``changes.detect``). ``mismatchscope.render.timeline_pictures`` draws it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..documents import from_json
from ..metrics import COUNTED, RATIO_BAND
from ..rules import RuleInstance, make_instance
from .changes import ChangeConfig, detect, methods
from .json_document import Changes, Flag, RuleSeries, SeriesInfo, SkippedTest, StepRow, TimelineDocument
from .series import HEADLINE, P99, StepSeries, build_series

DEFAULT_RULES = ("icepop", "ipo")
"""Without --rule: the two rules that need no advantage, so every file can show them."""


def default_rules() -> list[RuleInstance]:
    return [make_instance(name, {}) for name in DEFAULT_RULES]


@dataclass
class TimelineResult:
    series: StepSeries
    flags: list[Flag]
    """every spike, dip, shift and drift flagged: group, metric, kind, step(s), values."""
    skipped: list[SkippedTest]
    """each test a (group, reason) could not run, with the series it applies to."""
    config: ChangeConfig

    def document(self, plot: str | None = None) -> TimelineDocument:
        s = self.series
        return TimelineDocument(
            tokens=s.tokens,
            steps=int(np.unique(s.step_K).size),
            by=s.by,
            groups=s.groups,
            metrics=[SeriesInfo(m.name, m.heading, m.unit, m.scale, m.label) for m in s.metrics],
            rules=[
                RuleSeries(u.rule.name, u.rule.params, u.rule.level, u.rule.spec.acts, u.hypothesis, u.metric.name)
                for u in s.units
            ],
            ratio_band=RATIO_BAND,
            quantile=P99,
            rows=self._rows(),
            changes=Changes(
                methods(self.config),
                self.flags,
                self.skipped,
            ),
            warnings=s.warnings,
            plot=plot,
        )

    def _rows(self) -> list[StepRow]:
        s = self.series
        return [
            StepRow(
                s.groups[int(s.group_K[i])],
                int(s.step_K[i]),
                int(s.tokens_K[i]),
                int(s.sequences_K[i]),
                {m.name: float(s.values[m.name][i]) for m in s.metrics},
            )
            for i in range(s.step_K.size)
        ]


def timeline(
    path: str | os.PathLike,
    rules: list[RuleInstance] | None = None,
    by: str | None = None,
    mapping: dict[str, str] | None = None,
    config: ChangeConfig = ChangeConfig(),
    batch_rows: int | None = None,
) -> TimelineResult:
    """Per-step series of ``path`` and the steps where each series spikes, shifts or drifts."""
    kw = {"batch_rows": batch_rows} if batch_rows else {}
    series = build_series(path, default_rules() if rules is None else rules, by, mapping, **kw)
    flags: list[Flag] = []
    skipped: list[dict[str, Any]] = []
    for g, group in enumerate(series.groups):
        idx = series.rows_of(g)
        for m in series.metrics:
            values = series.values[m.name][idx]
            counts = values * series.tokens_K[idx] if m.unit == COUNTED else None
            errors = series.errors[m.name][idx] if m.name in series.errors else None
            ch = detect(series.step_K[idx], values, config, m.scale, counts, errors)
            skipped += [{"group": group, "metric": m.name, "test": test, "reason": why} for test, why in ch.skipped]
            base = {"group": group, "metric": m.name, "scale": ch.scale}
            # the tests keep their findings as plain records; each is read into its type once, here
            flags += [from_json(Flag, {**base, **x}) for x in ch.spikes]  # each a spike or a dip
            flags += [from_json(Flag, {**base, "kind": "shift", **x}) for x in ch.shifts]
            flags += [from_json(Flag, {**base, "kind": "drift", **x}) for x in ch.drifts]
    return TimelineResult(series, flags, _dedupe_skips(skipped), config)


def _dedupe_skips(skipped: list[dict[str, Any]]) -> list[SkippedTest]:
    """One entry per (group, test, reason), listing the metrics it applies to."""
    out: dict[tuple, SkippedTest] = {}
    for s in skipped:
        key = (repr(s["group"]), s["test"], s["reason"])
        out.setdefault(key, SkippedTest(s["group"], s["test"], s["reason"], [])).metrics.append(s["metric"])
    return list(out.values())


__all__ = ["DEFAULT_RULES", "HEADLINE", "TimelineDocument", "TimelineResult", "default_rules", "timeline"]
