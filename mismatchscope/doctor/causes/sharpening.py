"""``sharpening``: a gap that grows over the steps because the policy sharpens, not because anything regressed.

As RL training sharpens the policy its entropy falls, and the tokens move
between entropy buckets whose gaps differ: the run's mean gap moves with
the mix while each bucket's gap stays where it was (open-instruct #1473,
NeMo-RL #3722). Read as: the per-step k3 mean grows, the per-step mean entropy
falls, the growth is what the steps' entropy mix predicts from each bucket's
pooled gap, and within each bucket the gap stays flat. ``timeline --by
entropy`` shows the same per bucket. The share it explains is of the gap's
growth over the steps, not of the gap.
"""

from __future__ import annotations

import numpy as np

from ...analysis.tokenstats import ENTROPY_EDGES, bucket_index
from ...divergence import k3_per_token
from ..document import Evidence, ExplainedShare, Finding
from ..findings import P_ALARM, clear, detected, g, model_share, not_checked, pct, t_quantile
from ..registry import Cause, Context
from ..sample import Sample

MIN_STEPS = 5
EXPLAINED = 0.5
"""the entropy mix predicts at least this share of the gap's growth,"""
FLAT = 0.5
"""and within the buckets the gap grows by less than this share of the run's own growth."""
MIN_CELL = 20


def _fit(x: np.ndarray, y: np.ndarray, w: np.ndarray | None = None) -> tuple[float, float]:
    """Slope of y on x and its standard error (weighted least squares)."""
    w = np.ones_like(x) if w is None else w
    xm, ym = np.average(x, weights=w), np.average(y, weights=w)
    sxx = float(np.sum(w * (x - xm) ** 2))
    if not sxx > 0 or x.size < 3:
        return 0.0, float("inf")
    b = float(np.sum(w * (x - xm) * (y - ym)) / sxx)
    resid = y - ym - b * (x - xm)
    return b, float(np.sqrt(np.sum(w * resid**2) / (np.sum(w) - 2) / sxx * np.sum(w) / x.size))


def analysis(s: Sample) -> dict[str, float] | None:
    """Per sequence: the trend of its mean |gap| and mean entropy over the steps, what the entropy mix predicts
    of that trend (each token's bucket's pooled mean |gap|), and the trend left within the buckets; None with
    too few steps."""
    steps = np.unique(s.columns["step"])
    if steps.size < MIN_STEPS:
        return None
    d = np.abs(s.gap())
    h = s.columns["trainer_entropy"]
    bucket = bucket_index(h, ENTROPY_EDGES).astype(np.int64)
    nb = len(ENTROPY_EDGES)
    pooled = np.bincount(bucket, weights=d, minlength=nb) / np.maximum(np.bincount(bucket, minlength=nb), 1)
    predicted = pooled[bucket]
    within = d / np.where(predicted > 0, predicted, 1.0)
    starts, ends = s.segments()
    n = (ends - starts).astype(float)

    def per_seq(v: np.ndarray) -> np.ndarray:
        return np.add.reduceat(v, starts) / n

    x = s.columns["step"][starts].astype(float)
    gap, pred = per_seq(d), per_seq(predicted)
    growth, se = _fit(x, gap, n)
    ent, ent_se = _fit(x, per_seq(h), n)
    inside, _ = _fit(x, per_seq(within), n)
    level = float(np.average(gap, weights=n))
    k3 = k3_per_token(s.gap())
    k3_growth, _ = _fit(x, per_seq(k3), n)
    k3_pred, _ = _fit(
        x,
        per_seq(
            (np.bincount(bucket, weights=k3, minlength=nb) / np.maximum(np.bincount(bucket, minlength=nb), 1))[bucket]
        ),
        n,
    )
    first, last = x == x.min(), x == x.max()
    return {
        "growth": growth,
        "growth_z": growth / se if se > 0 else 0.0,
        "entropy_z": ent / ent_se if ent_se > 0 else 0.0,
        "predicted_growth": _fit(x, pred, n)[0],
        "within_growth": inside * level,
        "k3_share": min(1.0, max(0.0, k3_pred / k3_growth)) if k3_growth > 0 else 0.0,
        "first": float(np.average(gap[first], weights=n[first])),
        "last": float(np.average(gap[last], weights=n[last])),
        "entropy_first": float(np.average(per_seq(h)[first], weights=n[first])),
        "entropy_last": float(np.average(per_seq(h)[last], weights=n[last])),
    }


def detect(ctx: Context) -> Finding:
    s = ctx.sample
    need = [c for c in ("step", "trainer_entropy") if not s.has(c)]
    if need:
        return not_checked("sharpening", need)
    a = analysis(s)
    if a is None:
        return not_checked("sharpening", [f"{MIN_STEPS}+ steps"], f"not checked: needs {MIN_STEPS} steps or more")
    z = t_quantile(P_ALARM, 1e9)
    ev = [
        Evidence("z of the sequences' mean |gap| trend over the steps", a["growth_z"], f"within +-{z:.2f}"),
        Evidence("z of the sequences' mean entropy trend over the steps", a["entropy_z"], f"within +-{z:.2f}"),
        Evidence("share of the mean |gap|'s growth the entropy mix predicts", _ratio(a), "-"),
    ]
    if not (a["growth_z"] >= z and a["entropy_z"] <= -z):
        return clear("sharpening", "the gap does not grow while the entropy falls", ev)
    if _ratio(a) < EXPLAINED or a["within_growth"] > FLAT * a["growth"]:
        return clear(
            "sharpening",
            "the gap grows within the entropy buckets too: not the policy sharpening (timeline --by entropy shows "
            "where)",
            ev,
        )
    return detected(
        "sharpening",
        f"the gap grows over the steps (mean |gap| {g(a['first'])} to {g(a['last'])}) while the entropy falls "
        f"({g(a['entropy_first'])} to {g(a['entropy_last'])} nats) and stays flat within each entropy bucket: the "
        f"policy sharpening moves tokens into buckets with a larger gap ({pct(_ratio(a))} of the growth), not a "
        "regression",
        ev,
        {
            "growth_explained": _ratio(a),
            "k3_growth_explained": a["k3_share"],
            "gap_first": a["first"],
            "gap_last": a["last"],
        },
        "high",
        "nothing in the pipeline; watch the gap per entropy bucket (timeline --by entropy) rather than the run-wide "
        "mean",
        pipeline=False,
    )


def _ratio(a: dict[str, float]) -> float:
    return float(min(1.0, max(0.0, a["predicted_growth"] / a["growth"]))) if a["growth"] > 0 else 0.0


def share(ctx: Context, f: Finding) -> ExplainedShare | None:
    v, k = f.estimate.get("growth_explained"), f.estimate.get("k3_growth_explained")
    if not isinstance(v, float):
        return None
    return model_share(
        k if isinstance(k, float) else None,
        v,
        "the gap's growth over the steps",
        "each token's entropy bucket's pooled gap: the growth the steps' entropy mix predicts",
    )


CAUSE = Cause("sharpening", detect, share=share, correction="the gap's growth the entropy mix predicts (a model)")
