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
from typing import Literal

import jsonschema
import numpy as np
import pytest

from mismatchscope.documents import flatten, from_json, json_schema, optional, to_json
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


@dataclass(frozen=True)
class _Row:
    step: int
    values: dict[str, float | None] = field(metadata=flatten("series -> value"))


@dataclass(frozen=True)
class _Up:
    kind: Literal["up"]
    by: float


@dataclass(frozen=True)
class _Down:
    kind: Literal["down"]
    by: float


def test_a_flattened_mapping_writes_its_entries_beside_the_fixed_keys():
    row = _Row(3, {"tv_token_mean": 0.25, "route_flip_rate": None})
    assert to_json(row) == {"step": 3, "tv_token_mean": 0.25, "route_flip_rate": None}
    schema = json_schema(_Row, "t", "d")
    assert schema["required"] == ["schema_version", "step"]
    assert schema["additionalProperties"] == {
        "anyOf": [{"anyOf": [{"type": "number"}, {"enum": ["inf", "-inf"]}]}, {"type": "null"}]
    }
    assert from_json(_Row, to_json(row)) == row


def test_from_json_reads_back_exactly_or_refuses():
    assert from_json(_Up | _Down, {"kind": "down", "by": 2}) == _Down("down", 2)  # the member whose literal fits
    assert from_json(list[_Row], [{"step": 1}]) == [_Row(1, {})]
    # what documents.jsonable writes as numbers: numpy scalars, tuples
    assert from_json(list[_Up], ({"kind": "up", "by": np.float32(0.5)},)) == [_Up("up", 0.5)]
    for bad in (
        {"kind": "down", "by": 2, "extra": 1},  # a key the type does not declare
        {"by": 2, "kind": "down"},  # another order: the document would not be byte-identical
        {"kind": "sideways", "by": 2},
        {"kind": "up", "by": "2"},
        {"kind": "up"},
    ):
        with pytest.raises(TypeError):
            from_json(_Up | _Down, bad)


def test_the_committed_schemas_and_metric_table_are_current():
    generator = runpy.run_path(str(REPO / "docs" / "generate_schemas.py"))
    assert generator["main"](["--check"]) == 0, "run python docs/generate_schemas.py"


@pytest.mark.parametrize("path", [SAMPLE_PAIRS, GOLDEN], ids=["plain", "probe-run"])
def test_report_output_validates(path):
    doc = _validate("report.json", "report", str(path), "--worst", "2", "--worst-traces")
    assert len(doc["worst"]) == 2


@pytest.mark.parametrize("path", [SAMPLE_PAIRS, GOLDEN], ids=["ids", "probe-run-text-and-top-k"])
def test_view_output_validates(path, tmp_path):
    doc = _validate("view.json", "view", str(path), "--html", str(tmp_path / "v.html"), "--worst", "3")
    assert len(doc["sequences"]) == 3 and (doc["text"]["tokenizer"] is None) == (path == SAMPLE_PAIRS)


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


# -- certify, compare-masks --readings, import, probe ----------------------------------------------------------------


def test_certify_output_validates(tmp_path):
    from tests.certify.runs import LP, flip_low_bit, make_run

    equal = _validate("certify.json", "certify", str(make_run(tmp_path / "equal")))
    assert equal["certified"] is True and equal["pairings"][0]["earliest_position"] is None
    # one token 1 ULP apart, and a prefill column: the differing pairing fills the histogram and first differences
    run = make_run(tmp_path / "differ", sampler=flip_low_bit(LP, 6), prefill=LP)
    doc = _validate("certify.json", "certify", str(run), "--show", "3")
    differs = next(p for p in doc["pairings"] if not p["equal"])
    assert differs["ulp_histogram"] == [{"ulp": "1", "tokens": 1}] and len(differs["first_differences"]) == 1
    assert doc["verdict"] == "not certified"


def test_certify_of_a_moe_run_validates(tmp_path):
    doc = _validate("certify.json", "certify", str(write_run(tmp_path / "run")))
    assert doc["routes"]["moe_layers"]


@pytest.mark.parametrize("rule", ["dppo-kl", "icepop@mismatchscope,slime,areal", "k3-seq@mismatchscope,areal"])
def test_compare_masks_readings_output_validates(rule):
    doc = _validate("compare-masks-readings.json", "compare-masks", str(GOLDEN), "--readings", rule)
    assert all("differs_from_first" in r for r in doc["readings"][1:]) and "first_only" not in doc["readings"][0]


def test_import_output_validates(tmp_path):
    (tmp_path / "d.jsonl").write_text(
        '{"token_ids": [5, 6], "sampler_logprobs": [-0.5, -1], "trainer_logprobs": [-0.4, -1]}\n'
    )
    doc = _validate("import.json", "import", "jsonl", str(tmp_path / "d.jsonl"), "--out", str(tmp_path / "out"))
    assert doc["tokens_written"] == 2 and doc["routes"] is None


def test_import_with_routes_output_validates(tmp_path):
    from tests.importers.test_routes import CONFIG, sglang, write_tokens

    write_tokens(tmp_path / "tokens.jsonl")
    (tmp_path / "config.json").write_text(json.dumps(CONFIG))
    (tmp_path / "routes.jsonl").write_text("".join(json.dumps(sglang(s)) + "\n" for s in (5, 9)))
    doc = _validate(
        "import.json", "import", "jsonl", str(tmp_path / "tokens.jsonl"), "--out", str(tmp_path / "out"),
        "--routes", str(tmp_path / "routes.jsonl"), "--routes-format", "sglang", "--routes-config", str(tmp_path / "config.json"),
    )  # fmt: skip
    assert doc["routes"]["sequences"] == 2


def test_probe_output_validates(capsys):
    # what probe and rescore print after writing a run, here for the golden probe run (no engine started)
    from mismatchscope.cli.probe import _parsed_rules, _show

    _show(GOLDEN, _parsed_rules(None), "json")
    doc = json.loads(capsys.readouterr().out)
    schema = json.loads((SCHEMAS / "probe.json").read_text())
    jsonschema.validate(doc, schema, cls=jsonschema.Draft202012Validator)
    assert doc["schema_version"] == 1 and "schema_version" not in doc["report"]
