"""Token ids an import writes: >= 0, or -1 for a token whose id was not recorded. Any other negative id is
refused with the importer's one-line error naming the record (it once imported as token -7 and was read as such
by every command): the check is the readers' own (``schema.first_refused``), which every importer's records pass."""

from __future__ import annotations

from tests.importers.layouts import import_cli, import_error, imported_tokens, jsonl_file, parquet_file

RULE = "token ids are >= 0; -1 marks a token whose id was not recorded"
KEPT = "(its index among the sequence's kept tokens, not in the record's lists)"


def test_a_jsonl_record_with_a_negative_token_id_is_refused_naming_the_record(tmp_path):
    src = jsonl_file(
        tmp_path,
        '{"token_ids": [5, 6], "sampler_logprobs": [-0.5, -1.0], "trainer_logprobs": [-0.4, -1.1]}\n'
        '{"token_ids": [5, -7], "sampler_logprobs": [-0.5, -1.0], "trainer_logprobs": [-0.4, -1.1]}\n',
    )
    assert import_error("jsonl", src, tmp_path) == (
        f"error: {src.name}:2: token_id -7 is negative ({RULE}) at position 1 {KEPT}"
    )


def test_a_parquet_dump_with_a_negative_token_id_is_refused_naming_the_record(tmp_path):
    cols = {
        "token_ids": [[5, 6], [-3, 4]],
        "sampler_logprobs": [[-0.5, -1.0]] * 2,
        "trainer_logprobs": [[-0.4, -1.1]] * 2,
    }
    src = parquet_file(tmp_path, cols)
    assert import_error("parquet", src, tmp_path) == (
        f"error: {src.name} (record 1): token_id -3 is negative ({RULE}) at position 0 {KEPT}"
    )


def test_minus_one_imports_as_a_token_whose_id_was_not_recorded(tmp_path):
    src = jsonl_file(
        tmp_path, '{"token_ids": [5, -1], "sampler_logprobs": [-0.5, -1.0], "trainer_logprobs": [-0.4, -1.1]}\n'
    )
    r = import_cli("jsonl", src, tmp_path / "out")
    assert r.returncode == 0, r.stderr
    assert imported_tokens(tmp_path / "out")["token_id"] == [5, -1]
