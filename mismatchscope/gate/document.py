"""What ``gate --format json`` prints: the :class:`~.run.GateResult` as a typed document.

The checks are the library's own :class:`~.checks.Check` objects; the rest
summarises the files, the comparability verdict and the limits in force.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from ..execution.stack import StackReport
from ..view.document import TokenView
from .checks import Check
from .compare import _MISSING, Comparability, Difference
from .config import AbsoluteLimit, GateConfig, RegressionLimit
from .estimate import FileEstimates
from .run import GateResult


@dataclass
class FileSummary:
    path: str
    tokens: int
    sequences: int
    values: dict[str, float] = field(metadata={"doc": "every limited statistic's point estimate, by name"})
    run: dict[str, Any] | None

    @classmethod
    def of(cls, est: FileEstimates) -> FileSummary:
        return cls(est.path, est.tokens, est.sequences, est.point, est.result.run)


@dataclass
class DifferenceEntry:
    key: str
    baseline: Any
    candidate: Any
    allowed: bool

    @classmethod
    def of(cls, d: Difference) -> DifferenceEntry:
        return cls(
            d.key,
            None if d.baseline is _MISSING else d.baseline,
            None if d.candidate is _MISSING else d.candidate,
            d.allowed,
        )


@dataclass
class ComparabilitySummary:
    checked: bool
    differences: list[DifferenceEntry]
    serving: list[DifferenceEntry]
    warning: str | None

    @classmethod
    def of(cls, comp: Comparability) -> ComparabilitySummary:
        return cls(
            comp.checked,
            [DifferenceEntry.of(d) for d in comp.differences],
            [DifferenceEntry.of(d) for d in comp.serving],
            comp.warning,
        )


@dataclass
class ConfigSummary:
    source: str
    bootstrap: int
    confidence: float
    seed: int
    allow_different: list[str]
    rules: dict[str, dict[str, Any]]
    absolute: list[AbsoluteLimit]
    regression: list[RegressionLimit]

    @classmethod
    def of(cls, cfg: GateConfig) -> ConfigSummary:
        return cls(
            cfg.source,
            cfg.bootstrap,
            cfg.confidence,
            cfg.seed,
            list(cfg.allow_different),
            cfg.rules,
            list(cfg.absolute),
            list(cfg.regression),
        )


@dataclass
class GateDocument:
    """What ``gate --format json`` prints, after ``schema_version``."""

    verdict: Literal["pass", "fail"]
    checks: list[Check]
    candidate: FileSummary
    baseline: FileSummary | None
    comparability: ComparabilitySummary | None
    config: ConfigSummary
    warnings: list[str]
    notes: list[str] = field(metadata={"doc": "findings that are not warnings, e.g. two runs bit-identical"})
    stack: StackReport | None = field(
        metadata={"doc": "what changed in the stack between baseline and candidate, from their provenance"}
    )
    source: GateResult = field(kw_only=True, metadata={"json": False})
    """the gate's result as the library holds it: what the tables, reports and pictures draw beyond the JSON."""
    seconds: float = field(default=0.0, kw_only=True, metadata={"json": False})
    """how long the gate took (the JUnit report's time)."""
    tokens: TokenView | None = field(default=None, kw_only=True, metadata={"json": False})
    """the candidate's worst sequences token by token: the page's tokens tab (``--html``)."""

    @classmethod
    def of(cls, result: GateResult, seconds: float = 0.0, tokens: TokenView | None = None) -> GateDocument:
        return cls(
            "pass" if result.passed else "fail",
            list(result.checks),
            FileSummary.of(result.candidate),
            FileSummary.of(result.baseline) if result.baseline else None,
            ComparabilitySummary.of(result.comparability) if result.comparability else None,
            ConfigSummary.of(result.config),
            result.warnings,
            result.notes,
            result.stack,
            source=result,
            seconds=seconds,
            tokens=tokens,
        )


def candidate_tokens(result: GateResult, given: Any) -> TokenView:
    """The candidate's worst sequences token by token, marked by the gate's rules (else the rules report draws);
    ``given``: the tokenizer ``--tokenizer`` named (``view.given_tokenizer``)."""
    from ..rules.drawn import plot_rules
    from ..view import ViewOptions, token_view

    rules = result.config.rule_instances() or plot_rules(None)
    return token_view(result.candidate.path, result.candidate.result, rules, ViewOptions(), given)
