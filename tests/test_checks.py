"""The shared test of what a JSON object file is, and the readers that word its refusal their own way."""

from __future__ import annotations

import json

import pytest

from mismatchscope import rundir
from mismatchscope.checks import json_object
from mismatchscope.errors import NotAJsonObjectError, UsageError
from mismatchscope.importers.routes_model import RoutesModel


@pytest.mark.parametrize(("text", "kind"), [("[1, 2]", "list"), ('"x"', "str"), ("3", "int"), ("null", "NoneType")])
def test_json_that_is_not_an_object_names_what_it_is(text, kind):
    with pytest.raises(NotAJsonObjectError) as e:
        json_object(text)
    assert e.value.value_type == kind
    assert isinstance(e.value, ValueError)  # callers that catch ValueError keep catching it


def test_an_object_comes_back_and_bad_json_raises_as_json_does():
    assert json_object(b'{"a": 1}') == {"a": 1}
    with pytest.raises(json.JSONDecodeError):
        json_object("{")


def test_a_run_file_that_is_not_an_object_reads_as_absent(tmp_path):
    (tmp_path / "manifest.json").write_text("[]")
    assert rundir.read_json(tmp_path / "manifest.json") is None
    assert rundir.read_json(tmp_path / "missing.json") is None
    (tmp_path / "ok.json").write_text('{"status": "complete"}')
    assert rundir.read_json(tmp_path / "ok.json") == {"status": "complete"}


def test_a_routes_config_that_is_not_an_object_is_refused_in_one_line(tmp_path):
    (tmp_path / "config.json").write_text("[1]")
    with pytest.raises(UsageError) as e:
        RoutesModel.load(tmp_path)
    assert str(e.value) == f"--routes-config {tmp_path / 'config.json'}: holds a list, not a config object"


def test_positive_logprobs_flags_rows_all_finite_with_one_side_above_the_tolerance():
    import numpy as np

    from mismatchscope.schema import POSITIVE_LOGPROB_TOLERANCE, positive_logprobs

    tol = POSITIVE_LOGPROB_TOLERANCE
    lq = np.array([0.5, np.nan, -1.0, tol, 2 * tol, -np.inf])
    lp = np.array([0.0, 0.5, -2.0, 0.0, -1.0, 3.0])
    # row 0: 0.5 > tol, both finite -> flagged; row 1: a NaN side -> dropped by readers, not flagged;
    # row 2: both <= 0; row 3: exactly the tolerance is allowed; row 4: 2 tol is beyond it; row 5: -inf side
    assert positive_logprobs(lq, lp).tolist() == [True, False, False, False, True, False]
    assert positive_logprobs(lq).tolist() == [True, False, False, False, True, False]
