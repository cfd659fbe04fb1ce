"""Hostile dumps for ``import``: each is refused with one line naming the file, the record and the cause.

Every case here once crashed (exit 3), or was imported as numbers the dump
does not hold (a boolean read as 0/1, an id wrapped to a negative one, a
per-sequence number repeated as per-token logprobs). The good record has two
tokens, 5 and 6, with log q = -0.5, -1.0 and log p = -0.4, -1.1.
"""

from __future__ import annotations

import io
import pickle

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.helpers import cli, error_line

GOOD = '{"token_ids": [5, 6], "sampler_logprobs": [-0.5, -1.0], "trainer_logprobs": [-0.4, -1.1]'
GOOD_COLUMNS = {"token_ids": [[5, 6]], "sampler_logprobs": [[-0.5, -1.0]], "trainer_logprobs": [[-0.4, -1.1]]}


def _import(fmt: str, src, out, *args: str):
    return cli("import", fmt, str(src), "--out", str(out), *args)


def _tokens(out) -> dict:
    return pq.read_table(out / "tokens").to_pydict()


def jsonl(tmp_path, text: str | bytes, name: str = "d.jsonl"):
    path = tmp_path / name
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    return path


def parquet(tmp_path, columns: dict, name: str = "d.parquet", **options):
    path = tmp_path / name
    pq.write_table(pa.table(columns), path, **options)
    return path


# ---- JSON Lines that are not JSON Lines -----------------------------------------------------------


@pytest.mark.parametrize(
    "content, reason",
    [
        (
            (GOOD + "}\n").encode("utf-16"),
            "not UTF-8 text (it looks like UTF-16); JSON Lines are UTF-8, one object per line",
        ),
        ((GOOD + ', "note": "caf\xe9"}\n').encode("latin-1"), None),  # Latin-1: the offset is that of the \xe9
        ((GOOD + ', "meta": ' + "[" * 100_000 + "]" * 100_000 + "}\n").encode(), "malformed JSON (nested too deeply)"),
        (
            b'{\n  "token_ids": [\n    5\n  ]\n}\n',
            "not one JSON object per line (this looks like JSON spread over several "
            "lines: write each record on one line)",
        ),
        (
            ("[" + GOOD + "}]\n").encode(),
            "expected a JSON object, got a JSON list (JSON Lines hold one object per line)",
        ),
        (
            b"\x82\x9c\xfe\x00junk\n",
            "not UTF-8 text (byte 0x82 at offset 0); JSON Lines are UTF-8, one object per line",
        ),
    ],
)
def test_a_file_that_is_not_json_lines_says_why(tmp_path, content, reason):
    if reason is None:  # Latin-1: the first byte that is not UTF-8 is the \xe9 of "caf\xe9"
        offset = content.index(b"\xe9")
        reason = f"not UTF-8 text (byte 0xe9 at offset {offset}); JSON Lines are UTF-8, one object per line"
    path = jsonl(tmp_path, content)
    assert error_line(_import("jsonl", path, tmp_path / "out")) == f"error: d.jsonl:1: {reason}"


def test_a_bad_first_line_before_good_ones_is_reported_by_the_read(tmp_path):
    """The columns come from the first good record; the bad line is then reported with its number (or skipped)."""
    path = jsonl(tmp_path, '{"oops\n' + GOOD + "}\n")
    line = error_line(_import("jsonl", path, tmp_path / "out"))
    assert line.startswith("error: d.jsonl:1: malformed JSON ("), line
    r = _import("jsonl", path, tmp_path / "out2", "--skip-bad", "--format", "json")
    assert r.returncode == 0, r.stderr
    assert _tokens(tmp_path / "out2")["token_id"] == [5, 6]


# ---- integers the format cannot hold ---------------------------------------------------------------


@pytest.mark.parametrize(
    "field, value, bits",
    [
        ("sequence_id", 2**63, 64),
        ("step", 2**64 - 1, 64),
        ("rank", 2**31, 32),
        ("sample_index", -(2**31) - 1, 32),
    ],
)
def test_jsonl_per_sequence_integers_beyond_their_column(tmp_path, field, value, bits):
    """sequence_id 2^63 raised OverflowError (exit 3); rank 2^31 would have wrapped in the int32 column."""
    path = jsonl(tmp_path, GOOD + f', "{field}": {value}}}\n')
    assert error_line(_import("jsonl", path, tmp_path / "out")) == (
        f"error: d.jsonl:1: bad value ({field} {value} does not fit in a signed {bits}-bit integer)"
    )


