"""The few lines ``probe`` and ``rescore`` end with: the headline of the tables above, where a person reads
last (the report and compare-masks run to a couple of hundred lines, their first table screens up)."""

from __future__ import annotations

from .tables import num, pct

SUMMARY_RULES = 4
"""rules the summary names: those that reject the most tokens."""


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
