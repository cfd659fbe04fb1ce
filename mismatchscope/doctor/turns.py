"""``doctor`` on a multi-turn run: the prompt boundary read per turn, and the turn each cause starts in.

In an agentic run every turn after the first opens after a tool response
that was rendered, tokenised and, on one side or the other, perhaps scored in
another context: the first tokens of *each* turn are where a boundary
problem shows (verl #5229 reports mismatch per round for this reason).
:func:`turn_boundary` is ``prompt_boundary`` with the turn's own positions:
the gap at each turn's first tokens against what tokens of the same sampler
probability show later in the turns, turn by turn.

:func:`starting_turns` tells, for each cause found, the first turn whose own
tokens show it: the detector run again on each turn's rows alone.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import numpy as np

from .document import Evidence, Finding
from .findings import MIN_TOKENS, clear, detected, g, too_few
from .sample import Sample
from .structure import _PROB_EDGES, BOUNDARY_FLOOR, BOUNDARY_POSITIONS, BOUNDARY_RATIO

MAX_TURNS = 16
"""turns a cause's first turn is looked for in (each costs one run of its detector on the turn's rows)."""
MIN_TURN_ROWS = 5
"""a turn's first position needs this many tokens to be read."""


def by_turn(s: Sample, turn: int | None = None) -> Sample:
    """The sample with each row's position within its turn as its position (``turn``: that turn's rows only)."""
    cols = dict(s.columns)
    if turn is not None:
        keep = cols["turn"] == turn
        cols = {k: v[keep] for k, v in cols.items()}
    cols["position"] = cols["turn_position"]
    return Sample(cols, s.rows_seen, s.sampled)


def turn_boundary(s: Sample) -> Finding:
    """``prompt_boundary`` per turn: which turns' first positions hold a gap the rest of the turns do not."""
    pos, d = s.columns["turn_position"], np.abs(s.columns["trainer_logprob"] - s.columns["sampler_logprob"])
    turn = s.columns["turn"]
    bucket = np.searchsorted(_PROB_EDGES, -s.columns["sampler_logprob"])
    later = pos >= BOUNDARY_POSITIONS
    if later.sum() < MIN_TOKENS or (~later).sum() < MIN_TOKENS:
        return too_few("prompt_boundary", int(d.size))
    n_b = np.bincount(bucket[later], minlength=_PROB_EDGES.size + 1)
    mean_b = np.bincount(bucket[later], weights=d[later], minlength=_PROB_EDGES.size + 1) / np.maximum(n_b, 1)
    mean_b = np.where(n_b > 0, mean_b, float(np.mean(d[later])))
    affected: dict[int, int] = {}
    ratios: dict[int, float] = {}
    for k in np.unique(turn).tolist():
        positions = 0
        for j in range(BOUNDARY_POSITIONS):
            at = (turn == k) & (pos == j)
            if at.sum() < MIN_TURN_ROWS:
                break
            obs, exp = float(np.mean(d[at])), max(float(np.mean(mean_b[bucket[at]])), 1e-12)
            if j == 0:
                ratios[k] = obs / exp
            if obs < BOUNDARY_FLOOR or obs < BOUNDARY_RATIO * exp:
                break
            positions += 1
        if positions:
            affected[k] = positions
    worst = max(ratios.values(), default=0.0)
    ev = [
        Evidence(
            "largest over the turns: the turn's first position's mean |gap| over what its tokens' probabilities "
            "give later in the turns",
            worst,
            "0.8 to 1.0 on the bundled clean runs",
        )
    ]
    if not affected:
        return clear("prompt_boundary", "each turn's first positions are as close as the rest of the turns", ev)
    turns = sorted(affected)
    after = [k for k in turns if k > 0]
    where = "the first tokens after the tool response" if after else "the first tokens after the prompt"
    n = max(affected.values())
    f = detected(
        "prompt_boundary",
        f"the gap sits in the first {n} position(s) of turn(s) {', '.join(map(str, turns))} ({where}): "
        f"{g(ratios[turns[0]])}x what the rest of the turns shows",
        ev,
        {"positions_affected": float(n), "turns": ", ".join(map(str, turns))},
        "high",
        "give both sides the same ids at each turn's start: the chat template's tool span and the next assistant "
        "header tokenised once, appended as token ids to both",
    )
    return replace(f, turn=turns[0])


def starting_turns(found: list[Finding], s: Sample, detectors: dict[str, Callable[[Sample], Finding]]) -> list[Finding]:
    """``found`` with each detected cause's first turn (``Finding.turn``): the first turn whose rows alone the
    cause's detector (in ``detectors``) finds it in. A cause that names its turn itself keeps it; one whose
    detector reads more than rows, or that no turn shows alone, gets none."""
    if not s.has("turn"):
        return found
    turns = np.unique(s.columns["turn"])[:MAX_TURNS].tolist()
    out = []
    for f in found:
        detector = detectors.get(f.cause)
        if f.status == "detected" and f.turn is None and detector is not None and len(turns) > 1:
            k = next((k for k in turns if detector(by_turn(s, k)).status == "detected"), None)
            f = replace(f, turn=k) if k is not None else f
        out.append(f)
    return out


def explained(
    found: list[Finding], s: Sample, rows: np.ndarray, detectors: dict[str, Callable[[Sample], Finding]]
) -> list[Finding]:
    """``found`` after a detected ``retokenized``: a cause the misaligned ``rows`` alone made a detector see is
    read again without them, and cleared as explained when it goes (misaligned pairs look like a misjoin, a
    shift, a boundary gap)."""
    rest = Sample({k: v[~rows] for k, v in s.columns.items()}, s.rows_seen, s.sampled)
    out = []
    for f in found:
        detector = detectors.get(f.cause)
        if f.status == "detected" and f.cause != "retokenized" and detector is not None:
            if detector(rest).status != "detected":
                f = clear(
                    f.cause,
                    f"explained by retokenized: without its misaligned rows, {f.sentence[:1].lower()}"
                    f"{f.sentence[1:]} no longer holds",
                    f.evidence,
                )
        out.append(f)
    return out
