"""The diagnose summary: the document's reading (one paragraph from the numbers).

The document is built by :func:`~mismatchscope.diagnose.run.run_diagnose`;
:func:`reading` is the one-paragraph interpretation, computed from its
numbers only. The tables and pictures are drawn by ``mismatchscope.render``.
"""

from __future__ import annotations

from dataclasses import fields, replace
from typing import TYPE_CHECKING

from ..formatting import pct
from .effects import PRIMARY, primary

if TYPE_CHECKING:
    from .document import Determinism, DiagnoseDocument, VariantOk


def reading(p: DiagnoseDocument) -> str:
    """One paragraph: who owns the gap, what removes it at what cost, what changes nothing, what is not repeatable."""
    from .document import VariantOk

    base = primary(p.baseline.metrics)
    ok = [v for v in p.variants if isinstance(v, VariantOk)]
    parts = [
        *_owner(p, base),
        *_removers(ok, base),
        *_growers(ok, base),
        *_unchanged(p),
        *_unranked(p),
        *_failed(p),
        *_repeatability(p.determinism),
    ]
    text = "; ".join(parts)
    return text[:1].upper() + text[1:] + "." if text else ""


def _owner(p: DiagnoseDocument, base: float) -> list[str]:
    dec = p.decomposition.shares
    if dec.sampler_share is None:
        return []
    owner, share = ("sampler", dec.sampler_share) if dec.sampler_share >= 0.5 else ("trainer", dec.trainer_share)
    corr = dec.correlation
    return [
        f"the {owner} owns {pct(share)} of the gap (mean |log p - log q| {base:.3g}"
        + (f"; error correlation {corr:.2f}" if corr is not None else "")
        + ")"
    ]


def _removers(ok: list[VariantOk], base: float) -> list[str]:
    """The two largest significant reductions, with their throughput."""
    best = [v for v in ok if v.delta[PRIMARY].significant and v.delta[PRIMARY].estimate < 0]
    out = []
    for v in best[:2]:
        d = v.delta[PRIMARY]
        rel = v.throughput.relative_to_baseline
        removed = -d.estimate / base if base > 0 else None
        timing = v.throughput.timing
        interval = f" ({timing.low:.2f}-{timing.high:.2f}x)" if timing else ""
        out.append(f"{v.name} removes {pct(removed)} of it" + (f" at {rel:.2f}x throughput{interval}" if rel else ""))
    return out


def _growers(ok: list[VariantOk], base: float) -> list[str]:
    """The two first significant increases, as a factor of the baseline's gap."""
    worse = [v for v in ok if v.delta[PRIMARY].significant and v.delta[PRIMARY].estimate > 0]
    out = []
    for v in worse[:2]:
        factor = primary(v.metrics) / base if base > 0 else None
        out.append(f"{v.name} makes it {factor:.3g}x as large" if factor else f"{v.name} adds to it")
    return out


def _unchanged(p: DiagnoseDocument) -> list[str]:
    if not p.no_effect:
        return []
    return [f"{', '.join(p.no_effect)} change{'s' if len(p.no_effect) == 1 else ''} nothing measurable"]


def _unranked(p: DiagnoseDocument) -> list[str]:
    from .timing import SPREAD_LIMIT, too_wide

    wide = too_wide(p.variants)
    if not wide:
        return []
    return [
        f"throughput of {', '.join(wide)} not ranked: {'its' if len(wide) == 1 else 'their'} rounds against the "
        "baseline spread over more "
        f"than {SPREAD_LIMIT:g}x (the machine's load varied; run again on a quieter machine)"
    ]


def _failed(p: DiagnoseDocument) -> list[str]:
    failed = [v.name for v in p.variants if v.status == "failed"]
    late = [v.name for v in p.variants if v.status == "timed out"]
    return ([f"{', '.join(failed)} failed to run"] if failed else []) + (
        [f"{', '.join(late)} timed out (stopped without a result)"] if late else []
    )


def _repeatability(det: Determinism) -> list[str]:
    checks = {f.name: getattr(det, f.name) for f in fields(det)}
    checks = {k: d for k, d in checks.items() if d is not None}
    if not checks:
        return []
    shaky = [
        k
        for k, d in checks.items()
        if d.share_logprobs_bit_identical not in (None, 1.0) or d.share_tokens_identical not in (None, 1.0)
    ]
    return ["every determinism check is bit-identical" if not shaky else f"not bit-identical: {', '.join(shaky)}"]


def finish(p: DiagnoseDocument) -> DiagnoseDocument:
    """The document with its reading (kept separate so tests can call it on any document)."""
    return replace(p, reading=reading(p))