@pytest.mark.parametrize(
    "ids, index, shown",
    [
        ([2**63, 2**64 - 1], 0, 2**63),  # numpy reads these as uint64, which int64 would wrap to negative ids
        ([5, 2**64 - 1], 1, 2**64 - 1),  # with a small one, as float64: the list's own value is named
    ],
)
def test_jsonl_token_ids_beyond_int64(tmp_path, ids, index, shown):
    path = jsonl(tmp_path, GOOD.replace("[5, 6]", str(ids)) + "}\n")
    assert error_line(_import("jsonl", path, tmp_path / "out")) == (
        f"error: d.jsonl:1: bad value (token ids must fit in a signed 64-bit integer, got {shown} at index {index})"
    )


@pytest.mark.parametrize(
    "column, values, message",
    [
        (
            "token_ids",
            pa.array([[2**64 - 1, 6]], pa.list_(pa.uint64())),
            f"integer columns must fit in a signed 64-bit integer, got {2**64 - 1} at index 0",
        ),
        (
            "sequence_id",
            pa.array([2**63], pa.uint64()),
            f"sequence_id must fit in a signed 64-bit integer, got {2**63} at index 0",
        ),
        ("rank", pa.array([2**40], pa.int64()), f"rank {2**40} does not fit in a signed 32-bit integer"),
    ],
)
def test_parquet_integers_beyond_their_column(tmp_path, column, values, message):
    path = parquet(tmp_path, {**GOOD_COLUMNS, column: values})
    assert (
        error_line(_import("parquet", path, tmp_path / "out"))
        == f"error: d.parquet: bad values in rows 0..0 ({message})"
    )


# ---- booleans are not numbers ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "record, message",
    [
        (
            '{"token_ids": [5, true], "sampler_logprobs": [-0.5, -1.0], "trainer_logprobs": [-0.4, -1.1]}',
            "token ids must be integers, got True at index 1",
        ),
        (
            '{"token_ids": [5, 6], "sampler_logprobs": [false, -1.0], "trainer_logprobs": [-0.4, -1.1]}',
            "sampler_logprobs must hold numbers, got False at index 0",
        ),
        (
            '{"token_ids": [5, 6], "sampler_logprobs": [-0.5, -1.0], "trainer_logprobs": [-0.4, -1.1], "advantages": [1.0, true]}',
            "advantages must hold numbers, got True at index 1",
        ),
        (
            '{"token_ids": [5, 6], "sampler_logprobs": [-0.5, -1.0], "trainer_logprobs": [-0.4, -1.1], "advantages": true}',
            "advantages is not a number: True",
        ),
        (
            '{"token_ids": [5, 6], "sampler_logprobs": [-0.5, -1.0], "trainer_logprobs": [-0.4, -1.1], "reward": "1"}',
            "reward is not a number: '1'",
        ),
    ],
)
def test_jsonl_booleans_are_refused(tmp_path, record, message):
    """true was imported as token 1, false as logprob 0.0."""
    path = jsonl(tmp_path, record + "\n")
    assert error_line(_import("jsonl", path, tmp_path / "out")) == f"error: d.jsonl:1: bad value ({message})"


@pytest.mark.parametrize(
    "column, values, want",
    [
        ("sampler_logprobs", [[False, False]], "a list of numbers, one per token"),
        ("token_ids", [[True, False]], "a list of integers, one per token"),
        ("advantages", [True], "a list of numbers, one per token, or one number per sequence"),
    ],
)
def test_parquet_booleans_are_refused(tmp_path, column, values, want):
    path = parquet(tmp_path, {**GOOD_COLUMNS, column: values})
    canonical = {"sampler_logprobs": "sampler_logprob", "token_ids": "token_id", "advantages": "advantage"}[column]
    kind = "list<element: bool>" if isinstance(values[0], list) else "bool"
    assert error_line(_import("parquet", path, tmp_path / "out")) == (
        f"error: d.parquet: column {column!r} ({canonical}) holds {kind}; it must hold {want} "
        "(booleans are not read as 0/1)"
    )


