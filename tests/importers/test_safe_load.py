"""The safe loader of torch files: a damaged or plain pickle is named as such, Python objects still ask for trust, and the structure check runs nothing from the file."""

from __future__ import annotations

import io
import pickle

import pytest

from tests.importers.layouts import import_cli, imported_tokens, slime_dump, slime_torch_sample
from tests.inputs import error_line


def _legacy(obj) -> bytes:
    import torch

    buf = io.BytesIO()
    torch.save(obj, buf, _use_new_zipfile_serialization=False)
    return buf.getvalue()


@pytest.mark.parametrize("cut", [0.3, 0.5, 0.8, 0.95])
def test_a_truncated_legacy_slime_file_is_corrupt_not_untrusted(tmp_path, cut):
    """With a datetime (a global the safe loader refuses) the safe loader blamed weights_only at every cut;
    the whole multi-pickle stream is now checked, so each cut is corrupt, with or without --trust-pickle."""
    pytest.importorskip("torch")
    import datetime

    data = _legacy(
        {"format_version": 2, "rollout_id": 0, "samples": [slime_torch_sample()], "when": datetime.date(2020, 1, 1)}
    )
    dump = slime_dump(tmp_path, data[: int(len(data) * cut)])
    for trust in ((), ("--trust-pickle",)):
        line = error_line(import_cli("slime", dump, tmp_path / "out", *trust), after_work=True)
        # "(truncated or damaged)" from the check; cut before the datetime, the safe loader's own reason (EOFError...).
        # torch's legacy storage keys vary in length between saves, so where a cut lands varies too.
        assert line.startswith("error: train_data/0_0.pt: corrupt: not a readable torch file or pickle ("), line


@pytest.mark.parametrize("data", [b"I1\n.", pickle.dumps({"format_version": 2, "samples": [{"a": 1}]})])
def test_a_plain_pickle_is_not_a_torch_file(tmp_path, data):
    """Sound pickles, but not torch.save files: no --trust-pickle advice (with it, torch said 'Invalid magic number')."""
    pytest.importorskip("torch")
    dump = slime_dump(tmp_path, data)
    for trust in ((), ("--trust-pickle",)):
        assert error_line(import_cli("slime", dump, tmp_path / "out", *trust), after_work=True) == (
            "error: train_data/0_0.pt: corrupt: not a torch.save file (a plain pickle, without torch.save's header)"
        )


def test_a_sound_legacy_file_with_python_objects_still_asks_for_trust(tmp_path):
    pytest.importorskip("torch")
    import datetime

    data = _legacy(
        {"format_version": 2, "rollout_id": 0, "samples": [slime_torch_sample()], "when": datetime.date(2020, 1, 1)}
    )
    dump = slime_dump(tmp_path, data)
    assert error_line(import_cli("slime", dump, tmp_path / "out"), after_work=True) == (
        "error: train_data/0_0.pt: this train dump holds Python objects that only a full unpickle can rebuild; "
        "unpickling runs code stored in the file, so it is refused by default (pass --trust-pickle if you produced "
        "these files yourself)"
    )
    r = import_cli("slime", dump, tmp_path / "out2", "--trust-pickle")
    assert r.returncode == 0, r.stderr
    assert imported_tokens(tmp_path / "out2")["token_id"] == [3, 4]


def test_the_structure_check_runs_nothing_from_the_file(tmp_path):
    """A pickle whose load would call os.system: the check parses it, with every global an inert stub."""
    pytest.importorskip("torch")
    from mismatchscope.importers.safe_load import torch_file_problem as _torch_file_problem

    marker = tmp_path / "ran"

    class Boom:
        def __reduce__(self):
            import os

            return (os.system, (f"touch {marker}",))

    path = tmp_path / "boom.pt"
    path.write_bytes(pickle.dumps(Boom()))
    assert _torch_file_problem(path) == "not a torch.save file (a plain pickle, without torch.save's header)"
    assert not marker.exists()
