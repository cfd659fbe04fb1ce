"""The rows and routes of the stacks' own dumps, keyed and skipped as each stack writes them.

Every dump here was written by the stack's own code (``tests/data/stack_dumps/build.py``
says which functions); the sequences and their numbers are those of
``test_stack_pickle.py``: three sequences of tiny-qwen3-moe (prompt +
completion 5 + 6, 3 + 5, 6 + 3 tokens: 11, 8 and 9 tokens), its top-2 (or
top-1) experts per layer in ``reference.json``. Routes cover every token but
the last, which is never fed forward: 10, 7 and 8 rows.
"""

from __future__ import annotations

import io
import json
import pickle
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from mismatchscope.errors import ImportFormatError
from mismatchscope.importers import import_run
from mismatchscope.importers.routes import RoutesOptions
from tests.helpers import cli

pytest.importorskip("torch")

DUMPS = Path(__file__).resolve().parents[1] / "data" / "stack_dumps"
REF = json.loads((DUMPS / "reference.json").read_text())
MOE = DUMPS.parents[2] / "sample_data" / "tiny-qwen3-moe"
LENGTHS = [11, 8, 9]


def _routes(out: Path) -> list[dict]:
    t = pq.read_table(out / "routes").to_pylist()
    return sorted(t, key=lambda r: (r["sequence_id"], r["input_position"]))


def test_skyrl_routes_skip_the_rows_that_train_no_token(tmp_path):
    """The dump holds 6 rows: the 3 sequences, the truncated sample overlong filtering zeroed, 2 rows of SkyRL's
    padding. Routes: 10 + 7 + 8 = 25 rows of the 3 sequences (each row's own top-2), the truncated row's routes
    skipped with it, the padding (copies of row 0) not read; no missing capture."""
    src = DUMPS / "skyrl"
    result = import_run("skyrl", src, tmp_path / "out", route_options=RoutesOptions(src, "skyrl", MOE))
    assert result.rows_skipped == {"padding": 2, "loss_mask_all_zero": 1} and result.bad_records_skipped == 0
    r = result.routes
    assert r is not None
    assert (r["sequences"], r["rows"], r["missing_captures"], r["routes_of_skipped_sequences"]) == (3, 25, 0, 1)
    rows = _routes(tmp_path / "out")
    for sid in range(3):
        got = [row["sampler_experts"] for row in rows if row["sequence_id"] == sid]
        assert got == REF[sid]["routes"][: LENGTHS[sid] - 1]


def test_skyrl_skip_bad_keys_routes_by_batch_row(tmp_path):
    """Row 1's engine logprob is +0.5: a bad record, skipped with --skip-bad. Tokens of rows 0 and 2 become
    sequences 0 and 1, and so must their routes: numbered per batch row, sequence 1 once got row 1's routes
    (and the import stopped on 7 route rows for row 2's 9 tokens). 10 + 8 = 18 rows, row 1's skipped."""
    src = DUMPS / "skyrl_skip_bad"
    result = import_run("skyrl", src, tmp_path / "out", skip_bad=True, route_options=RoutesOptions(src, "skyrl", MOE))
    assert (result.sequences, result.bad_records_skipped) == (2, 1)
    r = result.routes
    assert r is not None and (r["sequences"], r["rows"], r["routes_of_skipped_sequences"]) == (2, 18, 1)
    rows = _routes(tmp_path / "out")
    assert [row["sampler_experts"] for row in rows if row["sequence_id"] == 0] == REF[0]["routes"][:10]
    assert [row["sampler_experts"] for row in rows if row["sequence_id"] == 1] == REF[2]["routes"][:8]


def test_skyrl_top1_rows_the_engine_did_not_capture_are_missing(tmp_path):
    """Top-1 routes; the engine captured 4 of sequence 0's rows, 3 of sequence 1's and all 8 of sequence 2's.
    router_padding_mask marks the rest, where SkyRL wrote its dummy route: expert 0, a real top-1 choice to
    anyone reading the ids. Of the 10 + 7 + 8 rows kept, 6 + 4 + 0 = 10 are uncaptured: 10 rows x 2 MoE
    layers = 20 missing captures, stored as null, not expert 0; the captured rows hold the model's own top-1."""
    src = DUMPS / "skyrl_top1"
    result = import_run("skyrl", src, tmp_path / "out", route_options=RoutesOptions(src, "skyrl", src / "config.json"))
    r = result.routes
    assert r is not None and (r["rows"], r["moe_entries"], r["missing_captures"]) == (25, 50, 20)
    rows = _routes(tmp_path / "out")
    for sid, captured in enumerate([4, 3, 8]):
        got = [row["sampler_experts"] for row in rows if row["sequence_id"] == sid]
        assert got[:captured] == REF[sid]["routes_top1"][:captured]
        assert got[captured:] == [[None, None]] * (LENGTHS[sid] - 1 - captured)
    assert any("20 of 50 MoE layer routes" in w for w in result.warnings)


def _skyrl_with(tmp_path: Path, change) -> Path:
    """The SkyRL dump with one field changed, written back as SkyRL's batch state (a plain dict of it)."""
    from mismatchscope.importers.stack_pickle import load_stack_pickle

    state = dict(load_stack_pickle(next((DUMPS / "skyrl").rglob("*.pkl")), "x", False, "SkyRL"))
    fields = dict(state["batch_dict"])
    change(fields)
    state["batch_dict"] = fields
    out = tmp_path / "dump" / "dumped_data"
    out.mkdir(parents=True)
    (out / "global_step_3_training_input.pkl").write_bytes(pickle.dumps(state))
    return tmp_path / "dump"


