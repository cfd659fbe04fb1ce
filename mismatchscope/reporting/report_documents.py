"""What ``report`` and ``compare-masks`` print: the analysis' own result (their JSON) and what their tables,
pictures and pages show beside it (fields the JSON leaves out)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..analysis.engine import AnalysisResult
from ..analysis.histograms import PlotAccumulator
from ..analysis.results import MasksResult, Report
from ..analysis.worst import Trace
from ..doctor.document import DoctorDocument
from ..documents import flatten
from ..rules import RuleInstance
from ..view.document import TokenView

_NOT_JSON: dict[str, Any] = {"json": False}


@dataclass(frozen=True)
class ReportDocument:
    """``report``: the run's report (with ``--worst``, its worst sequences), then what the JSON leaves out."""

    report: Report = field(metadata=flatten())
    analysis: AnalysisResult = field(kw_only=True, metadata=_NOT_JSON)
    """the pass: the input's header line (tokens, sequences, files, the run's metadata)."""
    path: str = field(kw_only=True, metadata=_NOT_JSON)
    """the run as it was given."""
    doctor: DoctorDocument | None = field(default=None, kw_only=True, metadata=_NOT_JSON)
    """what doctor finds in a sample of the pass: its top finding is the table's last line and the page's header."""
    plot_data: PlotAccumulator | None = field(default=None, kw_only=True, metadata=_NOT_JSON)
    """the histograms the pictures draw (``--plots``, ``--html``)."""
    rules: list[RuleInstance] = field(default_factory=list, kw_only=True, metadata=_NOT_JSON)
    """the rules whose thresholds the pictures draw."""
    traces: dict[int, Trace] = field(default_factory=dict, kw_only=True, metadata=_NOT_JSON)
    """the worst sequences' tokens, by sequence id: their pictures."""
    tokens: TokenView | None = field(default=None, kw_only=True, metadata=_NOT_JSON)
    """the run's worst sequences token by token: the page's tokens tab (``--html``)."""


@dataclass(frozen=True)
class MasksDocument:
    """``compare-masks``: what each rule rejects and reweights, then what the JSON leaves out."""

    masks: MasksResult = field(metadata=flatten())
    analysis: AnalysisResult = field(kw_only=True, metadata=_NOT_JSON)
    """the pass: the input's header line, the files the page lists."""
    examples: int = field(default=0, kw_only=True, metadata=_NOT_JSON)
    """how many disputed tokens the table lists (``--examples``)."""
    pictures: bool = field(default=False, kw_only=True, metadata=_NOT_JSON)
    """the pictures are drawn (``--plots``), and the page shows them too."""
    tokens: TokenView | None = field(default=None, kw_only=True, metadata=_NOT_JSON)
    """the run's worst sequences token by token: the page's tokens tab (``--html``)."""
    written: list[str] = field(default_factory=list, kw_only=True, metadata=_NOT_JSON)
    """the files of the per-token audit the pass wrote (``--write``)."""
