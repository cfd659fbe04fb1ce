"""prime-rl token export import, on files in ``TokenExporter``'s exact layout."""

from __future__ import annotations

import json
import math

import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest

from mismatchscope.errors import ImportFormatError, InputError
from mismatchscope.importers import import_run
from mismatchscope.schema import decode_metadata
from tests.importers.layouts import import_error

from .layouts import prime_record, write_prime_step


def read(out):
    return ds.dataset(out / "tokens", format="parquet").to_table().to_pydict()


def rec(step=1, rank=0, idx=0, **kw):
    base = dict(
        prompt=[100, 101],
        response=[5, 6, 7],
        inf_lp=[-0.5, -0.25, -2.0],
        tr_lp=[-0.75, -0.25, -1.5],
        adv=0.5,
        reward=1.0,
    )
    base.update(kw)
    return prime_record(
        base.pop("prompt"),
        base.pop("response"),
        base.pop("inf_lp"),
        base.pop("tr_lp"),
        base.pop("adv"),
        base.pop("reward"),
        step=step,
        rank=rank,
        idx=idx,
        **base,
    )


def test_generated_tokens_with_their_logprobs_rank_and_step(tmp_path):
    write_prime_step(tmp_path / "outputs", 7, 1, [rec(step=7, rank=1, entropy=[0.1, 0.2, 0.3, 0.4, 0.5])])
    result = import_run("prime-rl", tmp_path / "outputs", tmp_path / "out")
    t = read(tmp_path / "out")
    assert t["token_id"] == [5, 6, 7]
    assert t["position"] == [0, 1, 2]
    assert t["sampler_logprob"] == [-0.5, -0.25, -2.0]
    assert t["trainer_logprob"] == [-0.75, -0.25, -1.5]
    assert t["advantage"] == [0.5] * 3
    assert t["reward"] == [1.0] * 3
    assert t["trainer_entropy"] == [0.3, 0.4, 0.5]
    assert t["step"] == [7] * 3 and t["rank"] == [1] * 3
    assert result.tokens_dropped_by_mask == 2


def test_policy_lag_is_in_the_metadata_and_the_warnings(tmp_path):
    write_prime_step(tmp_path / "outputs", 1, 0, [rec()])
    result = import_run("prime-rl", tmp_path / "outputs", tmp_path / "out")
    assert any("policy lag" in w for w in result.warnings)
    meta = decode_metadata(pq.read_schema(tmp_path / "out" / "tokens" / "part-00000.parquet").metadata)
    assert meta["source"]["semantics"]["policy_lag"] is True
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert manifest["source"]["semantics"]["policy_lag"] is True
    assert any("policy lag" in w for w in manifest["warnings"])


def test_only_stable_step_folders_are_read(tmp_path):
    write_prime_step(tmp_path / "outputs", 1, 0, [rec(step=1)])
    write_prime_step(tmp_path / "outputs", 1, 1, [rec(step=1, rank=1)])
    write_prime_step(tmp_path / "outputs", 2, 0, [rec(step=2)], stable=False)  # still being written
    result = import_run("prime-rl", tmp_path / "outputs", tmp_path / "out")
    t = read(tmp_path / "out")
    assert sorted(set(t["step"])) == [1]
    assert t["rank"] == [0] * 3 + [1] * 3
    assert result.files_read == 2
    assert any("without a STABLE marker" in w and "step_2" in w for w in result.warnings)


def test_multi_run_layout(tmp_path):
    write_prime_step(tmp_path / "outputs", 3, 0, [rec(step=3)], run_id="run_a")
    write_prime_step(tmp_path / "outputs", 3, 0, [rec(step=3)], run_id="run_b")
    result = import_run("prime-rl", tmp_path / "outputs", tmp_path / "out")
    assert result.sequences == 2
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert [f["path"] for f in manifest["source"]["files"]] == [
        "run_a/token_exports/step_3/rank_0.jsonl",
        "run_b/token_exports/step_3/rank_0.jsonl",
    ]


