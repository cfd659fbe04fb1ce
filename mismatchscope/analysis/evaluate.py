"""The one evaluator of rules: each rule under each advantage hypothesis, token and sequence actions.

A unit is a rule instance with a hypothesis: "data" (the file's advantages,
or none needed), or "A>0" / "A<0" when the rule reads the advantage's sign
and the file has none, evaluated as if every advantage were +1 or -1 (a
labelled hypothesis, never a silent assumption). ``compare-masks`` (and so
``gate``, which reads its per-sequence columns) and ``timeline`` (and so the
live Monitor) evaluate through these functions and differ only in the key
they count by: the whole file and each sequence, or each (step, group).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

import numpy as np

from ..divergence import TokenTerms
from ..rules import REJECT, REWEIGHT, SequenceInputs

HYPOTHESES: dict[Literal["A>0", "A<0"], float] = {"A>0": 1.0, "A<0": -1.0}
"""the two signs a rule that reads the advantage is evaluated under on a file without one, and the advantage each puts."""


@dataclass(frozen=True)
class Verdicts:
    """What one unit does to each token (or sequence): aligned boolean masks."""

    rejected: np.ndarray
    reweighted: np.ndarray

    def acted(self, acts: str) -> np.ndarray:
        """The mask of the unit's own action ("reject" or "reweight")."""
        return self.rejected if acts == "reject" else self.reweighted

    @staticmethod
    def of(act: np.ndarray) -> Verdicts:
        """The masks of an action array (KEEP, REJECT, REWEIGHT per token or sequence)."""
        return Verdicts(act == REJECT, act == REWEIGHT)


def token_actions(unit, t: TokenTerms, advantage_T: np.ndarray | None) -> np.ndarray:
    """``unit`` (``.rule``, ``.hypothesis``) on the tokens of one batch: KEEP, REJECT or REWEIGHT per token."""
    adv = advantage_T if unit.hypothesis == "data" else np.full(t.log_ratio_T.size, HYPOTHESES[unit.hypothesis])
    return unit.rule.token_actions(t, adv)


def token_verdicts(unit, t: TokenTerms, advantage_T: np.ndarray | None) -> Verdicts:
    """``unit`` on the tokens of one batch, as masks."""
    return Verdicts.of(token_actions(unit, t, advantage_T))


def sequence_actions(unit, seq: SequenceInputs) -> np.ndarray:
    """``unit`` on per-sequence aggregates: KEEP, REJECT or REWEIGHT per row."""
    if unit.hypothesis != "data":
        seq = replace(seq, advantage_S=np.full(seq.n_tokens_S.size, HYPOTHESES[unit.hypothesis]))
    return unit.rule.sequence_actions(seq)


def sequence_verdicts(unit, seq: SequenceInputs) -> Verdicts:
    """``unit`` on per-sequence aggregates (whatever a row is: a sequence, or a (step, sequence))."""
    return Verdicts.of(sequence_actions(unit, seq))


def count_per_key(code: np.ndarray, mask: np.ndarray, n_keys: int, weights: np.ndarray | None = None) -> np.ndarray:
    """Per key: how many of the masked rows (or the sum of their ``weights``: tokens of rejected sequences)."""
    w = mask.astype(np.float64) if weights is None else np.where(mask, weights, 0.0)
    return np.bincount(code, weights=w, minlength=n_keys)
