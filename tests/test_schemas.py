"""The commands' JSON documents: their schemas in docs/schemas/ are current, and real output validates.

The schemas are generated from the typed results (``docs/generate_schemas.py``); here every command's
``--format json`` output, on inputs that fill its optional sections (top-k columns, entropy, routes, a
baseline, --worst, several steps), is checked against the committed file, so a field the code adds
without the schema (or the reverse) fails.
"""

from __future__ import annotations

import json
import math
import runpy
import shutil
from dataclasses import dataclass, field

import jsonschema
import pytest

from mismatchscope.documents import json_schema, optional, to_json
from tests.helpers import REPO, SAMPLE_PAIRS, cli, pairs
from tests.routes_fixture import write_run

GOLDEN = REPO / "tests" / "data" / "golden-probe"
SCHEMAS = REPO / "docs" / "schemas"


def _validate(name: str, *args: str) -> dict:
    r = cli(*args, "--format", "json")
    assert r.returncode in (0, 1), r.stderr  # the gate exits 1 on a failed limit, with its JSON
    doc = json.loads(r.stdout)
    schema = json.loads((SCHEMAS / name).read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    jsonschema.validate(doc, schema, cls=jsonschema.Draft202012Validator)
    assert doc["schema_version"] == 1
    return doc


@dataclass
class _Section:
    compared: int | None = field(default=None, metadata=optional("rows compared"))
    rate: float | None = field(default=None, metadata=optional("flipped / compared", with_field="compared"))


def test_an_optional_field_can_appear_with_another():
    # the rate of nothing compared is written as null, but only where the section it belongs to is
    assert to_json(_Section()) == {}
    assert to_json(_Section(compared=0)) == {"compared": 0, "rate": None}
    assert to_json(_Section(compared=4, rate=0.5)) == {"compared": 4, "rate": 0.5}
    assert json_schema(_Section, "t", "d")["required"] == ["schema_version"]


def test_the_committed_schemas_and_metric_table_are_current():
    generator = runpy.run_path(str(REPO / "docs" / "generate_schemas.py"))
    assert generator["main"](["--check"]) == 0, "run python docs/generate_schemas.py"


@pytest.mark.parametrize("path", [SAMPLE_PAIRS, GOLDEN], ids=["plain", "probe-run"])
def test_report_output_validates(path):
    doc = _validate("report.json", "report", str(path), "--worst", "2", "--worst-traces")
    assert len(doc["worst"]) == 2


def test_report_of_a_moe_run_validates(tmp_path):
    run = write_run(tmp_path / "run")
    doc = _validate("report.json", "report", str(run))
    assert doc["routing"] is not None


@pytest.mark.parametrize("path", [SAMPLE_PAIRS, GOLDEN], ids=["plain", "probe-run"])
def test_compare_masks_output_validates(path):
    _validate("compare-masks.json", "compare-masks", str(path), "--sweep", "icepop.beta=2,5", "--examples", "3")


def test_compare_masks_of_a_moe_run_without_advantages_validates(tmp_path):
    # no advantage column: dppo-tv is counted as if every A > 0, every A < 0, and their mean; the routes add
    # each row's flipped rejections
    run = write_run(tmp_path / "run")
    doc = _validate("compare-masks.json", "compare-masks", str(run), "--rule", "dppo-tv", "--rule", "seq-mis")
    assert [r["hypothesis"] for r in doc["rules"]] == ["A>0", "A<0", "mean", "data"]
    assert all("route_flipped_rejected" in r for r in doc["rules"])


def test_gate_output_validates(tmp_path):
    baseline = tmp_path / "baseline"
    shutil.copytree(GOLDEN, baseline)
    doc = _validate(
        "gate.json",
        "gate",
        str(GOLDEN),
        "--baseline",
        str(baseline),
        "--limit",
        "ratio_quantiles.0.99<=10",
        "--max-increase",
        "k3_mean=25%",
        "--bootstrap",
        "50",
    )
    assert doc["baseline"] is not None and doc["comparability"] is not None
    _validate("gate.json", "gate", str(SAMPLE_PAIRS), "--absolute-only", "--bootstrap", "20")


def test_timeline_output_validates(write):
    # two sequences at each of 3 steps, q = 0.5 and p = 0.4 or 0.6
    rows = [(s * 10 + i, pos, 0.5, 0.4 if i else 0.6) for s in range(3) for i in range(2) for pos in range(2)]
    path = write(pairs(rows, step=[r[0] // 10 for r in rows]))
    doc = _validate("timeline.json", "timeline", str(path))
    assert doc["steps"] == 3 and not math.isnan(doc["rows"][0]["k3_mean"])
