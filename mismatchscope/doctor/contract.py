"""Two causes read from the run's provenance, not from its numbers: the sides are not one program, or a side ran
otherwise than asked.

``contract_difference`` comes before every numerical reading: when the
sampler and the trainer ran other weights, another tokenizer or chat
template, or read their logprobs at another temperature or truncation, the
gap measures that difference, and nothing the detectors find in the numbers
applies until the identities match (a pipeline problem: exit 1).
``fallback``: a side whose numerics ran otherwise than asked, or whose engine
logged a fallback; the program is the same on both sides, but not the one
meant (not a pipeline problem by itself). The detection is
:mod:`mismatchscope.execution.contract`'s; here it becomes a finding.
"""

from __future__ import annotations

from dataclasses import fields

from ..execution.compare import shown
from ..execution.contract import Contract, fallbacks
from ..execution.record import RunProvenance
from .document import Finding
from .findings import clear, detected, not_checked


def contract_finding(c: Contract | None) -> Finding:
    if c is None or not c.checked:
        return not_checked(
            "contract_difference",
            ["the run's provenance (weights, tokenizer, chat template, sampling parameters of both sides)"],
        )
    if c.same:
        return clear("contract_difference", c.sentence())
    return detected(
        "contract_difference",
        c.sentence(),
        [],
        {d.identity: f"sampler {shown(d.sampler)}, trainer {shown(d.trainer)}" for d in c.differences},
        "high",
        "run both sides from the same checkpoint, tokenizer and chat template, and score at the sampler's "
        "temperature and truncation; `mismatchscope provenance RUN` shows both sides",
    )


def fallback_finding(prov: RunProvenance | None) -> Finding:
    needs = ["the run's provenance (numerics asked for and used, the engines' logs)"]
    if prov is None:
        return not_checked("fallback", needs)
    found = fallbacks(prov)
    sides = (prov.sampler, prov.trainer)
    asked = sum(
        getattr(s.requested, f.name) is not None and getattr(s.used, f.name) is not None
        for s in sides
        for f in fields(s.requested)
    )
    logs = [s for s in sides if s.fallbacks is not None]
    if not found and not asked and not logs:
        return not_checked("fallback", needs)
    if not found:
        read = "" if logs else " (no engine's log was read)"
        return clear("fallback", f"each side ran the numerics it asked for, and no engine logged a fallback{read}")
    shown = found[:4]
    what = "; ".join(f"{f.side}: {f.detail}" for f in shown) + (
        f"; and {len(found) - 4} more" if len(found) > 4 else ""
    )
    return detected(
        "fallback",
        f"a side ran otherwise than asked: {what}",
        [],
        {f"{f.side} {i + 1}": f.detail for i, f in enumerate(found)},
        "high",
        "check the engine's options and its log (the run's engine.log): the numbers are those of what ran, not of "
        "what was asked for",
        pipeline=False,
    )
