"""The certify verdict as JUnit XML: one ``testcase`` per check, ``failure`` where the pairs part, ``skipped``
where a check could not be made, so any CI that reads test reports lists them."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from typing import TYPE_CHECKING

from .junit import junit_suite, junit_text

if TYPE_CHECKING:
    from ..certify.document import CertifyDocument


def render(doc: CertifyDocument) -> str:
    listed = [(c.name, c.passed, c.detail) for c in doc.cases()]
    failures = sum(ok is False for _, ok, _ in listed)
    skipped = sum(ok is None for _, ok, _ in listed)
    scope = ((f"scope.{k}", str(x)) for k, x in doc.scope.items())
    root, suite = junit_suite(
        "mismatchscope certify",
        [("run", doc.run), ("verdict", doc.verdict), *scope],
        len(listed),
        failures,
        skipped,
        doc.seconds,
    )
    for name, ok, detail in listed:
        case = ET.SubElement(suite, "testcase", {"name": name, "classname": "mismatchscope.certify", "time": "0"})
        if ok is False:
            ET.SubElement(case, "failure", {"message": detail, "type": "not_bit_equal"}).text = detail
        elif ok is None:
            ET.SubElement(case, "skipped", {"message": detail})
        ET.SubElement(case, "system-out").text = detail
    return junit_text(root)
