"""Is my number normal? The run's mismatch among published figures of comparable setups.

The figures ship in ``figures.json`` beside this module, a source on every
row. A run is compared only with rows of its own kind: the same precision
(the lower of its two sides', which sets the gap) and the same architecture
(dense or MoE), in the same metric; when no row is comparable the placement
says so instead of comparing unlike things.
"""

from __future__ import annotations

import functools
import json
import math
from pathlib import Path

from ..analysis.results import Report
from ..metrics import ABS_LOGPROB_DIFF_MEAN, K3_MEAN
from .document import FigureRow, Placement
from .findings import g

_DTYPES = {"bfloat16": "bf16", "bf16": "bf16", "float16": "fp16", "fp16": "fp16", "half": "fp16"}
_DTYPES.update({"float32": "fp32", "fp32": "fp32", "float": "fp32", "float64": "fp64"})
_ORDER = ("bf16", "fp16", "fp32", "fp64")
"""from the coarsest to the finest: the coarser side of a run sets its gap."""
METRICS = (K3_MEAN.name, "rms_gap", ABS_LOGPROB_DIFF_MEAN.name, "abs_prob_diff_mean")


@functools.cache
def figures() -> tuple[FigureRow, ...]:
    """Every published row (the file is package data)."""
    rows = json.loads((Path(__file__).with_name("figures.json")).read_text())["rows"]
    return tuple(FigureRow(**r) for r in rows)


def _side_dtype(section: object) -> str | None:
    if isinstance(section, dict) and isinstance(section.get("dtype"), str):
        return _DTYPES.get(section["dtype"].lower())
    return None


def run_dtype(run: dict | None) -> str | None:
    """The coarser precision of the run's two sides, as its metadata records them (an import's under
    ``source``, a Recorder run's under ``meta``: ``{"sampler": {"dtype": ...}, "trainer": {...}}``); None when either side's is unknown, since that side may be the coarser one."""
    run = run or {}
    source = run.get("source")
    source = source if isinstance(source, dict) else {}
    meta = run.get("meta")  # a Recorder run's own description of its sides
    meta = meta if isinstance(meta, dict) else {}
    sides = [
        _side_dtype(run.get(k)) or _side_dtype(source.get(k)) or _side_dtype(meta.get(k))
        for k in ("sampler", "trainer")
    ]
    if None in sides:
        return None
    return min(sides, key=lambda d: _ORDER.index(d or "fp64"))


def run_is_moe(run: dict | None, report: Report) -> bool | None:
    if report.routing is not None:
        return True
    ckpt = (run or {}).get("checkpoint")
    if isinstance(ckpt, dict) and isinstance(ckpt.get("is_moe"), bool):
        return ckpt["is_moe"]
    return None


def run_values(report: Report) -> dict[str, float | None]:
    """The run's value of each published metric, in that metric's convention."""
    m = report.metrics
    k2 = m.k2_mean
    return {
        K3_MEAN.name: m.k3_mean,
        "rms_gap": math.sqrt(2 * k2) if k2 is not None else None,  # k2 = mean(l^2) / 2
        ABS_LOGPROB_DIFF_MEAN.name: m.abs_logprob_diff_mean,
        "abs_prob_diff_mean": 2 * m.tv_token_mean if m.tv_token_mean is not None else None,
    }


def place(report: Report, run: dict | None) -> list[Placement]:
    """One placement per published metric the run can be compared in."""
    dtype, moe = run_dtype(run), run_is_moe(run, report)
    out = []
    for metric, value in run_values(report).items():
        rows = [
            r
            for r in figures()
            if r.kind == "numerics" and r.metric == metric and r.dtype == dtype and (moe is None or r.moe == moe)
        ]
        if not rows and not any(r.metric == metric and r.kind == "numerics" for r in figures()):
            continue
        above = (
            value / max(r.high for r in rows) if rows and value is not None and max(r.high for r in rows) > 0 else None
        )
        out.append(Placement(metric, value, dtype, moe, rows, _sentence(metric, value, dtype, moe, rows), above))
    return out


def _kind(dtype: str | None, moe: bool | None) -> str:
    arch = {True: " MoE", False: " dense", None: ""}[moe]
    return f"{dtype or 'unknown-precision'}{arch} models"


def _sentence(metric: str, value: float | None, dtype: str | None, moe: bool | None, rows: list[FigureRow]) -> str:
    if value is None:
        return f"{metric}: no value on this run"
    if dtype is None:
        return f"{metric} {g(value)}: the run does not record its precision, so no published row is comparable"
    if not rows:
        return f"{metric} {g(value)}: no published figure for {_kind(dtype, moe)} (none comparable)"
    lo, hi = min(r.low for r in rows), max(r.high for r in rows)
    sizes = sorted({r.params_b for r in rows if r.params_b is not None})
    of = f" of {g(sizes[0], 2)}-{g(sizes[-1], 2)}B" if len(sizes) > 1 else f" of {g(sizes[0], 2)}B" if sizes else ""
    reported = f"{g(lo)}" if lo == hi else f"{g(lo)}-{g(hi)}"
    if value > hi * 1.5:
        where = f"{_times(value / hi)} above"
    elif value < lo / 1.5:
        where = f"{_times(lo / max(value, 1e-300))} below"
    else:
        where = "within"
    return (
        f"{metric} {g(value)}: {where} the {reported} reported for {_kind(dtype, moe)}{of} "
        f"({'; '.join(sorted({r.source for r in rows}))})"
    )


def _times(x: float) -> str:
    return f"{x:.0f}x" if x >= 10 else f"{x:.1f}x"
