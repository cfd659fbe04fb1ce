"""The diagnose summary: the JSON payload's reading (one paragraph from the numbers).

The payload is built by :func:`~mismatchscope.diagnose.run.run_diagnose`;
:func:`reading` is the one-paragraph interpretation, computed from the
numbers only. The tables and pictures are drawn by ``mismatchscope.render``.
"""

from __future__ import annotations

from typing import Any

from .effects import PRIMARY


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.3g}%"


def reading(p: dict[str, Any]) -> str:
    """One paragraph: who owns the gap, what removes it at what cost, what changes nothing, what is not repeatable."""
    parts = []
    base = p["baseline"]["metrics"][PRIMARY]
    dec = p["decomposition"]["shares"]
    if dec.get("sampler_share") is not None:
        owner, share = (
            ("sampler", dec["sampler_share"]) if dec["sampler_share"] >= 0.5 else ("trainer", dec["trainer_share"])
        )
        corr = dec.get("correlation")
        parts.append(
            f"the {owner} owns {_pct(share)} of the gap (mean |log p - log q| {base:.3g}"
            + (f"; error correlation {corr:.2f}" if corr is not None else "")
            + ")"
        )
    ok = [v for v in p["variants"] if v["status"] == "ok"]
    best = [v for v in ok if v["delta"][PRIMARY]["significant"] and v["delta"][PRIMARY]["estimate"] < 0]
    for v in best[:2]:
        d = v["delta"][PRIMARY]
        rel = v["throughput"].get("relative_to_baseline")
        removed = -d["estimate"] / base if base > 0 else None
        timing = v["throughput"].get("timing")
        interval = f" ({timing['low']:.2f}-{timing['high']:.2f}x)" if timing else ""
        parts.append(
            f"{v['name']} removes {_pct(removed)} of it" + (f" at {rel:.2f}x throughput{interval}" if rel else "")
        )
    worse = [v for v in ok if v["delta"][PRIMARY]["significant"] and v["delta"][PRIMARY]["estimate"] > 0]
    for v in worse[:2]:
        d = v["delta"][PRIMARY]
        factor = v["metrics"][PRIMARY] / base if base > 0 else None
        parts.append(f"{v['name']} makes it {factor:.3g}x as large" if factor else f"{v['name']} adds to it")
    if p["no_effect"]:
        parts.append(f"{', '.join(p['no_effect'])} change{'s' if len(p['no_effect']) == 1 else ''} nothing measurable")
    from .timing import SPREAD_LIMIT, too_wide

    wide = too_wide(p)
    if wide:
        parts.append(
            f"throughput of {', '.join(wide)} not ranked: {'its' if len(wide) == 1 else 'their'} rounds against the "
            "baseline spread over more "
            f"than {SPREAD_LIMIT:g}x (the machine's load varied; run again on a quieter machine)"
        )
    failed = [v["name"] for v in p["variants"] if v["status"] == "failed"]
    if failed:
        parts.append(f"{', '.join(failed)} failed to run")
    det = p.get("determinism") or {}
    shaky = [
        k
        for k, d in det.items()
        if d.get("share_logprobs_bit_identical") not in (None, 1.0)
        or d.get("share_tokens_identical") not in (None, 1.0)
    ]
    if det:
        parts.append(
            "every determinism check is bit-identical" if not shaky else f"not bit-identical: {', '.join(shaky)}"
        )
    text = "; ".join(parts)
    return text[:1].upper() + text[1:] + "." if text else ""


def finish(p: dict[str, Any]) -> dict[str, Any]:
    """Add the reading to the payload (kept separate so tests can call it on any payload)."""
    p["reading"] = reading(p)
    return p
