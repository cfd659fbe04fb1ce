"""Which sequences a view shows: the worst N by a ranking, or the ids asked for (each checked against the run).

The rankings read the per-sequence table the analysis pass already built,
so choosing costs no pass of its own.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..analysis.evaluate import sequence_actions
from ..analysis.masks import Unit
from ..errors import UsageError
from ..rules import REJECT, REWEIGHT

RANKINGS = {
    "k3": "the sequence's sum of k3 (nats)",
    "max-gap": "the sequence's largest |log p - log q| (nats)",
}
"""``--by`` besides a rule's name: what each ranks by."""


@dataclass(frozen=True)
class Choice:
    """The sequences to show, in order, with the value each was ranked by."""

    ids: list[int]
    values: list[float | None]
    ranking: str
    """in words, for the page."""
    rows: np.ndarray
    """each one's row in the per-sequence table."""


def choose(result, units: Sequence[Unit], n: int, by: str, asked: Sequence[int]) -> Choice:
    """``asked`` (``--sequences``) when given, else the ``n`` largest by ``by`` (ties: larger k3, then smaller id)."""
    table = result.per_sequence
    ids_S = table.sequence_id_S
    if asked:
        rows = np.array([_row_of(ids_S, int(i)) for i in asked], dtype=np.intp)
        return Choice([int(i) for i in asked], [None] * len(asked), "the sequences asked for (--sequences)", rows)
    value_S, ranking = ranking_values(result, units, by)
    key = np.where(np.isnan(value_S), -np.inf, value_S)
    order = np.lexsort((ids_S, -table.sum_k3_S, -key))[:n]
    return Choice([int(ids_S[i]) for i in order], [float(value_S[i]) for i in order], ranking, order)


def ranking_values(result, units: Sequence[Unit], by: str) -> tuple[np.ndarray, str]:
    """Per sequence, the value ``by`` ranks by, and its description."""
    table = result.per_sequence
    if by == "k3":
        return np.asarray(table.sum_k3_S, dtype=np.float64), RANKINGS[by]
    if by == "max-gap":
        return np.maximum(np.abs(table.min_l_S), np.abs(table.max_l_S)), RANKINGS[by]
    chosen = [u for u in units if u.rule.name == by]
    if not chosen:
        names = ", ".join(dict.fromkeys(u.rule.name for u in units))
        raise UsageError(
            f"--by {by!r} is neither a ranking nor one of the rules shown",
            hint=f"give k3, max-gap or one of: {names}",
        )
    total = np.zeros(table.size)
    for u in chosen:
        total += acted_tokens(result, u)
    acts = "reweights" if chosen[0].rule.spec.acts == "reweight" else "rejects"
    return total, f"the tokens {by} {acts} in the sequence (ties: larger sum of k3)"


def acted_tokens(result, unit: Unit) -> np.ndarray:
    """Per sequence, the tokens ``unit`` rejects or reweights (its own action)."""
    table = result.per_sequence
    if unit.rule.level == "sequence":
        act = sequence_actions(unit, result.sequence_inputs)
        code = REJECT if unit.rule.spec.acts == "reject" else REWEIGHT
        return np.where(act == code, table.n_tokens_S, 0).astype(np.float64)
    col = next(c for c in table.rules if c.unit.key == unit.key)
    return col.tokens_rejected_S if unit.rule.spec.acts == "reject" else col.tokens_reweighted_S


def _row_of(ids_S: np.ndarray, sid: int) -> int:
    """The table's row of sequence ``sid``; a one-line error when the run has none."""
    i = int(np.searchsorted(ids_S, sid))
    if i < ids_S.size and ids_S[i] == sid:
        return i
    if ids_S.size and sid > ids_S[-1]:
        raise UsageError(
            f"--sequences {sid} is past the run: its last sequence id is {int(ids_S[-1])}",
            hint=f"the run's sequence ids run from {int(ids_S[0])} to {int(ids_S[-1])}",
        )
    near = ids_S[max(0, i - 1) : i + 1]
    raise UsageError(
        f"--sequences {sid}: the run has no sequence with this id",
        hint=f"nearest ids: {', '.join(str(int(x)) for x in near)} (report --worst lists the worst ones)",
    )
