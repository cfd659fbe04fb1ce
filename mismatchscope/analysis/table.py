"""The per-sequence table: one row per sequence, one named array per quantity.

The streaming pass builds it once (:func:`SequenceTable.from_sums` in
``engine.py``) and everything that works per sequence reads its fields:
``report``'s sequence metrics, the gate's bootstrap (token means are ratios
of per-sequence sums, so resampling sequences needs nothing else), the worst
sequences ranking and diagnose's effects. Fields, not string keys, so a
reader cannot ask for a column nobody fills, and no reader depends on
another module's column order.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..divergence import TokenTerms
from .grouping import Op

SUM_FIELDS = (
    "n_tokens_S",
    "sum_tv_S",
    "sum_abs_l_S",
    "sum_l_S",
    "sum_k2_S",
    "sum_k3_S",
    "sum_krev_S",
    "sum_r_S",
    "sum_r2_S",
    "max_tv_S",
    "min_l_S",
    "max_l_S",
)
"""the per-sequence reductions every table has, in declaration order."""

REDUCTIONS: dict[str, Op] = {
    f: ("max" if f.startswith("max") else "min" if f.startswith("min") else "sum") for f in SUM_FIELDS
}
"""how each field reduces a sequence's tokens."""


def token_values(t: TokenTerms) -> dict[str, np.ndarray]:
    """Each field's per-token value, before the per-sequence reduction."""
    l = t.log_ratio_T
    return {
        "n_tokens_S": np.ones(l.size),
        "sum_tv_S": t.tv_T,
        "sum_abs_l_S": np.abs(l),
        "sum_l_S": l,
        "sum_k2_S": t.k2_T,
        "sum_k3_S": t.k3_T,
        "sum_krev_S": t.kl_reverse_k3_T,
        "sum_r_S": t.ratio_T,
        "sum_r2_S": t.ratio_sq_T,
        "max_tv_S": t.tv_T,
        "min_l_S": l,
        "max_l_S": l,
    }


@dataclass
class RuleColumn:
    """One rule under one advantage hypothesis, per sequence (aligned with the table's rows)."""

    unit: Any
    """the ``masks.Unit`` it was evaluated as (rule, hypothesis, sweep)."""
    tokens_rejected_S: np.ndarray
    """tokens the rule rejects in each sequence (a sequence rule: all of them, or none)."""
    tokens_reweighted_S: np.ndarray
    sequence_rejected_S: np.ndarray | None = None
    """1.0 where a sequence rule rejects the whole sequence, else 0.0; None for token rules."""

    @property
    def name(self) -> str:
        return self.unit.rule.name

    @property
    def label(self) -> str:
        return self.unit.rule.label

    @property
    def hypothesis(self) -> str:
        return self.unit.hypothesis

    @property
    def sweep(self) -> str | None:
        return self.unit.sweep

    @property
    def level(self) -> str:
        return self.unit.rule.level

    @property
    def with_rejection_S(self) -> np.ndarray:
        """1.0 where the rule rejects at least one token of the sequence."""
        if self.sequence_rejected_S is not None:
            return self.sequence_rejected_S
        return (self.tokens_rejected_S > 0).astype(np.float64)


@dataclass
class SequenceTable:
    """Per-sequence aggregates over the tokens with finite logprobs, sorted by ``sequence_id_S``.

    With l = log p - log q and r = exp(l) per token: ``sum_l_S`` is S (= -sum
    k1), ``sum_k2_S`` sums l^2/2, ``sum_k3_S`` (r-1)-l, ``sum_krev_S`` r l-(r-1),
    ``sum_tv_S`` |p - q| of the sampled token.
    """

    sequence_id_S: np.ndarray
    n_tokens_S: np.ndarray
    sum_tv_S: np.ndarray
    sum_abs_l_S: np.ndarray
    sum_l_S: np.ndarray
    sum_k2_S: np.ndarray
    sum_k3_S: np.ndarray
    sum_krev_S: np.ndarray
    sum_r_S: np.ndarray
    sum_r2_S: np.ndarray
    max_tv_S: np.ndarray
    min_l_S: np.ndarray
    max_l_S: np.ndarray
    advantage_S: np.ndarray | None = None
    """mean advantage over the sequence's tokens; None without an advantage column."""
    rules: list[RuleColumn] = field(default_factory=list)
    """compare-masks' rules per sequence: every token-rule unit (sweep points too) and the
    rejecting sequence rules outside sweeps."""

    @property
    def size(self) -> int:
        return int(self.sequence_id_S.size)

    @property
    def mean_l_S(self) -> np.ndarray:
        """mean_t l per sequence."""
        return self.sum_l_S / self.n_tokens_S

    @classmethod
    def from_reduced(
        cls,
        sequence_id_S: np.ndarray,
        reduced: dict[str, np.ndarray],
        advantage_sum_S: np.ndarray | None,
        rules: list[RuleColumn] | None = None,
    ) -> SequenceTable:
        """From the per-sequence reductions of :func:`token_values` (keyed by field, as :data:`REDUCTIONS`)."""
        n = reduced["n_tokens_S"]
        return cls(
            sequence_id_S,
            **{f: reduced[f] for f in SUM_FIELDS},
            advantage_S=None if advantage_sum_S is None else advantage_sum_S / n,
            rules=list(rules or []),
        )

    def rule_columns(self, name: str) -> list[RuleColumn]:
        """The columns of rule ``name`` outside sweeps (two under the A>0 / A<0 hypotheses, else one)."""
        return [c for c in self.rules if c.sweep is None and c.name == name]

    @property
    def sums(self) -> dict[str, np.ndarray]:
        """The table as the mapping older callers read (``n``, ``sum_tv``, ...); new code reads the fields."""
        out = {"n": self.n_tokens_S}
        out.update({f[: -len("_S")]: getattr(self, f) for f in SUM_FIELDS[1:]})
        return out
