"""The gate as one library call: comparability, one analysis pass per file,
bootstrap, checks."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import numpy as np

from ..analysis.engine import AnalysisRequest, analyse
from ..analysis.parallel import release_freed_memory
from ..errors import UsageError
from ..execution.stack import StackReport, stack_report
from ..progress import Note
from ..reader import open_source, require_complete
from .checks import Check, evaluate
from .compare import Comparability, compare_runs
from .config import GateConfig
from .estimate import FileEstimates, estimate
from .identical import same_data
from .limits import Statistic


@dataclass
class GateResult:
    config: GateConfig
    candidate: FileEstimates
    baseline: FileEstimates | None
    comparability: Comparability | None
    checks: list[Check]
    warnings: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # findings that are not warnings (a deterministic rerun)
    stack: StackReport | None = None
    """what changed in the stack between baseline and candidate (their provenance); None without a baseline."""

    @property
    def passed(self) -> bool:
        return not any(c.failed for c in self.checks)

    @property
    def verdict(self) -> str:
        return "pass" if self.passed else "fail"


def run_gate(
    candidate: str,
    baseline: str | None,
    cfg: GateConfig,
    mapping: dict[str, str] | None = None,
    *,
    plots: bool = False,
    sweeps: list | None = None,
    progress: Note | None = None,
) -> GateResult:
    """Analyse both files once each and judge every limit of ``cfg``.

    ``plots`` also collects what the pictures need (the report's breakdowns,
    histograms, sweep curves over ``sweeps``).
    """
    say = progress or (lambda _msg: None)
    metrics = _limits(cfg, baseline)
    warnings, notes, comparability = _check_runs(candidate, baseline, cfg, mapping)
    request = _request(cfg, metrics, plots, sweeps)
    estimates: dict[str, FileEstimates] = {}
    for role, path, stream in (("baseline", baseline, 0), ("candidate", candidate, 1)):
        if path is None:
            continue
        say(f"analysing the {role}: {path}")
        estimates[role] = _estimate_run(role, path, request, mapping, metrics, cfg, stream, plots)
        warnings += [f"{role}: {w}" for w in estimates[role].result.warnings]
        release_freed_memory()  # the candidate's pass then peaks as the baseline's did, not on top of its leftovers
    checks = evaluate(cfg, estimates["candidate"], estimates.get("baseline"))
    stack = stack_report(baseline, candidate) if baseline is not None else None
    return GateResult(
        cfg, estimates["candidate"], estimates.get("baseline"), comparability, checks, warnings, notes, stack
    )


def _limits(cfg: GateConfig, baseline: str | None) -> list[Statistic]:
    """The metrics the limits name; a gate with none, or regression limits with no baseline, is refused."""
    metrics = cfg.metrics()
    if not metrics:
        raise UsageError(
            "the gate has no limits to check",
            hint="add [absolute] or [regression] limits, or pass --limit / --max-increase",
        )
    if cfg.regression and baseline is None:
        raise UsageError(
            f"{len(cfg.regression)} regression limit(s) ({', '.join(r.metric for r in cfg.regression)}) need a baseline",
            hint="pass --baseline PATH (or set baseline in [gate]), or --absolute-only to check the absolute limits alone",
        )
    return metrics


def _check_runs(
    candidate: str, baseline: str | None, cfg: GateConfig, mapping: dict[str, str] | None
) -> tuple[list[str], list[str], Comparability | None]:
    """Before any token is read: both runs complete, the baseline not the candidate, their metadata comparable.

    Returns the warnings and notes so far (a copied run, a deterministic rerun) and the comparability.
    """
    for path in (candidate, baseline):  # a gate verdict on part of a run would mislead
        if path is not None:
            require_complete(path)
    warnings: list[str] = []
    notes: list[str] = []
    if baseline is None:
        return warnings, notes, None
    refuse_self_baseline(candidate, baseline)
    if (same := same_data(candidate, baseline)) is not None:
        (warnings if same.copy else notes).append(same.message)
    comparability = compare_runs(  # metadata only: refuse before reading any token
        open_source(baseline, mapping).run_config, open_source(candidate, mapping).run_config, cfg.allow_different
    )
    if comparability.warning:
        warnings.append(comparability.warning)
    return warnings, notes, comparability


def _request(cfg: GateConfig, metrics: list[Statistic], plots: bool, sweeps: list | None) -> AnalysisRequest:
    """One analysis pass per run computes what the limits (and, with ``plots``, the pictures) need, no more."""
    rules = cfg.rule_instances()
    return AnalysisRequest(
        report=plots or any(m.needs_report for m in metrics),
        masks=bool(rules) or bool(sweeps),
        rules=rules,
        sweeps=list(sweeps or []),
        routing=plots or any(m.routing for m in metrics),
    )


def _estimate_run(
    role: str,
    path: str,
    request: AnalysisRequest,
    mapping: dict[str, str] | None,
    metrics: list[Statistic],
    cfg: GateConfig,
    stream: int,
    plots: bool,
) -> FileEstimates:
    """One run's pass and its bootstrap estimates; ``stream`` keeps the two runs' resamples independent."""
    acc = None
    if plots:
        from ..analysis.histograms import PlotAccumulator

        acc = PlotAccumulator()
    result = analyse(path, request, mapping, on_terms=acc.add if acc else None)
    est = estimate(role, path, result, metrics, cfg.bootstrap, np.random.default_rng([cfg.seed, stream]))
    est.plot_data = acc
    return est


def refuse_self_baseline(candidate: str, baseline: str) -> None:
    """A baseline that is the candidate (or shares shards with it) passes every regression limit by construction.

    Files are the same when their resolved paths are (symlinks, ``..``) or
    when they are one file under two names (a hard link).
    """
    from ..reader import resolve_files

    def files(p: str) -> dict[tuple[int, int], str]:
        out = {}
        for f in resolve_files(p):
            st = os.stat(f)
            out[(st.st_dev, st.st_ino)] = os.path.realpath(f)
        return out

    cand, base = files(candidate), files(baseline)
    shared = cand.keys() & base.keys()
    if shared:
        same = cand.keys() == base.keys()
        raise UsageError(
            f"the baseline {baseline} "
            + (
                "is the candidate itself"
                if same
                else f"shares {len(shared)} file(s) with the candidate, e.g. {min(cand[k] for k in shared)}"
            ),
            hint="pass as --baseline the run sampled by the current serving stack",
        )
