"""mismatchscope: how far apart are the RL sampler and the trainer, where, and
what would each masking rule throw away.

The analysis core (``schema``, ``reader``, ``divergence``, ``rules``,
``analysis``) needs only numpy and pyarrow. torch, transformers and vLLM are
imported inside ``mismatchscope.probe`` only; ``Recorder`` and ``Monitor``
(``mismatchscope.live``) take torch tensors without importing torch.

The names in ``__all__`` are the library's entry points (docs/api.md). They
are imported on first use, so ``import mismatchscope`` (and every CLI call)
stays free of numpy until one of them is asked for.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from ._version import __version__

_EXPORTS: dict[str, str] = {
    # analyses of a token-pair file, folder or run
    "analyse": "analysis.engine",
    "AnalysisRequest": "analysis.engine",
    "AnalysisResult": "analysis.engine",
    "report": "api",
    "compare_masks": "api",
    # the typed results their JSON serialises (docs/schemas/), and the metric catalog they name
    "Report": "analysis.results",
    "MasksResult": "analysis.results",
    "GateDocument": "gate.document",
    "TimelineDocument": "timeline",
    "DiagnoseDocument": "diagnose.document",
    "Metric": "metrics",
    "CATALOG": "metrics",
    # the gate: limits on a candidate, absolute and against a baseline
    "run_gate": "gate.run",
    "GateResult": "gate.run",
    "GateConfig": "gate.config",
    "load_config": "gate.config",
    # converting a training framework's dumps
    "import_run": "importers",
    "ImportResult": "importers",
    # the per-step series and its change points (the function is ``mismatchscope.timeline.timeline``:
    # the name ``timeline`` here is the subpackage)
    "TimelineResult": "timeline",
    # recording and watching from inside a training loop
    "Recorder": "live",
    "provenance": "execution.collect",
    "RunProvenance": "execution.record",
    "Monitor": "live",
    "Alert": "live",
    "StepReport": "live",
    # the one exception tree
    "RecorderError": "errors",
    "RecorderInputError": "errors",
    "MismatchscopeError": "errors",
    "UsageError": "errors",
    "InputError": "errors",
}
"""public name -> the module (under ``mismatchscope``) that declares it."""

__all__ = [
    "CATALOG",
    "Alert",
    "AnalysisRequest",
    "AnalysisResult",
    "DiagnoseDocument",
    "GateConfig",
    "GateDocument",
    "GateResult",
    "ImportResult",
    "InputError",
    "MasksResult",
    "Metric",
    "MismatchscopeError",
    "Monitor",
    "Recorder",
    "RecorderError",
    "RecorderInputError",
    "Report",
    "RunProvenance",
    "StepReport",
    "TimelineDocument",
    "TimelineResult",
    "UsageError",
    "__version__",
    "analyse",
    "compare_masks",
    "import_run",
    "load_config",
    "provenance",
    "report",
    "run_gate",
]
"""written out (not derived from _EXPORTS) so that linters and type checkers read it; a test holds the two equal."""

if TYPE_CHECKING:  # what a type checker and an editor see; at run time __getattr__ imports on demand
    from .analysis.engine import AnalysisRequest, AnalysisResult, analyse
    from .analysis.results import MasksResult, Report
    from .api import compare_masks, report
    from .diagnose.document import DiagnoseDocument
    from .errors import InputError, MismatchscopeError, RecorderError, RecorderInputError, UsageError
    from .execution.collect import provenance
    from .execution.record import RunProvenance
    from .gate.config import GateConfig, load_config
    from .gate.document import GateDocument
    from .gate.run import GateResult, run_gate
    from .importers import ImportResult, import_run
    from .live import Alert, Monitor, Recorder, StepReport
    from .metrics import CATALOG, Metric
    from .timeline import TimelineDocument, TimelineResult


def __getattr__(name: str) -> Any:
    """``from mismatchscope import Recorder, run_gate`` without loading them (or numpy) for every CLI call."""
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'mismatchscope' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value  # the next lookup is a plain attribute
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS})
