"""``contract_difference``: the two sides are not one program (other weights, tokenizer or chat template, or the
logprobs of another distribution), read from the run's provenance before any number.

The reading is ``doctor/contract.py``'s (over ``execution.contract``). It leads: when found, it is ranked first and
the verdict is a pipeline problem whatever the numbers explain, since no numerical reading applies until the
identities match.
"""

from __future__ import annotations

from ..contract import contract_finding
from ..document import Finding
from ..registry import Cause, Context


def detect(ctx: Context) -> Finding:
    from ...execution.contract import contract

    provenance = ctx.extra.get("provenance")
    return contract_finding(contract(provenance) if provenance is not None else None)


CAUSE = Cause("contract_difference", detect, sample_scope=False, leads=True)
