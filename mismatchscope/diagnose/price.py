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

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .document import ZeroPrice


def _ratio(fast: float | None, slow: float | None) -> float | None:
    return fast / slow if fast and slow else None


def _configurations(payload: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    ok = [(v["name"], v) for v in payload["variants"] if v.get("status") == "ok"]
    return [("baseline", payload["baseline"]), *ok]


def zero_price(payload: dict[str, Any]) -> list[dict[str, Any]]:
    """One entry per certified configuration with a measured rate; empty when none certifies or none does not."""
    rated = [(n, c) for n, c in _configurations(payload) if c["throughput"].get("pipeline_tokens_per_s")]
    uncertified = [(n, c) for n, c in rated if c.get("certified") is False]
    if not uncertified:
        return []
    fast_name, fast = max(uncertified, key=lambda nc: nc[1]["throughput"]["pipeline_tokens_per_s"])
    ft = fast["throughput"]
    out = []
    for name, c in rated:
        if c.get("certified") is not True:
            continue
        t = c["throughput"]
        out.append(
            {
                "configuration": name,
                "against": fast_name,
                "pipeline_tokens_per_s": t["pipeline_tokens_per_s"],
                "against_pipeline_tokens_per_s": ft["pipeline_tokens_per_s"],
                "cost_x": _ratio(ft["pipeline_tokens_per_s"], t["pipeline_tokens_per_s"]),
                "sampler_cost_x": _ratio(ft.get("sampler_tokens_per_s"), t.get("sampler_tokens_per_s")),
                "trainer_cost_x": _ratio(ft.get("trainer_tokens_per_s"), t.get("trainer_tokens_per_s")),
            }
        )
    return out


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
