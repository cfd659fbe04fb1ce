"""``doctor`` on a multi-turn run: the turn each cause starts in.

In an agentic run every turn after the first opens after a tool response
that was rendered, tokenised and, on one side or the other, perhaps scored in
another context. ``prompt_boundary`` reads the first positions of every turn
itself (``causes/prompt_boundary.py``); :func:`starting_turns` tells, for every
other cause found, the first turn whose own tokens show it: its detector run
again on each turn's rows alone, positions counted within the turn.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from .document import Finding
from .registry import Context
from .sample import Sample

MAX_TURNS = 16
"""turns a cause's first turn is looked for in (each costs one run of its detector on the turn's rows)."""


def by_turn(s: Sample, turn: int | None = None) -> Sample:
    """The sample with each row's position within its turn as its position (``turn``: that turn's rows only)."""
    rows = s.columns["turn"] == turn if turn is not None else np.ones(len(s), dtype=bool)
    out = s.take(rows)
    return out.with_columns(position=out.columns["turn_position"])


def starting_turns(found: list[Finding], ctx: Context) -> list[Finding]:
    """``found`` with each detected cause's first turn (``Finding.turn``): the first turn whose rows alone the
    cause's detector finds it in. A cause that names its turn itself keeps it; one read from the run as a whole,
    or that no turn shows alone, gets none."""
    from .causes import BY_NAME

    s = ctx.sample
    if not (s.has("turn") and s.has("turn_position")):
        return found
    turns = np.unique(s.columns["turn"])[:MAX_TURNS].tolist()
    if len(turns) < 2:
        return found
    out = []
    for f in found:
        cause = BY_NAME.get(f.cause)
        if f.status == "detected" and f.turn is None and cause is not None and cause.sample_scope:
            with np.errstate(all="ignore"):
                k = next(
                    (k for k in turns if cause.detect(ctx.on(by_turn(s, k), subset=True)).status == "detected"), None
                )
            f = replace(f, turn=int(k)) if k is not None else f
        out.append(f)
    return out
