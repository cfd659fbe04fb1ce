"""What ``probe --format json`` and ``rescore --format json`` print: the run written, and its first reading.

The run's manifest as written (docs/format.md describes it), then the same
report and compare-masks results those commands print for the run, each
without its own ``schema_version`` (the document's covers them). Its schema
is ``docs/schemas/probe.json``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..analysis.results import MasksResult, Report


@dataclass(frozen=True)
class ProbeDocument:
    run_dir: str = field(metadata={"doc": "the run directory written"})
    manifest: dict[str, Any] = field(metadata={"doc": "the run's manifest.json as written (docs/format.md)"})
    report: Report = field(metadata={"doc": "what report --format json prints for the run"})
    compare_masks: MasksResult = field(metadata={"doc": "what compare-masks --format json prints for the run"})
