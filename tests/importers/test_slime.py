"""slime ``--dump-details`` import, on ``.pt`` files in slime's exact layout (needs torch)."""

from __future__ import annotations

import io
import json

import pyarrow.dataset as ds
import pytest

pytest.importorskip("torch")

from mismatchscope.errors import (
    ImportFormatError,
    NoTrainerLogprobsError,
    UntrustedPickleError,
)
from mismatchscope.importers import import_run
from tests.helpers import cli
from tests.importers.layouts import import_cli, imported_tokens, slime_dump, slime_torch_sample
from tests.inputs import error_line

from .layouts import (
    ToolTrace,
    f32,
    slime_rollout_sample,
    slime_train_sample,
    write_slime,
)


def read(out):
    return ds.dataset(out / "tokens", format="parquet").to_table().to_pydict()


def two_samples():
    """Group 0 holds two samples; the second has a tool-output token (loss mask 0) in its response."""
    train = [
        slime_train_sample([1, 2, 3], [40, 41], [-0.5, -0.25], [-0.5, -0.3], 1.5, position=0, sample_index=10),
        slime_train_sample(
            [1, 2, 3],
            [50, 51, 52],
            [-0.125, -1.0, -0.75],
            [-0.1, -7.0, -0.7],
            -1.5,
            loss_mask=[1, 0, 1],
            position=1,
            sample_index=11,
            dp_rank=1,
        ),
    ]
    rollout = [
        slime_rollout_sample(0, 10, 1.0, [1, 2, 3, 40, 41], 2),
        slime_rollout_sample(0, 11, 0.0, [1, 2, 3, 50, 51, 52], 3),
    ]
    return train, rollout


def test_response_tokens_joined_with_rollout_rewards_and_groups(tmp_path):
    train, rollout = two_samples()
    write_slime(tmp_path / "dump", 4, train, rollout)
    result = import_run("slime", tmp_path / "dump", tmp_path / "out")
    t = read(tmp_path / "out")
    assert t["token_id"] == [40, 41, 50, 52]
    assert t["position"] == [0, 1, 0, 1]
    assert t["sequence_id"] == [0, 0, 1, 1]
    # float32 tensors, widened exactly
    assert t["sampler_logprob"] == f32([-0.5, -0.25, -0.125, -0.75]).tolist()
    assert t["trainer_logprob"] == f32([-0.5, -0.3, -0.1, -0.7]).tolist()
    assert t["advantage"] == [1.5, 1.5, -1.5, -1.5]
    assert t["reward"] == [1.0, 1.0, 0.0, 0.0]
    assert t["prompt_id"] == [0, 0, 0, 0]
    assert t["sample_index"] == [0, 0, 1, 1]
    assert t["rank"] == [0, 0, 1, 1]
    assert t["step"] == [4] * 4
    # prompt tokens (3 + 3) and the tool token are not generated tokens
    assert (result.sequences, result.tokens_written, result.tokens_dropped_by_mask) == (2, 4, 7)


def test_rollout_dump_with_python_objects_needs_trust_pickle(tmp_path):
    train, rollout = two_samples()
    rollout[1]["metadata"] = {"trace": ToolTrace(calls=2)}
    write_slime(tmp_path / "dump", 0, train, rollout)
    with pytest.raises(UntrustedPickleError, match="runs code stored in the file") as err:
        import_run("slime", tmp_path / "dump", tmp_path / "out")
    assert "rollout_data/0.pt" in str(err.value) and "--trust-pickle" in str(err.value)
    result = import_run("slime", tmp_path / "dump", tmp_path / "out2", trust_pickle=True)
    assert result.tokens_written == 4


def test_without_rollout_data_rewards_come_from_raw_reward(tmp_path):
    train, _ = two_samples()
    write_slime(tmp_path / "dump", 0, train, None, raw_reward=[0.25, 0.75])
    result = import_run("slime", tmp_path / "dump", tmp_path / "out")
    t = read(tmp_path / "out")
    assert t["reward"] == [0.25, 0.25, 0.75, 0.75]
    assert "prompt_id" not in t
    assert any("no rollout_data/" in w for w in result.warnings)


def test_files_named_as_the_issue_says_are_read_too(tmp_path):
    train, rollout = two_samples()
    path = write_slime(tmp_path / "dump", 2, train, rollout)
    path.rename(path.with_name("2.pt"))
    assert import_run("slime", tmp_path / "dump", tmp_path / "out").tokens_written == 4


