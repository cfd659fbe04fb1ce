"""``doctor``: report's one pass, a sample of whole sequences, the examination, the verdict.

``doctor(path)`` reads anything ``report`` reads; given a ``diagnose`` output
folder (or its ``baseline/``) it examines the baseline's pairs and reads
diagnose's document too (``persists_in_float32``). The run's provenance
(``contract_difference``, ``fallback``) and a tokenizer for a multi-turn run
(``retokenized``) reach the causes through the examination's context.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

from ..analysis.engine import AnalysisRequest, AnalysisResult, make_plan, run_plan
from ..analysis.plan import AnalysisPlan, TopkRead
from ..documents import json_edge
from ..execution.record import RunProvenance
from ..reader.streaming import SomeGroups, group_rows
from .document import DoctorDocument, Gap
from .examine import examine, rank
from .figures import place
from .findings import fnum
from .registry import Context
from .run_tokenizer import RunTokenizer, run_tokenizer
from .sample import LIST_ROWS, OPTIONAL_SCALARS, SAMPLE_ROWS, TOPK, Sample, SampleCollector, list_groups
from .turns import starting_turns
from .verdict import decide, numerics

ALSO_READ = ("token_id", *OPTIONAL_SCALARS, *TOPK)
"""what the detectors read besides report's own columns (each only when the file has it); the top-k fits' per-row
sums come with the pass too (``AnalysisRequest.row_sums``: the run's summaries, or the lists of a run without),
and the lists themselves feed the rival fits of a smaller sample (``sample.LIST_ROWS``)."""
DIAGNOSE_DOCUMENT = "diagnose.json"


def sampled_pass(
    path: str,
    request: AnalysisRequest,
    mapping: dict[str, str] | None,
    cap: int = SAMPLE_ROWS,
    list_cap: int = LIST_ROWS,
) -> tuple[AnalysisPlan, SampleCollector]:
    """The pass ``request`` makes with doctor's columns and sums added, and a sample collector sized to its
    input's rows (from the plan: the input is opened once). Where the run's summaries carry the per-row sums,
    the two lists are decoded only in the row groups the list sub-sample is drawn from (``list_groups``)."""
    request.also_read, request.row_sums = ALSO_READ, True
    plan = make_plan(path, request, mapping)
    chosen = None
    if plan.topk is TopkRead.SUMMARIES and all(plan.source.has(c) for c in TOPK):
        chosen = list_groups(group_rows(plan.source.files), cap, list_cap)
    if chosen is None:
        return plan, SampleCollector(plan.source.rows, cap, list_cap)
    plan = replace(plan, only_in=SomeGroups(TOPK, chosen[0]))
    return plan, SampleCollector(plan.source.rows, cap, list_cap, list_group_rows=chosen[1])


@json_edge
def diagnose_output(path: str) -> tuple[str, dict[str, Any] | None]:
    """(the pairs to read, diagnose's document) for a diagnose output folder or its baseline; the path unchanged
    and None for anything else."""
    p = Path(path)
    for folder, pairs in ((p, p / "baseline"), (p.parent, p)):
        doc = folder / DIAGNOSE_DOCUMENT
        if p.is_dir() and doc.is_file() and pairs.is_dir() and (pairs == p or pairs.name == "baseline"):
            try:
                return str(pairs), json.loads(doc.read_text())
            except (OSError, ValueError):
                return path, None
    return path, None


def doctor(
    path: str, mapping: dict[str, str] | None = None, workers: int | None = None, tokenizer: str | None = None
) -> DoctorDocument:
    """The findings on the pairs at ``path`` (anything ``report`` reads, or a diagnose output folder).
    ``tokenizer``: a checkpoint whose tokenizer (and chat template) re-encodes each turn's ids for the
    ``retokenized`` cause. The pass keeps the report's sums alone (``AnalysisRequest.headline``): nothing doctor
    prints reads an exact quantile or a top-k bound, and they were a third of the pass's work (the columns read,
    and their checks, stay the report's)."""
    pairs, diagnose = diagnose_output(path)
    plan, collector = sampled_pass(pairs, AnalysisRequest(report=True, headline=True, masks=False), mapping)
    result = run_plan(plan, workers=workers, sink=collector.sink())
    sample = collector.finish()
    return examine_result(result, sample, diagnose, run_tokenizer(tokenizer, result.run, sample), run_provenance(pairs))


def run_provenance(path: str) -> RunProvenance | None:
    """The provenance of the run at ``path``; None for pairs outside one run (their sides are unknown)."""
    from ..execution.read import read_run

    record = read_run(path)
    return None if record.provenance.sampler.source == "none" else record.provenance


def examine_result(
    result: AnalysisResult,
    sample: Sample,
    diagnose: dict[str, Any] | None = None,
    tokenizer: RunTokenizer | None = None,
    provenance: RunProvenance | None = None,
) -> DoctorDocument:
    """doctor's document from report's analysed pass and the sample gathered in it; ``provenance`` (the run's
    record) adds whether the sides are one program and whether each ran what it asked for."""
    report = result.report
    assert report is not None  # doctor asks for the report
    routes = None
    if report.routing is not None:
        from ..routing.io import locate_routes

        routes = locate_routes(result.source.files)[0]
    extra = {"columns": tuple(result.source.file_columns), "tokenizer": tokenizer, "provenance": provenance}
    ctx = Context(sample, report, result.run, diagnose, routes, extra=extra)
    ex = examine(ctx)
    placements = place(report, result.run)
    major = any(f.status == "detected" and not f.minor and _reads(f) for f in ex.findings)
    closing = numerics(report, result.run, ex, placements, major)
    findings = starting_turns(rank([*ex.findings, closing]), ctx)
    verdict, headline, needs = decide(findings, report, placements, ex)
    warnings = list(result.warnings)
    if sample.sentinel_rows:
        warnings.append(
            f"{sample.sentinel_rows} token(s) hold a stand-in logprob below -700 (vLLM's -9999 for -inf, or a fill): "
            "left out of doctor's fits"
        )
    return DoctorDocument(
        verdict=verdict,
        headline=headline,
        top=findings[0],
        findings=findings,
        placements=placements,
        tokens=result.tokens,
        sequences=result.sequences,
        tokens_examined=len(sample),
        sampled=sample.sampled,
        gap=Gap(fnum(ex.gap[0]), fnum(ex.gap[1])),
        needs=needs,
        warnings=warnings,
        notes=result.notes,
    )


def _reads(f) -> bool:
    """A finding that is a reading of the gap (not one beside the numbers, as a fallback is)."""
    from .causes import BY_NAME

    cause = BY_NAME.get(f.cause)
    return cause is None or cause.reading
