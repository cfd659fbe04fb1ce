"""``probe`` and ``rescore`` for people: the report's and compare-masks' tables of the run written, then the few
lines they end with, the headline of the tables above, where a person reads last (the report and compare-masks
run to a couple of hundred lines, their first table screens up)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..formatting import num, pct

if TYPE_CHECKING:
    from ..probe.document import ProbeDocument

SUMMARY_RULES = 4
"""rules the summary names: those that reject the most tokens."""


def render(console, doc: ProbeDocument) -> None:
    from ..probe.document import SUMMARY_EXAMPLES
    from .masks_table import masks_tables
    from .report_table import report_tables
    from .run_header import header

    result = doc.analysis
    header(console, result)
    report_tables(console, doc.report)
    masks_tables(console, doc.compare_masks, SUMMARY_EXAMPLES)
    console.print()
    for line in summary_lines(result, doc.run_dir):  # the headline again, where the reader's eye ends
        console.print(line, highlight=False, markup=False)


def summary_lines(result, run_dir) -> list[str]:
    """The headline: what was compared, the gap's size, the rules that would cut most, and the run's folder."""
    m = result.report.metrics
    run = result.run or {}
    s, t = run.get("sampler") or {}, run.get("trainer") or {}
    sides = f"sampler {s.get('kind', '?')}/{s.get('dtype', '?')} vs trainer {t.get('dtype', '?')}, " if s else ""
    lines = [
        f"Summary ({sides}{result.tokens:,} tokens in {result.sequences:,} sequences):",
        f"  mean |log p - log q| {num(m.abs_logprob_diff_mean)} (max {num(m.abs_logprob_diff_max)}), "
        f"tv_token mean {num(m.tv_token_mean)}, k3 mean {num(m.k3_mean)}",
        "  " + _rules(result.masks),
        f"  run directory: {run_dir} (mismatchscope report {run_dir}; compare-masks {run_dir})",
    ]
    return lines


def _rules(masks) -> str:
    rows = [r for r in masks.rules if r.hypothesis == "data" and r.action == "reject" and r.token_reject_rate]
    if not rows:
        return "no rule would reject a token"
    rows.sort(key=lambda r: -(r.token_reject_rate or 0.0))
    shown = ", ".join(f"{r.name} {pct(r.token_reject_rate)}" for r in rows[:SUMMARY_RULES])
    more = f" (and {len(rows) - SUMMARY_RULES} more)" if len(rows) > SUMMARY_RULES else ""
    return f"tokens rejected: {shown}{more}"
