"""The closing ``numerics`` finding and the verdict: what the examination's findings add up to.

* **pipeline** (exit 1): a pipeline cause that is not minor explains at
  least :data:`PIPELINE_SHARE` of the gap (or cannot be measured but is
  certain: a replay that did nothing, a program difference in float32).
* **expected** (exit 0): what explains the gap is something the run declares
  or that is no bug: a policy lag, several optimizer steps per rollout, a
  sharpening policy.
* **inconclusive** (exit 0): a pipeline cause is seen but explains little, two
  rival causes one of which is no bug fit alike, no check could run, or the
  gap is far outside the normal range with no cause to explain it; ``needs``
  says what would settle it.
* **numerics** (exit 0): no cause seen, and the checks ran.
"""

from __future__ import annotations

from dataclasses import replace

from ..analysis.results import BucketRow, Report
from ..metrics import K3_MEAN
from .causes import BY_NAME, NUMERICS
from .document import Evidence, ExplainedShare, Finding, Placement, Verdict
from .examine import Examination
from .figures import run_dtype
from .findings import clear, detected, g, pct, share

PIPELINE_SHARE = 0.2
"""the share of the gap a pipeline cause must explain for a pipeline verdict; below it, inconclusive."""
FAR_ABOVE = 3.0
"""a gap this many times the largest comparable published figure is far outside the normal range,"""
K3_BAR = 0.015
"""as is a k3 mean above prime-rl's merge bar whatever the run's precision."""
OUTLIERS_CARRY = 0.5
"""sequences far off the rest that no cause explains, carrying this share of the gap: inconclusive."""
VALUE_CHECKS = ("temperature", "truncation", "log_base")
"""the checks whose exact forms need the top-k lists."""


def _heaviest(rows: list[BucketRow] | None) -> tuple[str, float] | None:
    """The bucket holding the largest share of the run's summed k3, and that share."""
    if not rows:
        return None
    mass = [(r.bucket, r.tokens * (r.k3_mean or 0.0)) for r in rows]
    total = sum(m for _, m in mass)
    if total <= 0:
        return None
    bucket, m = max(mass, key=lambda x: x[1])
    return bucket, m / total


def advice(run: dict | None) -> str:
    """What shrinks a numerical gap, for this run's precision."""
    dtype = run_dtype(run)
    if dtype == "bf16":
        return (
            "an fp32 lm_head, fp16 rather than bf16, or batch-invariant kernels (mismatchscope diagnose measures each)"
        )
    if dtype == "fp16":
        return "an fp32 lm_head or batch-invariant kernels (mismatchscope diagnose measures each)"
    if dtype in ("fp32", "fp64"):
        return "batch-invariant kernels or one program on both sides: the gap is already float32's rounding"
    return "record both sides' dtypes to be told which; mismatchscope diagnose measures each precision and kernel"


def far_above(report: Report, placements: list[Placement]) -> str | None:
    """Why the run's gap is far outside the normal range, or None."""
    k3 = report.metrics.k3_mean
    for p in placements:
        if p.above is not None and p.above >= FAR_ABOVE:
            return p.sentence
    if k3 is not None and k3 > K3_BAR:
        return f"k3 mean {g(k3)} is above the {K3_BAR:g} merge bar prime-rl uses"
    return None


def numerics(report: Report, run: dict | None, ex: Examination, placements: list[Placement], major: bool) -> Finding:
    """The closing finding: the gap as numerics when no cause explains it, or what is left once they do."""
    k3 = report.metrics.k3_mean
    where = []
    for name, rows in (("entropy", report.breakdowns.entropy), ("position", report.breakdowns.position)):
        h = _heaviest(rows)
        if h:
            where.append(f"{pct(h[1])} of the summed k3 at {name} {h[0]}")
    placed = next((p for p in placements if p.comparable), None)
    ev = [Evidence("k3 mean", k3, placed.sentence if placed else "no comparable published figure (below)")]
    left = ExplainedShare(
        share(ex.remaining[0], 0.0, ex.gap[0]),
        share(ex.remaining[1], 0.0, ex.gap[1]),
        "the gap",
        "what is left once every cause found is corrected",
    )
    if major:
        return replace(
            clear(
                NUMERICS,
                f"not read as numerics: the causes above explain the gap first; what they leave "
                f"({pct(left.k3)} of k3) is the run's numerics",
                ev,
            ),
            explained_share=left,
        )
    none = report.metrics.abs_logprob_diff_max == 0
    return replace(
        detected(
            NUMERICS,
            "no gap: every pair is equal" if none else "no pipeline cause seen: the gap reads as numerics (rounding)",
            ev,
            {K3_MEAN.name: k3, "where": "; ".join(where) or None},
            "medium",
            "nothing" if none else "nothing in the pipeline; to shrink the gap: " + advice(run),
            pipeline=False,
        ),
        explained_share=left,
    )


