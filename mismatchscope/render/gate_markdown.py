"""The gate's verdict as Markdown: a pull-request comment or a GitHub step summary."""

from __future__ import annotations

import math

from ..gate.checks import Check


def fmt(v: float | None) -> str:
    """Compact numbers for tables: 4 significant digits."""
    if v is None:
        return "-"
    if isinstance(v, float) and math.isnan(v):
        return "nan"
    if isinstance(v, float) and math.isinf(v):
        return "inf" if v > 0 else "-inf"
    return f"{v:.4g}"


def estimate_text(ch: Check) -> str:
    """``x1.02 [0.97, 1.08]`` (regression) or ``0.0042 [0.0039, 0.0046]`` (absolute)."""
    x = "x" if ch.kind == "regression" else ""
    text = f"{x}{fmt(ch.estimate)}"
    if ch.interval:
        text += f" [{x}{fmt(ch.interval[0])}, {x}{fmt(ch.interval[1])}]"
    return text


def limit_text(ch: Check) -> str:
    if ch.kind == "regression":
        return f"x{fmt(ch.limit)} (+{ch.limit - 1:.0%}), floor {fmt(ch.floor)}"
    return f"{ch.op} {fmt(ch.limit)}"


def method_text(ch: Check, confidence: float) -> str:
    return f"bootstrap, {confidence:.0%}" if ch.method == "bootstrap" else "point estimate"


def status_text(ch: Check) -> str:
    if ch.failed:
        return "FAIL"
    if ch.inconclusive:
        return "pass (inconclusive)"
    return "pass (rise below floor)" if ch.below_floor else "pass"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def markdown(result) -> str:
    """A heading with the verdict, what was compared, and one table row per check."""
    cfg = result.config
    icon = "✅" if result.passed else "❌"
    failed = sum(c.failed for c in result.checks)
    lines = [
        f"### {icon} mismatchscope gate: {result.verdict}"
        + (f" ({failed} of {len(result.checks)} checks failed)" if failed else f" ({len(result.checks)} checks)"),
        "",
    ]
    cand = result.candidate
    lines.append(f"- candidate: `{cand.path}` ({cand.tokens:,} tokens, {cand.sequences:,} sequences)")
    if result.baseline:
        b = result.baseline
        lines.append(f"- baseline: `{b.path}` ({b.tokens:,} tokens, {b.sequences:,} sequences)")
    comp = result.comparability
    if comp and comp.checked:
        changed = "; ".join(f"`{d.change()}`" for d in comp.serving) or "nothing recorded"
        lines.append(f"- serving stack change: {changed}")
        allowed = [d for d in comp.differences if d.allowed]
        lines.append(
            "- comparability: same checkpoint, prompts and sampling settings"
            + (f" (allowed to differ: {', '.join(f'`{d.key}`' for d in allowed)})" if allowed else "")
        )
    elif comp:
        lines.append(f"- comparability: **not checked**: {comp.warning}")
    lines.append(
        f"- bootstrap: {cfg.bootstrap} resamples of sequences, seed {cfg.seed}, {cfg.confidence:.0%} intervals; limits from {cfg.source}"
    )
    lines += [
        "",
        f"| result | check | baseline | candidate | estimate [{cfg.confidence:.0%} interval] | limit | method |",
        "|---|---|---:|---:|---:|---|---|",
    ]
    for ch in result.checks:
        mark = "❌ FAIL" if ch.failed else ("⚠️ pass (inconclusive)" if ch.inconclusive else "✅ " + status_text(ch))
        lines.append(
            "| "
            + " | ".join(
                _cell(x)
                for x in (
                    mark,
                    f"`{ch.name}`".replace("<=", "≤").replace(">=", "≥"),
                    fmt(ch.baseline),
                    fmt(ch.candidate),
                    estimate_text(ch),
                    limit_text(ch).replace("<=", "≤").replace(">=", "≥"),
                    method_text(ch, cfg.confidence),
                )
            )
            + " |"
        )
    notes = [ch for ch in result.checks if ch.failed or ch.inconclusive or ch.below_floor]
    if notes:
        lines += ["", *[f"- `{ch.metric}`: {_cell(ch.explanation)}" for ch in notes]]
    if result.warnings:
        lines += ["", *[f"> warning: {_cell(w)}" for w in result.warnings]]
    if result.notes:
        lines += ["", *[f"> note: {_cell(n)}" for n in result.notes]]
    return "\n".join(lines) + "\n"
