"""JUnit XML of gate and certify: a control character in a run path is escaped, and the file validates."""

from __future__ import annotations

import shutil
import xml.etree.ElementTree as ET

from tests.certify.runs import make_run
from tests.helpers import REPO, cli
from tests.inputs import validate_junit

GOLDEN = REPO / "tests" / "data" / "golden-probe"


def _parse(path) -> ET.Element:
    validate_junit(path)  # an XML parser, and tests/data/junit.xsd where xmllint exists
    return ET.parse(path).getroot()


def test_gate_junit_with_a_control_character_in_the_run_path(tmp_path):
    run = tmp_path / "run\x1b[31m\x07"
    shutil.copytree(GOLDEN, run)
    xml = tmp_path / "gate.xml"
    r = cli("gate", str(run), "--absolute-only", "--bootstrap", "20", "--junit-xml", str(xml))
    assert r.returncode in (0, 1), r.stderr
    props = {p.get("name"): p.get("value") for p in _parse(xml).iter("property")}
    assert any("run\\x1b[31m\\x07" in v for v in props.values()), props  # escaped as Python writes it


def test_certify_junit_with_a_control_character_in_the_run_path(tmp_path):
    run = make_run(tmp_path / "run\x01\x1f")
    xml = tmp_path / "certify.xml"
    r = cli("certify", str(run), "--junit-xml", str(xml))
    assert r.returncode == 0, r.stderr
    text = xml.read_text()
    assert "\x01" not in text and "run\\x01\\x1f" in text
    _parse(xml)