def decide(
    findings: list[Finding], report: Report, placements: list[Placement], ex: Examination
) -> tuple[Verdict, str, list[str]]:
    """(verdict, headline, what would settle it) from the ranked findings (numerics last among them)."""
    causes = [f for f in findings if f.cause != NUMERICS and _reading(f)]  # a fallback sets no verdict
    found = [f for f in causes if f.status == "detected"]
    lead = next((f for f in found if _leads(f)), None)
    if lead is not None:  # the sides are not one program: no numerical reading applies until they are
        return "pipeline", f"pipeline problem: {lead.cause}: {lead.sentence} (exit 1)", []
    major = [f for f in found if not f.minor]
    top = major[0] if major else None
    for a, b in ex.ties:  # two rivals that fit alike, one a bug and one not: no verdict either way
        fa, fb = (next((f for f in found if f.cause == n), None) for n in (a, b))
        if fa is not None and fb is not None and fa.pipeline != fb.pipeline:
            return (
                "inconclusive",
                f"inconclusive: {a} and {b} fit the data alike, and only one is a pipeline problem",
                sorted({*fa.needs, *fb.needs}) or ["more tokens at uncertain positions"],
            )
    if top is not None and any(_pipeline(f) for f in major):
        lead = next(f for f in major if _pipeline(f))
        return "pipeline", f"pipeline problem: {lead.cause} {_explains(lead)} (exit 1)", []
    if top is not None and not any(f.pipeline for f in major):
        why = "the run declares it" if top.cause != "sharpening" else "the policy sharpening is no bug"
        return "expected", f"expected: {top.cause} {_explains(top)}; {why}, so doctor exits 0", []
    if found:
        lead = found[0]
        return (
            "inconclusive",
            f"inconclusive: {lead.cause} is seen but {_explains(lead)}: too little to name it the cause",
            lead.needs,
        )
    carried = [v for v in ex.outlier_share if v is not None]
    if ex.outliers.size and carried and sum(carried) / len(carried) >= OUTLIERS_CARRY:
        ids = ", ".join(map(str, ex.outliers[:5].tolist()))
        return (
            "inconclusive",
            f"inconclusive: {ex.outliers.size} sequence(s) carry {pct(max(carried))} of the gap, far above the rest, "
            f"and no cause explains them (first ids {ids}): their pairs still agree in rank, so not a misjoin read "
            "from the values alone",
            [
                "a per-sample key on both sides (prompt_id and sample_index) to check the join",
                "advantage or sampler_step/trainer_step columns to test a policy lag",
            ],
        )
    if all(f.status == "not_checked" for f in causes):
        needs = sorted({n for f in causes for n in f.needs})[:6]
        return "inconclusive", "inconclusive: no check could run on this input", needs
    far = far_above(report, placements)
    rough = [f.cause for f in causes if f.cause in VALUE_CHECKS and (f.status == "not_checked" or _scalar(f))]
    if far and rough:
        return (
            "inconclusive",
            f"inconclusive: no cause explains the gap, yet it is far outside the normal range ({far})",
            ["sampler top-k with the trainer's logprobs at those ids (exact temperature, kept-set and base fits)"],
        )
    if far:
        return "numerics", f"numerics: no cause seen, though the gap is far outside the normal range ({far})", []
    return "numerics", "numerics: no pipeline cause seen", []


def _reading(f: Finding) -> bool:
    cause = BY_NAME.get(f.cause)
    return cause is None or cause.reading


def _leads(f: Finding) -> bool:
    cause = BY_NAME.get(f.cause)
    return cause is not None and cause.leads


def _scalar(f: Finding) -> bool:
    """A value check that could only read the sampled tokens (no top-k lists)."""
    return any("no top-k" in e.statistic for e in f.evidence)


def _pipeline(f: Finding) -> bool:
    s = f.explained_share.weight if f.explained_share is not None else None
    return f.pipeline and (s is None or s >= PIPELINE_SHARE)


def _explains(f: Finding) -> str:
    es = f.explained_share
    if es is None or es.primary is None:
        return "(its share of the gap cannot be measured here)"
    if es.of != "the gap":
        return f"explains {pct(es.weight)} of {es.of}"
    parts = [f"{pct(es.k3)} of k3"] if es.k3 is not None else []
    parts += [f"{pct(es.abs_logprob_diff)} of the mean |gap|"] if es.abs_logprob_diff is not None else []
    return "explains " + " and ".join(parts)
