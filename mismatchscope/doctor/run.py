"""``doctor``: report's one pass, a sample of whole sequences, every detector, the findings ranked.

The detectors run in the order of ``document.CAUSES``; each says detected,
clear, or not checked (and what it needs). ``numerics`` closes the list: it
is what the gap is when no pipeline cause is seen, with where the gap sits
and how it compares with published figures.
"""

from __future__ import annotations

from ..analysis.engine import AnalysisRequest, AnalysisResult, make_plan, run_plan
from ..analysis.plan import AnalysisPlan
from ..analysis.results import BucketRow, Report
from ..metrics import K3_MEAN
from .document import DoctorDocument, Evidence, Finding, Placement
from .figures import place
from .findings import clear, detected
from .runlevel import jumped_steps, policy_lag, routing_replay, step_jump
from .sample import OPTIONAL_SCALARS, SAMPLE_ROWS, Sample, SampleCollector
from .structure import misaligned_sequences, padding, prompt_boundary, shifted
from .values import log_base, low_precision, temperature, truncation

ALSO_READ = ("token_id", *OPTIONAL_SCALARS)
"""what the detectors read besides report's own columns (each only when the file has it); the top-k fits' per-row
sums come with the pass (``AnalysisRequest.row_sums``: the run's summaries, or the lists of a run without)."""
_RANK = {"high": 0, "medium": 1, "low": 2}


def sampled_pass(
    path: str, request: AnalysisRequest, mapping: dict[str, str] | None, cap: int = SAMPLE_ROWS
) -> tuple[AnalysisPlan, SampleCollector]:
    """The pass ``request`` makes with doctor's columns and sums added, and a sample collector sized to its
    input's rows (from the plan: the input is opened once)."""
    request.also_read, request.row_sums = ALSO_READ, True
    plan = make_plan(path, request, mapping)
    return plan, SampleCollector(plan.source.rows, cap)


def doctor(path: str, mapping: dict[str, str] | None = None, workers: int | None = None) -> DoctorDocument:
    """The findings on the pairs at ``path`` (anything ``report`` reads)."""
    plan, collector = sampled_pass(path, AnalysisRequest(report=True, masks=False), mapping)
    result = run_plan(plan, on_terms=collector.add, workers=workers)
    return diagnose_result(result, collector.finish())


def findings(result: AnalysisResult, sample: Sample) -> list[Finding]:
    """Every detector's finding on one analysed run, in the order they run."""
    report, run = result.report, result.run
    assert report is not None  # doctor asks for the report
    kept_logmass = result.source.has("sampler_kept_logmass")
    base = log_base(sample)
    temp = temperature(sample, run, base.status == "detected")
    out = [
        shifted(sample),
        temp,
        truncation(sample, temp.status == "detected" or base.status == "detected", kept_logmass),
        base,
        policy_lag(sample, report, result.per_sequence, run),
        misaligned_sequences(sample, jumped_steps(sample)),
        padding(sample),
        prompt_boundary(sample),
        low_precision(sample),
        routing_replay(report),
        step_jump(sample),
    ]
    return out


def diagnose_result(result: AnalysisResult, sample: Sample) -> DoctorDocument:
    report = result.report
    assert report is not None
    found = findings(result, sample)
    placements = place(report, result.run)
    pipeline = any(f.status == "detected" and f.pipeline for f in found)
    unchecked = sum(f.status == "not_checked" for f in found)
    found.append(numerics(report, placements, pipeline, unchecked))
    ranked = rank(found)
    return DoctorDocument(
        verdict="pipeline" if pipeline else "numerics",
        top=ranked[0],
        findings=ranked,
        placements=placements,
        tokens=result.tokens,
        sequences=result.sequences,
        tokens_examined=len(sample),
        sampled=sample.sampled,
        warnings=result.warnings,
        notes=result.notes,
    )


def rank(found: list[Finding]) -> list[Finding]:
    """Detected first (pipeline problems, then by confidence), then not checked, then clear."""
    status = {"detected": 0, "not_checked": 1, "clear": 2}

    def key(f: Finding) -> tuple[int, int, int]:
        return status[f.status], 0 if f.pipeline else 1, _RANK.get(f.confidence or "", 3)

    return sorted(found, key=key)


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


def numerics(report: Report, placements: list[Placement], pipeline: bool, unchecked: int = 0) -> Finding:
    """``unchecked``: detectors that could not look; with more than three the reading is only a low-confidence one."""
    k3 = report.metrics.k3_mean
    where = []
    for name, rows in (("entropy", report.breakdowns.entropy), ("position", report.breakdowns.position)):
        h = _heaviest(rows)
        if h:
            where.append(f"{h[1]:.0%} of the summed k3 at {name} {h[0]}")
    placed = next((p for p in placements if p.metric == K3_MEAN.name), None)
    clean = "no comparable published figure (below)" if placed is None or not placed.comparable else placed.sentence
    ev = [Evidence("k3 mean", k3, clean)]
    if pipeline:
        return clear("numerics", "not read as numerics: a pipeline cause above explains the gap first", ev)
    none = report.metrics.abs_logprob_diff_max == 0  # bit-equal pairs: no gap for rounding to explain
    return detected(
        "numerics",
        "no gap: every pair is equal" if none else "no pipeline cause seen: the gap reads as numerics (rounding)",
        ev,
        {K3_MEAN.name: k3, "where": "; ".join(where) or None},
        "low" if unchecked > 3 else "medium",
        "nothing"
        if none
        else "nothing in the pipeline; to shrink the gap: an fp32 lm_head, fp16 rather than bf16, or "
        "batch-invariant kernels (mismatchscope diagnose measures each)",
        pipeline=False,
    )
