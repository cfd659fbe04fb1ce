"""Messages of import that once sent the user the wrong way, each now naming the actual cause and the fix."""

from __future__ import annotations

from tests.helpers import cli, error_line
from tests.importers.layouts import prime_record, write_prime_step
from tests.importers.test_import_hostile import jsonl


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


def _routes_import(tmp_path, records, fmt):
    import json

    from tests.importers.test_import_routes import CONFIG, write_tokens

    write_tokens(tmp_path / "tokens.jsonl")
    (tmp_path / "config.json").write_text(json.dumps(CONFIG))
    (tmp_path / "routes.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    return error_line(
        cli(
            "import",
            "jsonl",
            str(tmp_path / "tokens.jsonl"),
            "--out",
            str(tmp_path / "out"),
            "--routes",
            str(tmp_path / "routes.jsonl"),
            "--routes-format",
            fmt,
            "--routes-config",
            str(tmp_path / "config.json"),
        )
    )


def test_routes_of_another_encoding_point_at_the_format_not_at_pickles(tmp_path):
    from tests.importers.test_import_routes import sglang

    # sglang's raw int32 bytes read as vllm's .npy: numpy's reason once advised allow_pickle
    line = _routes_import(tmp_path, [sglang(5), sglang(9)], "vllm")
    assert "routed_experts is base64 but not of a .npy array, as --routes-format vllm reads it" in line
    assert "pickle" not in line and "check --routes-format" in line


def test_a_routes_record_without_its_sequence_id_says_so(tmp_path):
    from tests.importers.test_import_routes import sglang

    rec = sglang(5)
    del rec["sequence_id"]  # once "sequence_id is None, not an integer"
    line = _routes_import(tmp_path, [rec, sglang(9)], "sglang")
    assert "routes.jsonl:1: the record has no sequence_id: routes are matched to the imported sequences by it" in line


def test_trust_pickle_outside_slime_is_refused(tmp_path):
    # once accepted without a word on formats that hold no pickle, as if it had changed something
    path = jsonl(tmp_path, '{"token_ids": [5], "sampler_logprobs": [-0.5], "trainer_logprobs": [-0.4]}\n')
    r = cli("import", "jsonl", str(path), "--out", str(tmp_path / "out"), "--trust-pickle")
    assert error_line(r) == (
        "error: --trust-pickle applies to the pickled dumps of slime, skyrl, verl, roll; jsonl files hold no pickle "
        "(drop --trust-pickle)"
    )
