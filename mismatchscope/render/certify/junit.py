"""The certify verdict as JUnit XML: one ``testcase`` per check, ``failure`` where the pairs part, ``skipped``
where a check could not be made, so any CI that reads test reports lists them."""

from __future__ import annotations

import xml.etree.ElementTree as ET

from ...certify.rows import FullVocabResult
from ...certify.run import Verdict
from ..junit import junit_suite, junit_text
from .cases import cases, certified


def junit_xml(v: Verdict, seconds: float = 0.0, rows: FullVocabResult | None = None) -> str:
    listed = cases(v, rows)
    failures = sum(ok is False for _, ok, _ in listed)
    skipped = sum(ok is None for _, ok, _ in listed)
    scope = ((f"scope.{k}", str(x)) for k, x in v.scope.items())
    root, suite = junit_suite(
        "mismatchscope certify",
        [("run", v.run), ("verdict", "certified" if certified(v, rows) else "not certified"), *scope],
        len(listed),
        failures,
        skipped,
        seconds,
    )
    for name, ok, detail in listed:
        case = ET.SubElement(suite, "testcase", {"name": name, "classname": "mismatchscope.certify", "time": "0"})
        if ok is False:
            ET.SubElement(case, "failure", {"message": detail, "type": "not_bit_equal"}).text = detail
        elif ok is None:
            ET.SubElement(case, "skipped", {"message": detail})
        ET.SubElement(case, "system-out").text = detail
    return junit_text(root)