def test_a_boolean_mask_is_still_a_mask(tmp_path):
    """docs/import.md: 1 (or true) keeps the token. [true, false] keeps token 5 only, in both formats."""
    path = jsonl(tmp_path, GOOD + ', "mask": [true, false]}\n')
    assert _import("jsonl", path, tmp_path / "out").returncode == 0
    assert _tokens(tmp_path / "out")["token_id"] == [5]
    path = parquet(tmp_path, {**GOOD_COLUMNS, "mask": [[True, False]]})
    assert _import("parquet", path, tmp_path / "out2").returncode == 0
    assert _tokens(tmp_path / "out2")["token_id"] == [5]


# ---- shapes ----------------------------------------------------------------------------------------


def test_parquet_lists_of_lists_are_refused(tmp_path):
    path = parquet(tmp_path, {**GOOD_COLUMNS, "sampler_logprobs": [[[-0.5], [-1.0]]]})
    assert error_line(_import("parquet", path, tmp_path / "out")) == (
        "error: d.parquet: column 'sampler_logprobs' (sampler_logprob) holds list<element: list<element: double>>; "
        "it must hold a list of numbers, one per token"
    )


def test_parquet_fixed_size_lists_import_like_lists(tmp_path):
    path = parquet(
        tmp_path,
        {
            "token_ids": pa.array([[5, 6]], pa.list_(pa.int64(), 2)),
            "sampler_logprobs": pa.array([[-0.5, -1.0]], pa.list_(pa.float64(), 2)),
            "trainer_logprobs": [[-0.4, -1.1]],
            "mask": pa.array([[1, 0]], pa.list_(pa.int8(), 2)),
        },
    )
    r = _import("parquet", path, tmp_path / "out")
    assert r.returncode == 0, r.stderr
    t = _tokens(tmp_path / "out")
    assert (t["token_id"], t["sampler_logprob"], t["trainer_logprob"]) == ([5], [-0.5], [-0.4])


def test_a_number_where_a_per_token_list_belongs_is_refused_in_both_formats(tmp_path):
    """Parquet broadcast the one number onto every token; JSONL refused the same record."""
    path = parquet(tmp_path, {**GOOD_COLUMNS, "sampler_logprobs": [-0.5]})
    assert error_line(_import("parquet", path, tmp_path / "out")) == (
        "error: d.parquet: column 'sampler_logprobs' (sampler_logprob) holds double; it must hold a list of numbers, "
        "one per token"
    )
    path = jsonl(tmp_path, '{"token_ids": [5, 6], "sampler_logprobs": -0.5, "trainer_logprobs": [-0.4, -1.1]}\n')
    assert error_line(_import("jsonl", path, tmp_path / "out")) == (
        "error: d.jsonl:1: misaligned per-token lists: 2 tokens but sampler_logprobs=float"
    )


def test_one_number_per_sequence_is_still_fine_for_advantage_and_reward(tmp_path):
    path = parquet(tmp_path, {**GOOD_COLUMNS, "advantages": [0.5], "reward": [1.0]})
    assert _import("parquet", path, tmp_path / "out").returncode == 0
    t = _tokens(tmp_path / "out")
    assert (t["advantage"], t["reward"]) == ([0.5, 0.5], [1.0, 1.0])


# ---- options and run-level messages --------------------------------------------------------------


def test_a_column_mapped_twice_is_refused(tmp_path):
    """import used the last mapping (b); report refuses the same options."""
    path = jsonl(
        tmp_path, '{"token_ids": [5, 6], "a": [-0.5, -1.0], "b": [-0.1, -0.2], "trainer_logprobs": [-0.4, -1.1]}\n'
    )
    r = _import("jsonl", path, tmp_path / "out", "--column", "sampler_logprob=a", "--column", "sampler_logprob=b")
    assert (
        error_line(r)
        == "error: --column 'sampler_logprob=b': sampler_logprob is already mapped to 'a' (map each column once)"
    )
    assert not (tmp_path / "out" / "tokens").exists()