def _numpy_field(a: np.ndarray) -> dict:
    return {"format": "numpy", "data": a.tobytes(), "shape": a.shape, "dtype": str(a.dtype)}


def test_a_skyrl_loss_mask_of_2_is_refused_and_skipped_not_kept_whole(tmp_path):
    """Sequence 0's loss mask [1, 2, 1, 1, 1, 1]: 2 has no keep/drop reading. Read with != 0 it was imported
    whole; it is a bad record, and --skip-bad skips it (2 sequences, 7 tokens left)."""

    def two(fields):
        field = fields["loss_mask"]
        mask = np.frombuffer(field["data"], dtype=field["dtype"]).reshape(field["shape"]).copy()
        row = mask[0]
        row[np.flatnonzero(row)[1]] = 2
        fields["loss_mask"] = _numpy_field(mask)

    src = _skyrl_with(tmp_path, two)
    with pytest.raises(ImportFormatError, match=r"\(record 0\): loss_mask must hold 0/1 or true/false, got 2"):
        import_run("skyrl", src, tmp_path / "out")
    result = import_run("skyrl", src, tmp_path / "out2", skip_bad=True)
    assert (result.sequences, result.tokens_written, result.bad_records_skipped) == (2, 7, 1)


def test_a_pad_size_that_does_not_fit_the_batch_is_refused(tmp_path):
    from mismatchscope.importers.stack_pickle import load_stack_pickle

    state = dict(load_stack_pickle(next((DUMPS / "skyrl").rglob("*.pkl")), "x", False, "SkyRL"))
    state["metadata"] = {**state["metadata"], "pad_size": 9}
    (tmp_path / "dumped_data").mkdir()
    (tmp_path / "dumped_data" / "global_step_1_training_input.pkl").write_bytes(pickle.dumps(state))
    with pytest.raises(ImportFormatError, match="metadata pad_size 9 does not fit a batch of 6 rows"):
        import_run("skyrl", tmp_path, tmp_path / "out")


FILES = {
    "skyrl": next((DUMPS / "skyrl").rglob("*.pkl")),
    "verl": next((DUMPS / "verl").rglob("gen_batch.dp")),
    "roll": next((DUMPS / "roll").rglob("step_*.pkl")),
}


@pytest.mark.parametrize(
    "fmt, given", [("roll", "verl"), ("verl", "roll"), ("skyrl", "verl"), ("verl", "skyrl"), ("skyrl", "roll")]
)
@pytest.mark.parametrize("what", ["file", "folder"])
def test_a_dump_of_another_stack_is_named_as_such(fmt, given, what, tmp_path):
    """A verl dump given as ROLL once read as a ROLL batch without infer_logprobs; ROLL's given as verl stopped
    on consolidation. Both, as a file or as its folder, now say which stack wrote them."""
    src = FILES[given] if what == "file" else DUMPS / given
    r = cli("import", fmt, str(src), "--out", str(tmp_path / "out"))
    assert r.returncode == 2, r.stderr
    lines = [line for line in r.stderr.splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and "Traceback" not in r.stderr
    assert f"mismatchscope import {given}" in lines[0] and f"{given} dump" in lines[0].lower()
    assert not (tmp_path / "out").exists()


def test_trust_pickle_without_tensordict_is_one_line(tmp_path, monkeypatch):
    """A ROLL dump whose tensors name a tensordict class the safe loader does not know: refused by default;
    with --trust-pickle, where tensordict is not installed, one line naming it (once a traceback, exit 3)."""
    import sys
    import types

    import torch

    from tests.importers.test_stack_pickle import _dataproto_module

    fake = types.ModuleType("tensordict")

    class Other:  # a tensordict class the allow-list has no stand-in for
        def __init__(self):
            self.t = torch.zeros(2)

    Other.__module__, Other.__qualname__ = "tensordict", "Other"
    fake.Other = Other  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "tensordict", fake)
    buf = io.BytesIO()
    torch.save(Other(), buf)
    cls = _dataproto_module("roll.distributed.scheduler.protocol", monkeypatch)
    (tmp_path / "train").mkdir()
    (tmp_path / "train" / "step_000001.pkl").write_bytes(
        pickle.dumps(cls((io.BytesIO(buf.getvalue()), {}, None, {})), protocol=5)
    )
    monkeypatch.delitem(sys.modules, "tensordict")
    r = cli("import", "roll", str(tmp_path), "--out", str(tmp_path / "o1"))
    assert r.returncode == 2 and "--trust-pickle" in r.stderr
    r = cli("import", "roll", str(tmp_path), "--out", str(tmp_path / "o2"), "--trust-pickle")
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    (line,) = [x for x in r.stderr.splitlines() if x.startswith("error:")]
    assert "needs tensordict installed" in line and "pip install tensordict" in line
    assert not (tmp_path / "o2").exists()


def test_import_help_names_every_routes_encoding_and_pickled_stack():
    from mismatchscope.importers import PICKLED_FORMATS, ROUTE_ENCODINGS

    r = cli("import", "--help", env={"COLUMNS": "400"})
    lines = r.stdout.splitlines()
    encodings = next(line for line in lines if "--routes-format" in line and "ENCODING" in line)
    pickle_help = next(line for line in lines if "--trust-pickle" in line)
    assert all(name in encodings for name in ROUTE_ENCODINGS) and "skyrl" in encodings
    assert all(name in pickle_help for name in PICKLED_FORMATS)
