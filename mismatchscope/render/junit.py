"""The JUnit XML frame the gate and certify reports share: one suite whose counts CI tools read."""

from __future__ import annotations

import datetime as dt
import xml.etree.ElementTree as ET
from collections.abc import Iterable


def junit_suite(
    name: str, properties: Iterable[tuple[str, str]], tests: int, failures: int, skipped: int, seconds: float
) -> tuple[ET.Element, ET.Element]:
    """The ``testsuites`` root and its one ``testsuite`` (with its properties), for the caller's test cases."""
    counts = {
        "tests": str(tests),
        "failures": str(failures),
        "errors": "0",
        "skipped": str(skipped),
        "time": f"{seconds:.3f}",
    }
    root = ET.Element("testsuites", {"name": name, **counts})
    suite = ET.SubElement(
        root,
        "testsuite",
        {"name": name, **counts, "timestamp": dt.datetime.now(dt.UTC).replace(microsecond=0, tzinfo=None).isoformat()},
    )
    props = ET.SubElement(suite, "properties")
    for key, value in properties:
        ET.SubElement(props, "property", {"name": key, "value": value})
    return root, suite


def junit_text(root: ET.Element) -> str:
    """The document, indented, with its XML declaration."""
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"
