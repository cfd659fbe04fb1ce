"""What ``compare-masks`` prints, assembled from the rule accumulator.

Runs after the streaming pass: sequence rules are evaluated here on the
per-sequence aggregates (``MaskAccumulator.finish``), then every unit becomes a
row; a rule evaluated under the two advantage hypotheses gets their mean row.
"""

from __future__ import annotations

import numpy as np

from ..rules import SequenceInputs
from .masks import MaskAccumulator, mean_row, tail_reading, turn_counts, unit_row
from .results import MasksResult, RuleRow, Sweep, SweepPoint
from .turns import TurnRows


def assemble_masks(
    masks: MaskAccumulator,
    seq: SequenceInputs,
    per_seq: dict[str, np.ndarray],
    tokens: int,
    sequences: int,
    has_adv: bool,
    warnings: list[str],
    by_turn: tuple[np.ndarray, TurnRows] | None = None,
) -> MasksResult:
    """The ``compare-masks`` result: a row per rule and hypothesis, sweeps, tails, agreement and examples.

    ``by_turn`` (``--by turn``): the sequences' ids and the run's tokens per (sequence, turn).
    """
    extra = masks.finish(seq, per_seq, by_turn)
    turns = None
    if by_turn is not None:
        turns = int(by_turn[1].turn.max()) + 1 if by_turn[1].size else 0
    rows: list[RuleRow] = []
    sweeps: dict[str, Sweep] = {}
    pending: dict[str, RuleRow] = {}
    for u in masks.units:
        row = unit_row(u, tokens, sequences, has_adv, masks.routed, turns)
        if u.sweep is None:
            rows.append(row)
            if u.hypothesis == "A>0":
                pending[u.rule.label] = row
            elif u.hypothesis == "A<0" and u.rule.label in pending:
                rows.append(mean_row(pending.pop(u.rule.label), row))
        else:
            name, _, param = u.sweep.partition(".")
            sw = sweeps.setdefault(u.sweep, Sweep(rule=name, param=param, level=u.rule.level, points=[]))
            sw.points.append(_sweep_point(u.rule.params[param], row))
    return MasksResult(
        tokens=tokens,
        sequences=int(sequences),
        rules=rows,
        tokens_by_sampler_prob=extra.tokens_by_sampler_prob,
        tokens_by_pq_sign=extra.tokens_by_pq_sign,
        tail_reading=tail_reading(rows),
        agreement=extra.agreement,
        sweeps=list(sweeps.values()),
        examples=extra.examples,
        tokens_by_turn={k: int(v) for k, v in turn_counts(masks.tokens_by_turn, turns).items()}
        if turns is not None
        else None,
        warnings=warnings,
    )


def _sweep_point(value, row: RuleRow) -> SweepPoint:
    """One swept value's counts, from its unit's row."""
    return SweepPoint(
        value=value,
        hypothesis=row.hypothesis,
        token_reject_rate=row.token_reject_rate,
        token_reweight_rate=row.token_reweight_rate,
        tokens_rejected=row.tokens_rejected,
        tokens_reweighted=row.tokens_reweighted,
        sequences_with_rejection=row.sequences_with_rejection,
        sequences_rejected=row.sequences_rejected,
        sequence_reject_rate=row.sequence_reject_rate,
    )
