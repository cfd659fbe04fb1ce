"""Messages of import that once sent the user the wrong way, each now naming the actual cause and the fix."""

from __future__ import annotations

from tests.helpers import cli
from tests.importers.layouts import prime_record, write_prime_step
from tests.importers.test_import_hostile import jsonl
from tests.test_errors import error_line


def _import(fmt, src, tmp_path) -> str:
    return error_line(cli("import", fmt, str(src), "--out", str(tmp_path / "out")))


def test_a_bad_token_id_is_named_at_its_index_in_the_record(tmp_path):
    # the mask keeps indices 1 and 2; 'x' is token_ids[2] (once reported as index 1, its place among the kept)
    path = jsonl(
        tmp_path,
        '{"token_ids": [0, 5, "x"], "sampler_logprobs": [-0.5, -1, -1], "trainer_logprobs": [-0.4, -1, -1], '
        '"mask": [0, 1, 1]}\n',
    )
    assert _import("jsonl", path, tmp_path).endswith("token ids must be integers, got 'x' at index 2)")


def test_a_null_field_is_not_called_missing(tmp_path):
    # trainer_logprobs is there, but null: once "missing field(s) trainer_logprobs" beside a list that named it
    path = jsonl(tmp_path, '{"token_ids": [5], "sampler_logprobs": [-0.5], "trainer_logprobs": null}\n')
    assert _import("jsonl", path, tmp_path) == (
        "error: d.jsonl:1: null field(s) trainer_logprobs (the record's fields with a value: sampler_logprobs, "
        "token_ids)"
    )


def test_prime_rl_steps_without_stable_are_named(tmp_path):
    # once "no prime-rl files found": the files are there, the trainer had not finished writing the step
    rec = prime_record([1], [5], [-0.5], [-0.4], 1.0, 1.0, step=3, rank=0, idx=0)
    write_prime_step(tmp_path / "src", 3, 0, [rec], stable=False)
    line = _import("prime-rl", tmp_path / "src", tmp_path)
    assert "every step folder with token exports lacks its STABLE marker (step_3)" in line
    assert "import once the trainer has finished a step" in line
    assert not (tmp_path / "out").exists()