def test_zero_rows_are_not_blamed_on_skip_bad(tmp_path):
    schema = pa.schema([(name, pa.list_(pa.int64() if name == "token_ids" else pa.float64())) for name in GOOD_COLUMNS])
    path = tmp_path / "zero.parquet"
    pq.write_table(pa.table({name: [] for name in GOOD_COLUMNS}, schema=schema), path)
    r = _import("parquet", path, tmp_path / "out")
    lines = r.stderr.strip().splitlines()
    assert lines[0] == f"[1/1] {path}"  # progress, then the one error line
    assert error_line(r, after_work=True) == (
        f"error: {path}: no token imported: the parquet files hold no record (point at a .parquet file or a folder of them)"
    )


def test_an_empty_jsonl_file_holds_no_record(tmp_path):
    path = jsonl(tmp_path, "\n\n")
    assert error_line(_import("jsonl", path, tmp_path / "out"), after_work=True) == (
        f"error: {path}: no token imported: the jsonl files hold no record (point at a .jsonl file or a folder of them)"
    )


def test_only_progress_precedes_an_error_in_a_later_file(tmp_path):
    """Two files with the same sequence id: progress for the first file on stderr, then the error, last and alone."""
    folder = tmp_path / "two"
    folder.mkdir()
    for name in ("a.jsonl", "b.jsonl"):
        (folder / name).write_text(GOOD + ', "sequence_id": 3}\n')
    r = _import("jsonl", folder, tmp_path / "out")
    assert r.stderr.splitlines() == [
        f"[1/2] {folder / 'a.jsonl'}",
        "error: b.jsonl:1: sequence_id 3 appears twice; ids must be unique across the import",
    ]
    assert error_line(r, after_work=True)


def test_a_parquet_page_that_fails_its_checksum_is_refused_on_import(tmp_path):
    path = parquet(
        tmp_path,
        {"token_ids": [[5, 6]] * 50, "sampler_logprobs": [[-0.5, -1.0]] * 50, "trainer_logprobs": [[-0.4, -1.1]] * 50},
        compression="none",
        use_dictionary=False,
        write_page_checksum=True,
    )
    chunk = pq.ParquetFile(path).metadata.row_group(0).column(1)  # sampler_logprobs' values
    data = bytearray(path.read_bytes())
    data[chunk.data_page_offset + chunk.total_compressed_size - 1] ^= 0x10
    path.write_bytes(bytes(data))
    assert error_line(_import("parquet", path, tmp_path / "out")) == (
        "error: d.parquet: unreadable Parquet data (could not verify page integrity, CRC checksum verification failed "
        "for page_ordinal 0)"
    )


# ---- slime: torch files ----------------------------------------------------------------------------


def _sample(**changes):
    import torch

    s = {
        "tokens": torch.tensor([1, 2, 3, 4]),
        "response_lengths": 2,
        "loss_masks": torch.tensor([1, 1]),
        "rollout_log_probs": torch.tensor([-0.5, -0.6]),
        "log_probs": torch.tensor([-0.4, -0.7]),
        "advantages": torch.tensor([1.0, 1.0]),
        "rollout_position": 0,
    }
    s.update(changes)
    return s


def _slime(tmp_path, data: bytes):
    train = tmp_path / "dump" / "train_data"
    train.mkdir(parents=True, exist_ok=True)
    (train / "0_0.pt").write_bytes(data)
    return tmp_path / "dump"


def _legacy(obj) -> bytes:
    import torch

    buf = io.BytesIO()
    torch.save(obj, buf, _use_new_zipfile_serialization=False)
    return buf.getvalue()


def test_slime_response_lengths_of_several_values_are_refused(tmp_path):
    torch = pytest.importorskip("torch")
    buf = io.BytesIO()
    torch.save({"format_version": 2, "rollout_id": 0, "samples": [_sample(response_lengths=torch.tensor([2, 2]))]}, buf)
    dump = _slime(tmp_path, buf.getvalue())
    assert error_line(_import("slime", dump, tmp_path / "out"), after_work=True) == (
        "error: train_data/0_0.pt (record 0): response_lengths holds 2 values, not one: it must be one integer per sample"
    )


