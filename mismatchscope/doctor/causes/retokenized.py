"""``retokenized``: the trainer scored other ids than the sampler sampled (a multi-turn conversation decoded to
text and encoded again between the sides).

The detection is ``doctor/retokenized.py``'s (both sides' ids, the run's tokenizer, or the gap's signature); here
it is one registered cause. Its correction leaves out the misaligned rows (from each drifting turn's first
changed token to its end), so every other cause is read again on pairs that pair the same tokens: misaligned
pairs look like a misjoin, a shift, a boundary gap. A run with neither turns, nor both sides' ids, nor a
tokenizer is not checked.
"""

from __future__ import annotations

from typing import Any

from ..document import Finding
from ..findings import not_checked
from ..registry import Cause, Context
from ..retokenized import check
from ..sample import Sample

NEEDS = ["turns (a multi-turn run), both sides' ids (trainer_token_id), or --tokenizer"]


_LAST: dict[str, Any] = {}
"""the last sample checked and what the check gave: the correction reuses the detection's rows (re-encoding a
run's turns with a tokenizer is the costly part)."""


def _check(ctx: Context):
    if _LAST.get("sample") is ctx.sample:
        return _LAST["result"]
    tok = ctx.extra.get("tokenizer")
    result = check(ctx.sample, getattr(tok, "tokenizer", None), getattr(tok, "source", None))
    _LAST.update(sample=ctx.sample, result=result)
    return result


def detect(ctx: Context) -> Finding:
    found, _rows = _check(ctx)
    if found is None:
        return not_checked("retokenized", NEEDS, "not checked: a run of single turns with one side's ids")
    return found


def correct(ctx: Context, f: Finding) -> Sample:
    _found, rows = _check(ctx)
    return ctx.sample if rows is None else ctx.sample.take(~rows)


CAUSE = Cause(
    "retokenized", detect, correct, correction="the misaligned rows left out (from each drift to its turn's end)"
)
