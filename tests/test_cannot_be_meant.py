"""Inputs that cannot be meant are refused, or written so every reader accepts them.

Recorder ``meta`` with NaN or infinity once wrote a manifest no strict JSON reader accepts; a control character in
a run's path once made the JUnit XML of ``gate`` and ``certify`` ill-formed; a run that records policy lag (an
asynchronous trainer's import, a rescore of one, a probe scored with other weights) was once CERTIFIED when its
bytes matched, though byte-equal pairs of two policies say nothing about one stack.
"""

from __future__ import annotations

import json
import math
import shutil
import xml.etree.ElementTree as ET

import numpy as np
import pytest

from mismatchscope import Recorder
from mismatchscope.errors import MismatchscopeError, UsageError
from tests.certify.test_run import make_run
from tests.gate.test_run import _validate_junit
from tests.helpers import REPO, cli

GOLDEN = REPO / "tests" / "data" / "golden-probe"


@pytest.mark.parametrize(
    "meta, says",
    [
        ({"lr": math.nan}, "meta['lr'] is nan, which strict JSON cannot hold"),
        ({"sched": {"warmup": [1, -math.inf]}}, "meta['sched']['warmup'][1] is -inf, which strict JSON cannot hold"),
        ({"lr": np.float32("inf")}, "meta['lr'] is inf, which strict JSON cannot hold"),
        ({"seen": {1, 2}}, "meta['seen'] is a set, not a JSON value"),
        ({3: "x"}, "meta has the key 3; JSON keys are strings"),
    ],
)
def test_recorder_meta_strict_json_only(tmp_path, meta, says):
    with pytest.raises(UsageError, match=re_escape(says)):
        Recorder(tmp_path / "run", meta=meta)
    assert not (tmp_path / "run").exists()  # refused before the run directory is made


def test_recorder_meta_numpy_scalars_are_written_as_numbers(tmp_path):
    with Recorder(tmp_path / "run", meta={"lr": np.float32(0.5), "steps": (np.int64(3),)}) as rec:
        rec.add(0, [[-0.5]], [[-0.4]])
    text = (tmp_path / "run" / "manifest.json").read_text()
    assert json.loads(text, parse_constant=_no_constants)["meta"] == {"lr": 0.5, "steps": [3]}


def _no_constants(name: str):
    raise AssertionError(f"{name} in a manifest")


def re_escape(text: str) -> str:
    import re

    return re.escape(text)


# -- control characters in JUnit XML ---------------------------------------------------------------------------------


def _parse(path) -> ET.Element:
    _validate_junit(path)  # an XML parser, and tests/data/junit.xsd where xmllint exists
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


# -- policy lag under certify --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "manifest",
    [
        {"source": {"format": "prime-rl", "semantics": {"policy_lag": True, "policy_lag_note": "async trainer"}}},
        {"config": {"imported": {"format": "prime-rl", "semantics": {"policy_lag": True}}}},
        {"config": {"semantics": {"policy_lag": True, "policy_lag_note": "a later checkpoint"}}},
    ],
    ids=["import", "rescored-import", "probe"],
)
def test_a_run_recording_policy_lag_is_not_certified(tmp_path, manifest):
    # byte-equal pairs (sampler = trainer = LP): the bytes pass, the policy check fails with the run's own reason
    run = make_run(tmp_path / "run", manifest=manifest)
    r = cli("certify", str(run), "--format", "json")
    assert r.returncode == 1, r.stderr
    doc = json.loads(r.stdout)
    assert doc["certified"] is False and doc["pairings"][0]["equal"] is True
    assert doc["policy_version"]["passed"] is False
    assert doc["reasons"][-1].startswith("policy version: the run records policy lag: ")


def test_a_synchronous_import_still_certifies(tmp_path):
    # slime's semantics describe policy lag in words (a string, not true): nothing to refuse
    run = make_run(tmp_path / "run", manifest={"source": {"format": "slime", "semantics": {"policy_lag": "none"}}})
    assert cli("certify", str(run)).returncode == 0


def test_recorder_refuses_fractional_token_ids_and_unknown_columns(tmp_path):
    # a cast once wrote token 1.5 as token 1; an unknown keyword once surfaced as a TypeError of an inner function
    with Recorder(tmp_path / "run") as rec:
        with pytest.raises(
            MismatchscopeError, match=r"token_ids must hold integers, got 1\.5 among the recorded tokens"
        ):
            rec.add(0, [[-0.5, -1.0]], [[-0.4, -1.0]], token_ids=np.array([[1.5, 2.0]]))
        with pytest.raises(UsageError, match=r"add\(\) got 'rewardz', which is not a column it records"):
            rec.add(0, [[-0.5]], [[-0.4]], rewardz=[1.0])
        assert rec.add(0, [[-0.5, -1.0]], [[-0.4, -1.0]], token_ids=np.array([[1.0, 2.0]])).columns[
            "token_id"
        ].tolist() == [1, 2]


@pytest.mark.parametrize(
    "kwargs, says",
    [
        # window 0 once meant "every step" and 8 "never an alert" (the detectors need 16 steps), both silently
        ({"window": 8}, "window must be an integer of at least 16 steps, got 8"),
        ({"min_rise": math.nan}, "min_rise must be a finite number >= 0 (0.25: +25%), got nan"),
        ({"rules": "icepop"}, "rules must be a list of rule names, got the string 'icepop'"),  # once "unknown rule 'i'"
        ({"recorder": "runs/x"}, "recorder must be a Recorder, got str"),  # once an AttributeError at the first add
    ],
)
def test_monitor_options_that_cannot_be_meant(kwargs, says):
    from mismatchscope.live.monitor import Monitor

    with pytest.raises(UsageError, match=re_escape(says)):
        Monitor(**kwargs)
