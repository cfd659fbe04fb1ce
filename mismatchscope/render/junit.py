"""The JUnit XML frame the gate and certify reports share: one suite whose counts CI tools read."""

from __future__ import annotations

import datetime as dt
import re
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


_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")
"""characters XML 1.0 cannot hold at all, not even as a character reference (a control character in a run's
path, a surrogate from a file name that is not UTF-8): ElementTree writes them as they are, and every XML
parser then refuses the whole report."""


def xml_safe(text: str) -> str:
    """``text`` with each character XML cannot hold written as ``\\xNN`` / ``\\uNNNN``, as Python's repr would."""
    return _NOT_XML.sub(lambda m: f"\\x{ord(m[0]):02x}" if ord(m[0]) < 0x100 else f"\\u{ord(m[0]):04x}", text)


def _make_safe(root: ET.Element) -> None:
    for el in root.iter():
        el.attrib = {k: xml_safe(v) for k, v in el.attrib.items()}
        if el.text:
            el.text = xml_safe(el.text)
        if el.tail:
            el.tail = xml_safe(el.tail)


def junit_text(root: ET.Element) -> str:
    """The document, indented, with its XML declaration; every text and attribute made one XML can hold."""
    _make_safe(root)
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"
