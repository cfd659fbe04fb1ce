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
from ..execution.record import RunProvenance
from ..metrics import K3_MEAN
from .document import DoctorDocument, Evidence, Finding, Placement
from .figures import place
from .findings import clear, detected
from .retokenized import check as check_retokenized
from .run_tokenizer import RunTokenizer, run_tokenizer
from .runlevel import jumped_steps, policy_lag, routing_replay, step_jump
from .sample import OPTIONAL_SCALARS, SAMPLE_ROWS, Sample, SampleCollector
from .structure import misaligned_sequences, padding, prompt_boundary, shifted
from .turns import explained, starting_turns, turn_boundary
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


def doctor(
    path: str, mapping: dict[str, str] | None = None, workers: int | None = None, tokenizer: str | None = None
) -> DoctorDocument:
    """The findings on the pairs at ``path`` (anything ``report`` reads). ``tokenizer``: a checkpoint whose
    tokenizer (and chat template) re-encodes each turn's ids for the ``retokenized`` cause."""
    plan, collector = sampled_pass(path, AnalysisRequest(report=True, masks=False), mapping)
    result = run_plan(plan, on_terms=collector.add, workers=workers)
    sample = collector.finish()
    return diagnose_result(result, sample, run_tokenizer(tokenizer, result.run, sample), run_provenance(path))


def run_provenance(path: str) -> RunProvenance | None:
    """The provenance of the run at ``path``; None for pairs outside one run (their sides are unknown)."""
    from ..execution.read import read_run

    record = read_run(path)
    return None if record.provenance.sampler.source == "none" else record.provenance


def findings(result: AnalysisResult, sample: Sample, tokenizer: RunTokenizer | None = None) -> list[Finding]:
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
        turn_boundary(sample) if sample.has("turn") else prompt_boundary(sample),
        low_precision(sample),
        routing_replay(report),
        step_jump(sample),
    ]
    tok = tokenizer or RunTokenizer()
    retok, misaligned = check_retokenized(sample, tok.tokenizer, tok.source)
    out = ([retok] if retok is not None else []) + out  # first: misaligned pairs look like every other cause
    on_rows = {
        "shifted": shifted,
        "log_base": log_base,
        "padding": padding,
        "low_precision": low_precision,
        "misaligned_sequences": misaligned_sequences,
        "prompt_boundary": turn_boundary if sample.has("turn") else prompt_boundary,
    }
    if misaligned is not None:
        out = explained(out, sample, misaligned, on_rows)
    return starting_turns(out, sample, {k: v for k, v in on_rows.items() if k != "prompt_boundary"})


def diagnose_result(
    result: AnalysisResult,
    sample: Sample,
    tokenizer: RunTokenizer | None = None,
    provenance: RunProvenance | None = None,
) -> DoctorDocument:
    """The ranked findings; ``provenance`` (the run's record) adds whether the sides are one program, first, and
    whether each ran what it asked for."""
    from ..execution.contract import contract
    from .contract import contract_finding, fallback_finding

    report = result.report
    assert report is not None
    found = [
        contract_finding(contract(provenance) if provenance is not None else None),
        *findings(result, sample, tokenizer),
    ]
    placements = place(report, result.run)
    pipeline = any(f.status == "detected" and f.pipeline for f in found)
    unchecked = sum(f.status == "not_checked" for f in found)
    found.append(numerics(report, placements, pipeline, unchecked))
    found.append(fallback_finding(provenance))
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
    """Detected first (two sides that are not one program before anything, then pipeline problems, then by
    confidence; a fallback after the reading of the numbers), then not checked, then clear."""
    status = {"detected": 0, "not_checked": 1, "clear": 2}

    def key(f: Finding) -> tuple[int, int, int, int, int]:
        first = 0 if f.cause == "contract_difference" else 1
        last = 1 if f.cause == "fallback" else 0
        return status[f.status], first, 0 if f.pipeline else 1, last, _RANK.get(f.confidence or "", 3)

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
