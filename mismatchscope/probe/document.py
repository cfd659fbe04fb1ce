"""What ``probe --format json`` and ``rescore --format json`` print: the run written, and its first reading.

The run's manifest as written (docs/format.md describes it), then the same
report and compare-masks results those commands print for the run, each
without its own ``schema_version`` (the document's covers them). Its schema
is ``docs/schemas/probe.json``.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ..analysis.engine import AnalysisResult
from ..analysis.results import MasksResult, Report
from ..rules import RuleInstance

SUMMARY_EXAMPLES = 5
"""the disputed tokens the summary's compare-masks table lists."""


@dataclass(frozen=True)
class ProbeDocument:
    run_dir: str = field(metadata={"doc": "the run directory written"})
    manifest: dict[str, Any] = field(metadata={"doc": "the run's manifest.json as written (docs/format.md)"})
    report: Report = field(metadata={"doc": "what report --format json prints for the run"})
    compare_masks: MasksResult = field(metadata={"doc": "what compare-masks --format json prints for the run"})
    analysis: AnalysisResult = field(kw_only=True, metadata={"json": False})
    """the pass over the run: the tables' header line and the summary beneath them."""


def probe_document(run_dir: Path, rules: list[RuleInstance]) -> ProbeDocument:
    """The run written and its first reading: the report and compare-masks of it (``rules``), as ``probe`` and
    ``rescore`` print them."""
    from .. import rundir
    from ..analysis.engine import AnalysisRequest, analyse
    from ..errors import NoTokensError, UsageError

    request = AnalysisRequest(report=True, masks=True, rules=rules, examples=SUMMARY_EXAMPLES)
    try:
        result = analyse(str(run_dir), request)
    except NoTokensError:
        raise NoTokensError(
            f"the run in {run_dir} holds no generated token with finite logprobs: every completion "
            "was empty (the model ended each one at once) or dropped",
            hint="check the prompts, --max-tokens and the stop settings; the run's samples/ folder "
            "holds what was sampled",
        ) from None
    manifest = rundir.read_manifest(run_dir)
    if manifest is None:
        raise UsageError(f"{run_dir / rundir.MANIFEST} is not a readable JSON manifest")
    assert result.report is not None and result.masks is not None  # report=True, masks=True
    report = replace(result.report, worst=None)  # as report prints it without --worst
    return ProbeDocument(str(run_dir), manifest, report, result.masks, analysis=result)
