"""The verdict for machines (JSON), pull requests (Markdown) and CI test reports (JUnit).

One check per pairing, one for routes and one for the policy version: the
same list in every format, so a CI shows the same failures a person reads.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from typing import Any

from ..certify.document import checks
from ..certify.rows import FullVocabResult
from ..certify.run import Verdict
from .junit import junit_suite, junit_text


def payload(v: Verdict) -> dict[str, Any]:
    """``certify --format json``: the typed document (``certify/document.py``), ``schema_version`` first."""
    from ..certify.document import CertifyDocument
    from ..documents import document

    return document(CertifyDocument.of(v))


def _cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _cases(v: Verdict, rows: FullVocabResult | None) -> list[tuple[str, bool | None, str]]:
    """The checks, and with ``--full-vocab`` the whole-row check: it decides the verdict like the others."""
    extra = [] if rows is None else [("full_vocab", rows.equal, rows.detail())]
    return [*checks(v), *extra]


def _certified(v: Verdict, rows: FullVocabResult | None) -> bool:
    return v.certified and (rows is None or rows.equal)


def markdown(v: Verdict, rows: FullVocabResult | None = None) -> str:
    certified = _certified(v, rows)
    icon = "✅" if certified else "❌"
    c = v.coverage
    lines = [
        f"### {icon} mismatchscope certify: {'certified' if certified else 'not certified'}",
        "",
        (
            f"- run: `{v.run}` ({c.tokens:,} tokens, {c.sequences:,} sequences, longest position {c.longest_position}, "
            f"{c.share_past_512:.1%} past position 512)"
        ),
        "- scope: " + ", ".join(f"{k} `{val}`" for k, val in v.scope.items()),
        "",
        "| result | check | detail |",
        "|---|---|---|",
    ]
    for name, ok, detail in _cases(v, rows):
        mark = "✅ pass" if ok else ("❌ FAIL" if ok is False else "➖ not checked")
        lines.append(f"| {mark} | `{name}` | {_cell(detail)} |")
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
    if v.routes.first:
        lines += [
            "",
            f"First route flips (first layer {v.routes.first_layer}):",
            "",
            "| sequence | position | layer | sampler experts | trainer experts |",
            "|---:|---:|---:|---|---|",
        ]
        lines += [f"| {f.sequence_id} | {f.position} | {f.layer} | {f.sampler} | {f.trainer} |" for f in v.routes.first]
    if v.warnings:
        lines += ["", *[f"> warning: {_cell(w)}" for w in v.warnings]]
    return "\n".join(lines) + "\n"


def junit_xml(v: Verdict, seconds: float = 0.0, rows: FullVocabResult | None = None) -> str:
    cases = _cases(v, rows)
    failures = sum(ok is False for _, ok, _ in cases)
    skipped = sum(ok is None for _, ok, _ in cases)
    scope = ((f"scope.{k}", str(x)) for k, x in v.scope.items())
    root, suite = junit_suite(
        "mismatchscope certify",
        [("run", v.run), ("verdict", "certified" if _certified(v, rows) else "not certified"), *scope],
        len(cases),
        failures,
        skipped,
        seconds,
    )
    for name, ok, detail in cases:
        case = ET.SubElement(suite, "testcase", {"name": name, "classname": "mismatchscope.certify", "time": "0"})
        if ok is False:
            ET.SubElement(case, "failure", {"message": detail, "type": "not_bit_equal"}).text = detail
        elif ok is None:
            ET.SubElement(case, "skipped", {"message": detail})
        ET.SubElement(case, "system-out").text = detail
    return junit_text(root)
