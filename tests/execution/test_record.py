"""The record as a manifest holds it: every field written, its schema, read back from a key-sorted file, and a
record this version cannot read said so rather than raised."""

from __future__ import annotations

import json

import jsonschema
import pytest

from mismatchscope import rundir
from mismatchscope.execution.read import read_run
from mismatchscope.execution.record import MANIFEST_KEY, read_record, record_schema, to_record
from tests.execution.test_compare import run
from tests.helpers import REPO

SCHEMA = REPO / "docs" / "schemas" / "provenance-record.json"


def validate(record: dict) -> None:
    schema = json.loads(SCHEMA.read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    jsonschema.validate(record, schema, cls=jsonschema.Draft202012Validator)


def test_a_record_validates_and_reads_back_from_a_key_sorted_manifest(tmp_path):
    prov = run()
    record = to_record(prov)
    assert record_schema() == json.loads(SCHEMA.read_text())
    validate(record)
    rundir.write_manifest(tmp_path, {"status": "complete", MANIFEST_KEY: record})  # written key-sorted
    (tmp_path / "tokens").mkdir()
    assert list(json.loads((tmp_path / "manifest.json").read_text())[MANIFEST_KEY]) == ["sampler", "trainer", "version"]
    back = read_run(tmp_path)
    assert back.recorded and back.note is None and back.provenance == prov


def test_a_field_the_record_does_not_declare_is_refused_by_the_schema_and_the_reader():
    record = to_record(run())
    record["sampler"]["used"]["flash_magic"] = True
    with pytest.raises(jsonschema.ValidationError):
        validate(record)
    with pytest.raises(TypeError):
        read_record(record)


def test_a_record_this_version_cannot_read_is_read_as_its_configuration_says(tmp_path):
    (tmp_path / "tokens").mkdir()
    newer = {**to_record(run()), "version": 2, "sampler": {"new_layout": True}}
    rundir.write_manifest(tmp_path, {"status": "complete", MANIFEST_KEY: newer})
    r = read_run(tmp_path)
    assert not r.recorded and r.note is not None and "layout 2, newer than this version reads (1)" in r.note
    assert r.provenance.sampler.engine is None  # nothing guessed
    rundir.write_manifest(tmp_path, {"status": "complete", MANIFEST_KEY: "edited by hand"})
    r = read_run(tmp_path)
    assert not r.recorded and r.note is not None and r.note.startswith("its record is not readable")
