"""``persists_in_float32``: on a ``diagnose`` run, a gap that survives both sides in float32 is a program
difference, not rounding (transformers #46190: a fallback kernel that differs at any precision).

Read from diagnose's document (``OUT/diagnose.json``, when doctor is given a
diagnose output or its ``baseline/``): the configurations in which both
sides run float32 (the baseline itself, or a variant that only changed a
dtype), their gap against the baseline's, and each side's gap against the
float64 reference, which says which side runs another program. Rounding
shrinks with precision (published float32 gaps are 14-20x below bfloat16's):
a float32 gap at a quarter of the baseline's or more, or above 0.01 nats mean
|gap| whatever the baseline, is not rounding.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ...metrics import ABS_LOGPROB_DIFF_MEAN, K3_MEAN
from ..document import Evidence, ExplainedShare, Finding
from ..findings import clear, detected, g, model_share, not_checked, pct
from ..registry import Cause, Context

ABS, K3 = ABS_LOGPROB_DIFF_MEAN.name, K3_MEAN.name
FLOAT32 = {"float32", "fp32", "float", "float64", "fp64", "double"}
DTYPE_KEYS = {"sampler.dtype", "trainer.dtype", "sampler.fp32_lm_head", "trainer.fp32_lm_head"}
SURVIVES = 0.25
"""the float32 gap at least this share of the baseline's (rounding leaves 1/14 to 1/20 of a bf16 gap),"""
FLOOR = 1e-4
"""and at least this mean |gap|; or, whatever the baseline, at least :data:`ALWAYS`."""
ALWAYS = 0.01


def _metric(m: Any, name: str) -> float | None:
    v = m.get(name) if isinstance(m, dict) else None
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


@dataclass(frozen=True)
class Float32Configuration:
    """A configuration of diagnose's document with both sides in float32: its metrics (as the document has
    them), and each side's against the float64 reference (None where it was not measured)."""

    name: Any
    total: Any
    sampler: Any
    trainer: Any


def float32_configurations(doc: dict[str, Any]) -> list[Float32Configuration]:
    """Each configuration with both sides in float32: name, its gaps (total and against the reference)."""
    base = doc.get("baseline") or {}
    s_dtype = str((base.get("sampler") or {}).get("dtype", "")).lower()
    t_dtype = str((base.get("trainer") or {}).get("dtype", "")).lower()
    out = []
    if s_dtype in FLOAT32 and t_dtype in FLOAT32:
        dec = doc.get("decomposition") or {}
        out.append(Float32Configuration("baseline", base.get("metrics"), *_sides(dec)))
    for v in doc.get("variants") or []:
        changes = v.get("changes") or {}
        if v.get("status") != "ok" or not set(changes) <= DTYPE_KEYS:
            continue
        s = str(changes.get("sampler.dtype", s_dtype)).lower()
        t = str(changes.get("trainer.dtype", t_dtype)).lower()
        if s in FLOAT32 and t in FLOAT32:
            out.append(Float32Configuration(v.get("name"), v.get("metrics"), *_sides(v.get("gaps") or {})))
    return out


def _sides(gaps: dict[str, Any]) -> tuple[Any, Any]:
    """The sampler's and the trainer's metrics against the float64 reference."""
    return (
        (gaps.get("sampler_vs_reference") or {}).get("metrics"),
        (gaps.get("trainer_vs_reference") or {}).get("metrics"),
    )


def detect(ctx: Context) -> Finding:
    doc = ctx.diagnose
    if doc is None:
        return not_checked(
            "persists_in_float32",
            ["a diagnose run (doctor OUT, where diagnose --out OUT wrote diagnose.json)"],
            "not checked: needs a diagnose run (doctor on diagnose's --out folder), which scores both sides in float32",
        )
    configs = float32_configurations(doc)
    if not configs:
        return not_checked(
            "persists_in_float32",
            ["a diagnose configuration with both sides in float32"],
            "not checked: no configuration of this diagnose ran both sides in float32",
        )
    base_gap = _metric((doc.get("baseline") or {}).get("metrics"), ABS)
    worst = max(configs, key=lambda c: _metric(c.total, ABS) or 0.0)
    gap = _metric(worst.total, ABS)
    ev = [
        Evidence(f"mean |gap| with both sides in float32 ({worst.name})", gap, "14-20x below bfloat16's"),
        Evidence("mean |gap| of the baseline", base_gap, "-"),
    ]
    if gap is None:
        return not_checked("persists_in_float32", ["the float32 configuration's metrics"])
    relative = gap / base_gap if base_gap else None
    survives = gap >= ALWAYS or (
        worst.name != "baseline" and relative is not None and relative >= SURVIVES and gap >= FLOOR
    )
    if not survives:
        return clear(
            "persists_in_float32",
            f"in float32 the gap shrinks to {g(gap)} mean |gap|"
            + (f" ({pct(relative)} of the baseline's): rounding" if relative is not None else ": rounding"),
            ev,
        )
    s_ref = _metric(worst.sampler, ABS)
    t_ref = _metric(worst.trainer, ABS)
    side = None if s_ref is None or t_ref is None else ("sampler" if s_ref > t_ref else "trainer")
    if side:
        ev.append(Evidence(f"the {side}'s mean |gap| to the float64 reference", max(s_ref or 0, t_ref or 0), "-"))
    return detected(
        "persists_in_float32",
        f"with both sides in float32 the gap stays at {g(gap)} mean |gap|"
        + (f" ({pct(relative)} of the baseline's)" if relative is not None and worst.name != "baseline" else "")
        + ": the two sides run different programs, not the same one rounded differently"
        + (f"; the {side} is the one far from the float64 reference" if side else ""),
        ev,
        {"configuration": str(worst.name), "float32_gap": gap, "baseline_gap": base_gap, "side": side},
        "high",
        "find the kernel or code path that differs (a fallback implementation, a missing op, another attention "
        "path): diagnose --locate finds the layer where the float32 gap enters",
    )


def share(ctx: Context, f: Finding) -> ExplainedShare | None:
    doc = ctx.diagnose or {}
    base = (doc.get("baseline") or {}).get("metrics")
    name = f.estimate.get("configuration")
    conf = next((c for c in float32_configurations(doc) if c.name == name), None)
    if conf is None:
        return None

    def part(metric: str) -> float | None:
        a, b = _metric(conf.total, metric), _metric(base, metric)
        return min(1.0, a / b) if a is not None and b else None

    return model_share(
        part(K3),
        part(ABS),
        "the gap",
        "the share of the baseline's gap left with both sides in float32",
    )


CAUSE = Cause(
    "persists_in_float32",
    detect,
    share=share,
    correction="what float32 on both sides leaves (from diagnose's document)",
    sample_scope=False,
)
