"""The gate's checks as JUnit XML: one ``testcase`` per check, a ``failure``
element for each failed one, so any CI that reads test reports lists them."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from typing import TYPE_CHECKING

from .gate_text import estimate_text, limit_text, method_text
from .junit import junit_suite, junit_text

if TYPE_CHECKING:
    from ..gate.document import GateDocument


def render(doc: GateDocument) -> str:
    result, seconds = doc.source, doc.seconds
    cfg = result.config
    n, failures = len(result.checks), sum(c.failed for c in result.checks)
    root, suite = junit_suite("mismatchscope gate", _properties(result), n, failures, 0, seconds)
    for ch in result.checks:
        case = ET.SubElement(
            suite, "testcase", {"name": ch.name, "classname": f"mismatchscope.gate.{ch.kind}", "time": "0"}
        )
        summary = f"estimate {estimate_text(ch)}, limit {limit_text(ch)} ({method_text(ch, cfg.confidence)})"
        if ch.failed:
            fail = ET.SubElement(case, "failure", {"message": summary, "type": f"{ch.kind}_limit"})
            fail.text = ch.explanation
        ET.SubElement(case, "system-out").text = f"{summary}\n{ch.explanation}"
    return junit_text(root)


def _properties(result) -> list[tuple[str, str]]:
    cfg = result.config
    out = [("candidate", result.candidate.path)]
    if result.baseline:
        out.append(("baseline", result.baseline.path))
    out += [
        ("bootstrap", str(cfg.bootstrap)),
        ("confidence", f"{cfg.confidence:g}"),
        ("seed", str(cfg.seed)),
        ("config", cfg.source),
        ("verdict", result.verdict),
    ]
    stack = result.stack
    if stack is not None:  # one property per change, so a CI's report view lists each beside the verdict
        out.append(("stack_changes", stack.line()))
        out += [("stack_change", c.text) for c in stack.changes]
        out += [("provenance_note", n) for n in stack.notes]
    comp = result.comparability
    if comp is not None:
        out.append(("comparability", "checked" if comp.checked else "not checked (no probe metadata)"))
    return out