def test_slime_response_lengths_as_a_one_value_tensor_is_read(tmp_path):
    torch = pytest.importorskip("torch")
    buf = io.BytesIO()
    torch.save({"format_version": 2, "rollout_id": 0, "samples": [_sample(response_lengths=torch.tensor([2]))]}, buf)
    dump = _slime(tmp_path, buf.getvalue())
    assert _import("slime", dump, tmp_path / "out").returncode == 0
    assert _tokens(tmp_path / "out")["token_id"] == [3, 4]  # the last 2 of tokens [1, 2, 3, 4]


@pytest.mark.parametrize("cut", [0.3, 0.5, 0.8, 0.95])
def test_a_truncated_legacy_slime_file_is_corrupt_not_untrusted(tmp_path, cut):
    """With a datetime (a global the safe loader refuses) the safe loader blamed weights_only at every cut;
    the whole multi-pickle stream is now checked, so each cut is corrupt, with or without --trust-pickle."""
    pytest.importorskip("torch")
    import datetime

    data = _legacy({"format_version": 2, "rollout_id": 0, "samples": [_sample()], "when": datetime.date(2020, 1, 1)})
    dump = _slime(tmp_path, data[: int(len(data) * cut)])
    for trust in ((), ("--trust-pickle",)):
        line = error_line(_import("slime", dump, tmp_path / "out", *trust), after_work=True)
        # "(truncated or damaged)" from the check; cut before the datetime, the safe loader's own reason (EOFError...).
        # torch's legacy storage keys vary in length between saves, so where a cut lands varies too.
        assert line.startswith("error: train_data/0_0.pt: corrupt: not a readable torch file or pickle ("), line


@pytest.mark.parametrize("data", [b"I1\n.", pickle.dumps({"format_version": 2, "samples": [{"a": 1}]})])
def test_a_plain_pickle_is_not_a_torch_file(tmp_path, data):
    """Sound pickles, but not torch.save files: no --trust-pickle advice (with it, torch said 'Invalid magic number')."""
    pytest.importorskip("torch")
    dump = _slime(tmp_path, data)
    for trust in ((), ("--trust-pickle",)):
        assert error_line(_import("slime", dump, tmp_path / "out", *trust), after_work=True) == (
            "error: train_data/0_0.pt: corrupt: not a torch.save file (a plain pickle, without torch.save's header)"
        )


def test_a_sound_legacy_file_with_python_objects_still_asks_for_trust(tmp_path):
    pytest.importorskip("torch")
    import datetime

    data = _legacy({"format_version": 2, "rollout_id": 0, "samples": [_sample()], "when": datetime.date(2020, 1, 1)})
    dump = _slime(tmp_path, data)
    assert error_line(_import("slime", dump, tmp_path / "out"), after_work=True) == (
        "error: train_data/0_0.pt: this train dump holds Python objects that only a full unpickle can rebuild; "
        "unpickling runs code stored in the file, so it is refused by default (pass --trust-pickle if you produced "
        "these files yourself)"
    )
    r = _import("slime", dump, tmp_path / "out2", "--trust-pickle")
    assert r.returncode == 0, r.stderr
    assert _tokens(tmp_path / "out2")["token_id"] == [3, 4]


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


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_a_whole_float_step_imports_as_that_step_in_both_formats(tmp_path, fmt):
    """Loggers write counters as 2.0; JSONL refused what Parquet accepted. A fraction stays refused in both."""
    if fmt == "jsonl":
        good, bad = (
            jsonl(tmp_path, GOOD + f', "step": {v}}}\n', f"{n}.jsonl") for n, v in (("a", "2.0"), ("b", "2.5"))
        )
        bad_line = "error: b.jsonl:1: bad value (step is not an integer: 2.5)"
    else:
        good, bad = (
            parquet(tmp_path, {**GOOD_COLUMNS, "step": pa.array([v])}, f"{n}.parquet")
            for n, v in (("a", 2.0), ("b", 2.5))
        )
        bad_line = "error: b.parquet: bad values in rows 0..0 (step must be integers, got 2.5 at index 0)"
    assert _import(fmt, good, tmp_path / "good").returncode == 0
    assert _tokens(tmp_path / "good")["step"] == [2, 2]
    assert error_line(_import(fmt, bad, tmp_path / "bad")) == bad_line
