"""The two analyses a notebook asks for by name: ``report`` and ``compare_masks``.

Both are one call to :func:`~mismatchscope.analysis.engine.analyse`, the
streaming pass the commands of the same names make, so a notebook and the
command line read the same numbers. Rules are given as the command line
spells them (``"icepop:beta=5"``) or as ready :class:`~mismatchscope.rules.RuleInstance`
objects.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

from .analysis.engine import AnalysisRequest, AnalysisResult, analyse
from .rules import RuleInstance, default_rules, parse_rule, parse_sweep


def report(
    path: str | os.PathLike, *, columns: Mapping[str, str] | None = None, workers: int | None = None
) -> AnalysisResult:
    """The mismatch report of a file, folder or run: ``result.report`` holds what ``report --format json`` prints.

    ``columns`` maps the canonical column names to a file's own (``{"sampler_logprob": "old_logp"}``).
    """
    return analyse(os.fspath(path), AnalysisRequest(report=True), dict(columns or {}), workers=workers)


def compare_masks(
    path: str | os.PathLike,
    rules: Sequence[str | RuleInstance] | None = None,
    *,
    sweeps: Sequence[str] = (),
    examples: int = 0,
    columns: Mapping[str, str] | None = None,
    workers: int | None = None,
) -> AnalysisResult:
    """What each masking rule would reject or reweight: ``result.masks`` holds what ``compare-masks --format json``
    prints (without its top-level ``tokens``/``sequences``/``warnings``, which are fields of the result).

    ``rules`` defaults to every rule with reference defaults, as the command does without ``--rule``;
    ``sweeps`` are ``"icepop.beta=1.5,2,3"`` strings, each taking its other parameters from ``rules``.
    """
    selected = [r if isinstance(r, RuleInstance) else parse_rule(r) for r in rules] if rules else default_rules()
    by_name = {r.name: r for r in selected}
    request = AnalysisRequest(
        report=False, masks=True, rules=selected, sweeps=[parse_sweep(s, by_name) for s in sweeps], examples=examples
    )
    return analyse(os.fspath(path), request, dict(columns or {}), workers=workers)