def test_nulls_for_non_finite_values_become_nan_and_are_counted(tmp_path):
    write_prime_step(tmp_path / "outputs", 1, 0, [rec(tr_lp=[-0.75, None, -1.5])])
    result = import_run("prime-rl", tmp_path / "outputs", tmp_path / "out")
    t = read(tmp_path / "out")
    assert math.isnan(t["trainer_logprob"][1])
    assert any("1 imported token(s) have a non-finite logprob" in w for w in result.warnings)


def test_loss_mask_holes_and_all_none_advantages(tmp_path):
    r = rec(mask=[True, False, True])
    r["advantages"] = [None] * 5  # no rl loss channel: the exporter writes nulls
    write_prime_step(tmp_path / "outputs", 1, 0, [r])
    import_run("prime-rl", tmp_path / "outputs", tmp_path / "out")
    t = read(tmp_path / "out")
    assert t["token_id"] == [5, 7] and t["position"] == [0, 1]
    assert "advantage" not in t  # a column of nulls would make every reader refuse the run


def test_a_null_advantage_in_a_run_with_advantages_is_refused_at_its_line(tmp_path):
    bad = rec()
    bad["advantages"] = [0.5, 0.5, 0.5, None, 0.5]  # prompt 2 tokens, then the response: position 1 is null
    write_prime_step(tmp_path / "outputs", 1, 0, [rec(), bad])
    with pytest.raises(ImportFormatError, match=r"rank_0.jsonl:2: advantage is nan .* at position 1"):
        import_run("prime-rl", tmp_path / "outputs", tmp_path / "out")
    assert not (tmp_path / "out" / "manifest.json").exists()


@pytest.mark.parametrize(
    "record, reason",
    [
        (rec(schema_version=2), "unknown schema_version 2"),
        ({**rec(), "trainer_logprobs": [-1.0, -2.0]}, "misaligned"),
        (rec(mask=[False, False, False]), "selects no token"),
    ],
)
def test_bad_records_name_file_and_line(tmp_path, record, reason):
    write_prime_step(tmp_path / "outputs", 5, 2, [rec(), record])
    with pytest.raises(ImportFormatError, match=reason) as err:
        import_run("prime-rl", tmp_path / "outputs", tmp_path / "out")
    assert str(err.value).startswith("token_exports/step_5/rank_2.jsonl:2: ")
    result = import_run("prime-rl", tmp_path / "outputs", tmp_path / "out2", skip_bad=True)
    assert (result.sequences, result.bad_records_skipped) == (1, 1)


def test_a_folder_without_exports_says_what_to_point_at(tmp_path):
    (tmp_path / "outputs").mkdir()
    with pytest.raises(InputError, match="no prime-rl files") as err:
        import_run("prime-rl", tmp_path / "outputs", tmp_path / "out")
    assert "enable_token_export" in str(err.value)


def test_prime_rl_steps_without_stable_are_named(tmp_path):
    # once "no prime-rl files found": the files are there, the trainer had not finished writing the step
    rec = prime_record([1], [5], [-0.5], [-0.4], 1.0, 1.0, step=3, rank=0, idx=0)
    write_prime_step(tmp_path / "src", 3, 0, [rec], stable=False)
    line = import_error("prime-rl", tmp_path / "src", tmp_path)
    assert "every step folder with token exports lacks its STABLE marker (step_3)" in line
    assert "import once the trainer has finished a step" in line
    assert not (tmp_path / "out").exists()


def test_advantages_that_appear_after_a_first_record_without_them_are_refused(tmp_path):
    """The first record holds no advantages (all null), the second does: once the advantage column was dropped
    for the whole import, the second's advantages with it. Refused, naming both records."""
    first = rec()
    first["advantages"] = [None] * 5
    write_prime_step(tmp_path / "outputs", 1, 0, [first, rec()])
    with pytest.raises(
        ImportFormatError, match=r"rank_0.jsonl:2: holds advantages.*\(token_exports/step_1/rank_0.jsonl:1\)"
    ):
        import_run("prime-rl", tmp_path / "outputs", tmp_path / "out", skip_bad=True)
    assert not (tmp_path / "out").exists()
