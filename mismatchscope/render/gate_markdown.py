"""The gate's verdict as Markdown: a pull-request comment or a GitHub step summary."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..formatting import fmt, md_cell
from .gate_text import estimate_text, limit_text, method_text, status_text

if TYPE_CHECKING:
    from ..gate.document import GateDocument


def render(doc: GateDocument) -> str:
    """A heading with the verdict, what was compared, and one table row per check."""
    result = doc.source
    lines = [_heading(result), "", *_compared(result), *_stack(result), *_checks(result), *_notes(result)]
    return "\n".join(lines) + "\n"


def _heading(result) -> str:
    icon = "✅" if result.passed else "❌"
    failed = sum(c.failed for c in result.checks)
    return f"### {icon} mismatchscope gate: {result.verdict}" + (
        f" ({failed} of {len(result.checks)} checks failed)" if failed else f" ({len(result.checks)} checks)"
    )


def _compared(result) -> list[str]:
    """The runs, what changed between them, and how the intervals were drawn."""
    cfg, cand = result.config, result.candidate
    lines = [f"- candidate: `{cand.path}` ({cand.tokens:,} tokens, {cand.sequences:,} sequences)"]
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
    return lines


def _stack(result) -> list[str]:
    """What changed in the stack (the runs' provenance), next to the verdict."""
    from ..execution.compare import shown

    stack = result.stack
    if stack is None:
        return []
    lines = [f"- provenance: {md_cell(n)}" for n in stack.notes]
    if not stack.changes:
        return [*lines, f"- stack changes (provenance): {stack.line()}"]
    lines += [
        "",
        "What changed in the stack (provenance):",
        "",
        "| side | field | baseline | candidate |",
        "|---|---|---|---|",
    ]
    lines += [
        f"| {c.side} | {md_cell(c.label)} | {md_cell(shown(c.baseline))} | {md_cell(shown(c.candidate))} |"
        for c in stack.changes
    ]
    return lines


def _checks(result) -> list[str]:
    confidence = result.config.confidence
    lines = [
        "",
        f"| result | check | baseline | candidate | estimate [{confidence:.0%} interval] | limit | method |",
        "|---|---|---:|---:|---:|---|---|",
    ]
    for ch in result.checks:
        mark = "❌ FAIL" if ch.failed else ("⚠️ pass (inconclusive)" if ch.inconclusive else "✅ " + status_text(ch))
        cells = (
            mark,
            f"`{ch.name}`".replace("<=", "≤").replace(">=", "≥"),
            fmt(ch.baseline),
            fmt(ch.candidate),
            estimate_text(ch),
            limit_text(ch).replace("<=", "≤").replace(">=", "≥"),
            method_text(ch, confidence),
        )
        lines.append("| " + " | ".join(md_cell(x) for x in cells) + " |")
    return lines


def _notes(result) -> list[str]:
    """Why a check failed or was not decided, then the run's warnings and notes."""
    lines: list[str] = []
    notes = [ch for ch in result.checks if ch.failed or ch.inconclusive or ch.below_floor]
    if notes:
        lines += ["", *[f"- `{ch.metric}`: {md_cell(ch.explanation)}" for ch in notes]]
    if result.warnings:
        lines += ["", *[f"> warning: {md_cell(w)}" for w in result.warnings]]
    if result.notes:
        lines += ["", *[f"> note: {md_cell(n)}" for n in result.notes]]
    return lines
