"""The certify verdict as Markdown: a pull-request comment or a GitHub step summary."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..formatting import md_cell

if TYPE_CHECKING:
    from ..certify.document import CertifyDocument
    from ..certify.run import Verdict


def render(doc: CertifyDocument) -> str:
    """The verdict, what was compared, one row per check, then where the pairs first part."""
    v = doc.source
    lines = [*_heading(doc), *_checks(doc), *_first_tokens(v), *_first_flips(v)]
    if v.warnings:
        lines += ["", *[f"> warning: {md_cell(w)}" for w in v.warnings]]
    return "\n".join(lines) + "\n"


def _heading(doc: CertifyDocument) -> list[str]:
    v, ok = doc.source, doc.certified
    c = v.coverage
    return [
        f"### {'✅' if ok else '❌'} mismatchscope certify: {'certified' if ok else 'not certified'}",
        "",
        (
            f"- run: `{v.run}` ({c.tokens:,} tokens, {c.sequences:,} sequences, longest position {c.longest_position}, "
            f"{c.share_past_512:.1%} past position 512)"
        ),
        "- scope: " + ", ".join(f"{k} `{val}`" for k, val in v.scope.items()),
        *_sides(v),
    ]


def _sides(v: Verdict) -> list[str]:
    """The provenance fields in which the sampler's side and the trainer's differ."""
    from ..execution.compare import shown

    changed = [r for r in v.sides if r.status == "changed"]
    if not changed:
        return []
    return [
        "- the sides differ in: "
        + ", ".join(f"{md_cell(r.label)} (`{shown(r.left)}` / `{shown(r.right)}`)" for r in changed)
    ]


def _checks(doc: CertifyDocument) -> list[str]:
    lines = ["", "| result | check | detail |", "|---|---|---|"]
    for name, ok, detail in ((c.name, c.passed, c.detail) for c in doc.cases()):
        mark = "✅ pass" if ok else ("❌ FAIL" if ok is False else "➖ not checked")
        lines.append(f"| {mark} | `{name}` | {md_cell(detail)} |")
    return lines


def _first_tokens(v: Verdict) -> list[str]:
    lines: list[str] = []
    for p in v.pairings:
        if p.first:
            lines += [
                "",
                f"First differing tokens, {p.pairing.title} ({p.dtype}):",
                "",
                f"| sequence | position | token | {p.pairing.left} | {p.pairing.right} | ULP |",
                "|---:|---:|---:|---|---|---:|",
            ]
            lines += [
                f"| {d.sequence_id} | {d.position} | {d.token_id} | `{d.left_hex}` {d.left_decimal} | "
                f"`{d.right_hex}` {d.right_decimal} | {d.ulp:,} |"
                for d in p.first
            ]
    return lines


def _first_flips(v: Verdict) -> list[str]:
    if not v.routes.first:
        return []
    return [
        "",
        f"First route flips (first layer {v.routes.first_layer}):",
        "",
        "| sequence | position | layer | sampler experts | trainer experts |",
        "|---:|---:|---:|---|---|",
        *[f"| {f.sequence_id} | {f.position} | {f.layer} | {f.sampler} | {f.trainer} |" for f in v.routes.first],
    ]
