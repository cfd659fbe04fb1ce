"""One rule under several framework readings, side by side: counts, and where the readings part.

The counts come from the one analysis pass every command uses (``engine.analyse``
with the readings as rules), so a reading's count here is its count in
``compare-masks``. Beside it, per reading after the first, the tokens on which
it and the first reading disagree, each in the first category that holds:

* ``A = 0``: the token's advantage is exactly 0, for rules that read it (the
  readings that put A = 0 on the negative branch and those that never mask
  it part here);
* ``p or q = 1``: a logprob of exactly 0 on either side (where an epsilon in
  a binary KL decides between a finite D and +inf);
* ``at threshold``: the token's quantity sits exactly on a threshold of
  either reading (``RuleSpec.at_threshold``);
* ``other``: the rest (different thresholds, k3's orientation).

A sequence rule parts whole sequences: their tokens count under ``A = 0`` when
the rule reads the advantage and the sequence's is 0, else under ``other``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from ..divergence import TokenTerms
from ..documents import optional
from ..errors import UsageError
from ..rules import RuleInstance, make_instance
from ..rules.base import parse_overrides
from ..rules.readings import DEFAULT, READINGS, readings_of, split_name
from .evaluate import HYPOTHESES, token_verdicts
from .masks import Unit
from .results import Hypothesis, RuleParams, RuleRow

CATEGORIES = ("A = 0", "p or q = 1", "at threshold", "other")


@dataclass(frozen=True)
class ReadingRow:
    """One reading of the rule under one advantage hypothesis: its count, and where it parts from the first."""

    reading: str = field(metadata={"doc": "the framework reading ('mismatchscope': the rule's own defaults)"})
    name: str = field(metadata={"doc": "the rule as --rule spells it (RULE@READING)"})
    params: RuleParams
    hypothesis: Hypothesis
    tokens_acted: float = field(metadata={"doc": "tokens the reading rejects (or reweights, for a reweighting rule)"})
    token_rate: float | None = field(metadata={"doc": "tokens_acted / tokens; null over no token"})
    sequences_rejected: float
    differs_from_first: dict[str, int] | None = field(
        default=None,
        metadata=optional(
            "tokens on which this reading and the first part, by category (every reading after the first)"
        ),
    )
    first_only: int | None = field(
        default=None, metadata=optional("tokens the first reading acts on and this one does not", "differs_from_first")
    )
    this_only: int | None = field(
        default=None, metadata=optional("tokens this reading acts on and the first does not", "differs_from_first")
    )


@dataclass(frozen=True)
class Readings:
    """What ``compare-masks --readings`` prints (``docs/schemas/compare-masks-readings.json``)."""

    tokens: int
    sequences: int
    rule: str
    action: Literal["reject", "reweight"]
    level: Literal["token", "sequence"]
    first: str = field(metadata={"doc": "the reading every other one is compared with"})
    readings: list[ReadingRow]
    warnings: list[str]
    written: list[str] = field(default_factory=list, metadata={"json": False})
    """the files of the per-token audit the pass wrote (``--write``)."""


def parse_readings(text: str) -> list[RuleInstance]:
    """``dppo-kl`` -> the rule at mismatchscope's defaults, then every reading that has it;
    ``dppo-kl@skyrl,reference`` -> those readings in that order (``mismatchscope``: the defaults; one reading alone
    is set beside them);
    ``...:delta=0.05`` -> that parameter set in every reading (a reading's other choices stay)."""
    head, _, params = text.partition(":")
    rule, reading = split_name(head)
    if not rule:
        has = ", ".join(dict.fromkeys(r for rd in READINGS.values() for r in rd.rules))
        raise UsageError(f"--readings {text!r} names no rule", hint=f"start with a rule that has readings: {has}")
    names = [n.strip() for n in reading.split(",")] if reading else [DEFAULT, *readings_of(rule)]
    if len(names) == 1 and names[0] != DEFAULT:  # one reading: against mismatchscope's defaults
        names = [DEFAULT, *names]
    if len(names) < 2 or not all(names):
        has = list(dict.fromkeys(r for rd in READINGS.values() for r in rd.rules))
        if reading is None:
            raise UsageError(f"no framework reading has a rule {rule!r}", hint=f"rules with readings: {', '.join(has)}")
        raise UsageError(
            f"--readings {text!r} names {len(names)} reading(s); a side-by-side view needs two or more",
            hint=f"e.g. --readings {rule}@{DEFAULT},{','.join(readings_of(rule)[:2]) or 'skyrl'}",
        )
    if len(set(names)) < len(names):
        raise UsageError(f"--readings {text!r} names a reading twice", hint="give each reading once")
    overrides = parse_overrides(rule, params, text)
    return [make_instance(rule if n == DEFAULT else f"{rule}@{n}", overrides) for n in names]


@dataclass
class Differences:
    """Per reading (after the first) and hypothesis: tokens on which it and the first reading part, by category."""

    by_key: dict[tuple[int, str], np.ndarray] = field(default_factory=dict)
    """(reading index, hypothesis) -> counts per CATEGORIES."""
    first_only: dict[tuple[int, str], int] = field(default_factory=dict)
    """tokens the first reading acts on and this one does not."""
    this_only: dict[tuple[int, str], int] = field(default_factory=dict)

    def add(self, key: tuple[int, str], cat_T: np.ndarray, a_T: np.ndarray, b_T: np.ndarray) -> None:
        differ = a_T != b_T
        counts = np.bincount(cat_T[differ], minlength=len(CATEGORIES))
        self.by_key[key] = self.by_key.get(key, np.zeros(len(CATEGORIES), np.int64)) + counts
        self.first_only[key] = self.first_only.get(key, 0) + int((a_T & ~b_T).sum())
        self.this_only[key] = self.this_only.get(key, 0) + int((b_T & ~a_T).sum())


def categories(t: TokenTerms, advantage_T: np.ndarray | None, rules: list[RuleInstance]) -> np.ndarray:
    """Per token, the index into CATEGORIES of the first category that holds."""
    n = t.p_T.size
    reads_a = advantage_T is not None and any(r.spec.uses_advantage for r in rules)
    zero = advantage_T == 0 if reads_a else np.zeros(n, bool)
    one = (t.lp_T == 0) | (t.lq_T == 0)
    at = np.zeros(n, bool)
    for r in rules:
        if r.spec.at_threshold is not None:
            with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
                at |= r.spec.at_threshold(r.config, t)
    return np.select([zero, one, at], [0, 1, 2], 3).astype(np.intp)


def hypotheses(rule: RuleInstance, has_advantage: bool) -> list[Hypothesis]:
    return list(HYPOTHESES) if rule.spec.uses_advantage and not has_advantage else ["data"]


def side_by_side(path: str, text: str, mapping: dict[str, str] | None = None, sink=None) -> Readings:
    """``compare-masks --readings``: the rule, a row per reading and hypothesis, the differences.

    ``sink``: the pass's ``BatchSink`` (``compare-masks --readings R --write DIR``)."""
    from .engine import AnalysisRequest, analyse

    rules = parse_readings(text)
    acts = rules[0].spec.acts
    diffs = Differences()
    token_level = rules[0].level == "token"
    result = analyse(
        path,
        AnalysisRequest(report=False, masks=True, rules=rules),
        mapping,
        on_terms=_token_differences(rules, diffs) if token_level else None,
        sink=sink,
    )
    assert result.masks is not None  # masks=True
    if not token_level:
        _sequence_differences(result, rules, diffs)
    return Readings(
        result.tokens,
        result.sequences,
        rules[0].spec.name,
        acts,
        rules[0].level,
        rules[0].reading or DEFAULT,
        [_reading_row(row, rules, diffs) for row in result.masks.rules],
        result.warnings,
    )


def _token_differences(rules: list[RuleInstance], diffs: Differences) -> Callable[[TokenTerms, dict], None]:
    """The pass's ``on_terms``: each batch's tokens where a reading acts and the first does not, or the reverse."""
    acts = rules[0].spec.acts

    def on_terms(t: TokenTerms, batch: dict) -> None:
        adv = batch.get("advantage")
        hyps = hypotheses(rules[0], adv is not None)
        cat = categories(t, adv, rules)
        for h in hyps:
            acted = [token_verdicts(Unit(r, h), t, adv).acted(acts) for r in rules]
            for i in range(1, len(rules)):
                diffs.add((i, h), cat, acted[0], acted[i])

    return on_terms


def _reading_row(row: RuleRow, rules: list[RuleInstance], diffs: Differences) -> ReadingRow:
    """One reading under one hypothesis: its counts, and how it parts from the first reading."""
    acts = rules[0].spec.acts
    i = next(k for k, r in enumerate(rules) if r.name == row.name)
    key = (i, row.hypothesis)
    parted = i > 0 and key in diffs.by_key
    return ReadingRow(
        rules[i].reading or DEFAULT,
        row.name,
        row.params,
        row.hypothesis,
        row.tokens_rejected if acts == "reject" else row.tokens_reweighted,
        row.token_reject_rate if acts == "reject" else row.token_reweight_rate,
        row.sequences_rejected,
        dict(zip(CATEGORIES, map(int, diffs.by_key[key]), strict=True)) if parted else None,
        diffs.first_only[key] if parted else None,
        diffs.this_only[key] if parted else None,
    )


def _sequence_differences(result, rules: list[RuleInstance], diffs: Differences) -> None:
    """A sequence rule's readings part whole sequences: their tokens, under A = 0 or other."""
    table = result.per_sequence
    n_S = table.n_tokens_S
    adv_S = table.advantage_S
    cols = {(c.name, c.hypothesis): c for c in table.rules if c.sweep is None}
    for (name, h), col in cols.items():
        i = next(k for k, r in enumerate(rules) if r.name == name)
        first = cols.get((rules[0].name, h))
        if i == 0 or first is None or col.sequence_rejected_S is None or first.sequence_rejected_S is None:
            continue
        a, b = first.sequence_rejected_S > 0, col.sequence_rejected_S > 0
        reads_a = adv_S is not None and h == "data" and rules[0].spec.uses_advantage
        zero = adv_S == 0 if reads_a else np.zeros(n_S.size, bool)
        counts = np.zeros(len(CATEGORIES), np.int64)
        differ = a != b
        counts[0] = int(n_S[differ & zero].sum())
        counts[3] = int(n_S[differ & ~zero].sum())
        diffs.by_key[(i, h)] = counts
        diffs.first_only[(i, h)] = int(n_S[a & ~b].sum())
        diffs.this_only[(i, h)] = int(n_S[b & ~a].sum())