def test_unknown_format_version_names_the_file(tmp_path):
    train, rollout = two_samples()
    write_slime(tmp_path / "dump", 0, train, rollout, format_version=3)
    write_slime(tmp_path / "dump", 1, train, rollout)
    with pytest.raises(ImportFormatError, match="unknown format_version 3") as err:
        import_run("slime", tmp_path / "dump", tmp_path / "out")
    assert str(err.value).startswith("train_data/0_0.pt: ")
    result = import_run("slime", tmp_path / "dump", tmp_path / "out2", skip_bad=True)
    assert (result.bad_records_skipped, result.sequences) == (1, 2)


def test_misaligned_sample_names_the_record(tmp_path):
    train, rollout = two_samples()
    train[1]["log_probs"] = train[1]["log_probs"][:2]
    write_slime(tmp_path / "dump", 0, train, rollout)
    with pytest.raises(ImportFormatError, match="misaligned") as err:
        import_run("slime", tmp_path / "dump", tmp_path / "out")
    assert str(err.value).startswith("train_data/0_0.pt (record 1): ")


def test_no_trainer_recompute_is_refused(tmp_path):
    train, rollout = two_samples()
    for s in train:
        del s["log_probs"]  # --use-rollout-logprobs: the trainer never scores
    write_slime(tmp_path / "dump", 0, train, rollout)
    with pytest.raises(NoTrainerLogprobsError):
        import_run("slime", tmp_path / "dump", tmp_path / "out", skip_bad=True)


def test_manifest_lists_train_files(tmp_path):
    train, rollout = two_samples()
    write_slime(tmp_path / "dump", 0, train, rollout)
    write_slime(tmp_path / "dump", 1, train, rollout)
    import_run("slime", tmp_path / "dump", tmp_path / "out")
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert [f["path"] for f in manifest["source"]["files"]] == ["train_data/0_0.pt", "train_data/1_0.pt"]
    assert {"prompt_id", "sample_index", "rank", "step"} <= set(manifest["columns"])


@pytest.mark.parametrize(
    "content, reason",
    [
        (b"hello, this is not a pickle" * 20, "(101)"),  # torch's own KeyError on a bad magic number
        (b"\x80\x04\x95\x10\x00\x00\x00", "(truncated or damaged)"),  # torch blames weights_only: the stream is checked
    ],
)
def test_a_slime_file_that_is_not_a_pickle_is_corrupt(tmp_path, content, reason):
    pytest.importorskip("torch")
    train = tmp_path / "dump" / "train_data"
    train.mkdir(parents=True)
    (train / "0_0.pt").write_bytes(content)
    for trust in ((), ("--trust-pickle",)):
        r = cli("import", "slime", str(tmp_path / "dump"), "--out", str(tmp_path / "out"), *trust)
        assert error_line(r) == f"error: train_data/0_0.pt: corrupt: not a readable torch file or pickle {reason}"


def test_a_truncated_slime_file_is_corrupt_not_untrusted(tmp_path):
    torch = pytest.importorskip("torch")
    import datetime

    train = tmp_path / "dump" / "train_data"
    train.mkdir(parents=True)
    torch.save(
        {"format_version": 2, "when": datetime.date(2020, 1, 1)}, train / "0_0.pt", _use_new_zipfile_serialization=False
    )
    data = (train / "0_0.pt").read_bytes()
    (train / "0_0.pt").write_bytes(data[: len(data) // 3])
    r = cli("import", "slime", str(tmp_path / "dump"), "--out", str(tmp_path / "out"))
    line = error_line(r)
    assert line.startswith("error: train_data/0_0.pt: corrupt: not a readable torch file or pickle ("), line


def test_slime_response_lengths_of_several_values_are_refused(tmp_path):
    torch = pytest.importorskip("torch")
    buf = io.BytesIO()
    torch.save(
        {"format_version": 2, "rollout_id": 0, "samples": [slime_torch_sample(response_lengths=torch.tensor([2, 2]))]},
        buf,
    )
    dump = slime_dump(tmp_path, buf.getvalue())
    assert error_line(import_cli("slime", dump, tmp_path / "out"), after_work=True) == (
        "error: train_data/0_0.pt (record 0): response_lengths holds 2 values, not one: it must be one integer per sample"
    )


def test_slime_response_lengths_as_a_one_value_tensor_is_read(tmp_path):
    torch = pytest.importorskip("torch")
    buf = io.BytesIO()
    torch.save(
        {"format_version": 2, "rollout_id": 0, "samples": [slime_torch_sample(response_lengths=torch.tensor([2]))]}, buf
    )
    dump = slime_dump(tmp_path, buf.getvalue())
    assert import_cli("slime", dump, tmp_path / "out").returncode == 0
    assert imported_tokens(tmp_path / "out")["token_id"] == [3, 4]  # the last 2 of tokens [1, 2, 3, 4]
