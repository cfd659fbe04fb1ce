"""The price of zero mismatch: each certified configuration's throughput against the fastest uncertified one.

The cost table marks which configurations certify (``certify``'s verdict on
their run); this turns the column into the one number users ask for. For
each certified configuration the price is the fastest uncertified
configuration's pipeline tokens/s divided by its own (``zero costs N x
here``), with the sampling and the scoring sides apart, because a
zero-mismatch stack usually pays on one side: recomputing instead of
caching is a sampler cost. The rates are the ones :func:`.effects.rank` put
in each configuration's ``throughput``; nothing is timed here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .document import Costs, DiagnoseDocument, ZeroPrice


def _ratio(fast: float | None, slow: float | None) -> float | None:
    return fast / slow if fast and slow else None


@dataclass(frozen=True)
class _Rated:
    name: str
    pipeline: float
    costs: Costs
    certified: bool


def _configurations(doc: DiagnoseDocument) -> list[_Rated]:
    """The baseline and every variant that ran, with a measured pipeline rate."""
    from .document import VariantOk

    configs = [("baseline", doc.baseline.throughput, doc.baseline.certified)]
    configs += [(v.name, v.throughput, v.certified) for v in doc.variants if isinstance(v, VariantOk)]
    return [_Rated(n, t.pipeline_tokens_per_s, t.costs, c) for n, t, c in configs if t.pipeline_tokens_per_s]


def zero_price(doc: DiagnoseDocument) -> list[ZeroPrice]:
    """One entry per certified configuration with a measured rate; empty when none certifies or none does not."""
    from .document import ZeroPrice

    rated = _configurations(doc)
    uncertified = [c for c in rated if not c.certified]
    if not uncertified:
        return []
    fast = max(uncertified, key=lambda c: c.pipeline)
    return [
        ZeroPrice(
            configuration=c.name,
            against=fast.name,
            pipeline_tokens_per_s=c.pipeline,
            against_pipeline_tokens_per_s=fast.pipeline,
            cost_x=_ratio(fast.pipeline, c.pipeline),
            sampler_cost_x=_ratio(fast.costs.sampler_tokens_per_s, c.costs.sampler_tokens_per_s),
            trainer_cost_x=_ratio(fast.costs.trainer_tokens_per_s, c.costs.trainer_tokens_per_s),
        )
        for c in rated
        if c.certified
    ]


def price_line(entry: ZeroPrice) -> str:
    """``zero costs 3.1x here: ...``: one certified configuration's price in words."""

    def x(v: float | None) -> str:
        return "-" if v is None else f"{v:.2f}x"

    return (
        f"zero costs {x(entry.cost_x)} here: {entry.configuration} (certified) runs "
        f"{entry.pipeline_tokens_per_s:,.0f} pipeline tokens/s against {entry.against_pipeline_tokens_per_s:,.0f} "
        f"for {entry.against}, the fastest uncertified configuration (sampling {x(entry.sampler_cost_x)}, "
        f"scoring {x(entry.trainer_cost_x)})"
    )
