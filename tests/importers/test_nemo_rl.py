"""NeMo-RL ``train_data_step{N}.jsonl`` import, on files in NeMo-RL's exact layout."""

from __future__ import annotations

import json
import math

import numpy as np
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest

from mismatchscope.errors import ImportFormatError, NoTrainerLogprobsError, UsageError
from mismatchscope.importers import import_run
from mismatchscope.schema import decode_metadata

from .layouts import nemo_sample, write_nemo_step


def read(out):
    return ds.dataset(out / "tokens", format="parquet").to_table().to_pydict()


def test_prompt_and_padding_dropped_response_kept_exactly(tmp_path):
    # 3 prompt tokens, 4 generated tokens, 2 padding tokens (a longer sample sets the width).
    logs = tmp_path / "logs" / "exp_001"
    s = nemo_sample(
        [101, 102, 103],
        [7, 8, 9, 2],
        [-0.5, -0.25, -1.0, -0.125],
        [-0.51, -0.24, -1.02, -0.125],
        adv=[0.75, 0.75, 0.75, 0.75],
        reward=1.0,
        width=9,
    )
    write_nemo_step(logs, 3, [s])
    result = import_run("nemo-rl", tmp_path / "logs", tmp_path / "out")

    t = read(tmp_path / "out")
    assert t["token_id"] == [7, 8, 9, 2]
    assert t["position"] == [0, 1, 2, 3]
    assert t["sequence_id"] == [0, 0, 0, 0]
    assert t["sampler_logprob"] == [-0.5, -0.25, -1.0, -0.125]
    assert t["trainer_logprob"] == [-0.51, -0.24, -1.02, -0.125]
    assert t["advantage"] == [0.75] * 4
    assert t["reward"] == [1.0] * 4
    assert t["step"] == [3] * 4
    # the 3 prompt tokens are dropped by the mask; padding past input_lengths is not a token
    assert (result.sequences, result.tokens_written, result.tokens_dropped_by_mask) == (1, 4, 3)
    assert (result.files_read, result.steps, result.bad_records_skipped) == (1, 1, 0)


def test_tool_tokens_inside_the_response_are_dropped_and_positions_stay_dense(tmp_path):
    # multi-turn: generated, generated, tool output (mask 0), generated
    s = nemo_sample(
        [1, 2],
        [10, 11, 50, 12],
        [-0.1, -0.2, 0.0, -0.3],
        [-0.1, -0.2, -4.0, -0.3],
        adv=[1.0, 1.0, 0.0, 1.0],
        reward=0.0,
        mask=[1, 1, 0, 1],
    )
    write_nemo_step(tmp_path / "logs", 1, [s])
    result = import_run("nemo-rl", tmp_path / "logs", tmp_path / "out")
    t = read(tmp_path / "out")
    assert t["token_id"] == [10, 11, 12]
    assert t["position"] == [0, 1, 2]
    assert t["trainer_logprob"] == [-0.1, -0.2, -0.3]
    assert result.tokens_dropped_by_mask == 3  # 2 prompt + 1 tool token


def test_per_sample_advantage_of_older_versions_is_repeated(tmp_path):
    s = nemo_sample([1], [5, 6], [-0.2, -0.3], [-0.2, -0.3], adv=0.5, reward=1.0)
    s["advantages"] = 0.5  # older NeMo-RL logged advantages.squeeze(-1): one number per sample
    write_nemo_step(tmp_path / "logs", 1, [s])
    import_run("nemo-rl", tmp_path / "logs", tmp_path / "out")
    assert read(tmp_path / "out")["advantage"] == [0.5, 0.5]


def test_steps_sort_numerically_and_ids_are_unique_across_the_run(tmp_path):
    logs = tmp_path / "logs" / "exp_001"
    for step in (10, 2, 1):
        write_nemo_step(logs, step, [nemo_sample([1], [step, step], [-0.1, -0.2], [-0.1, -0.2], 0.0, 0.0)] * 2)
    result = import_run("nemo-rl", tmp_path / "logs", tmp_path / "out")
    t = read(tmp_path / "out")
    assert t["step"] == [1] * 4 + [2] * 4 + [10] * 4
    assert t["sequence_id"] == [0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5]
    assert result.steps == 3
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert [f["path"] for f in manifest["source"]["files"]] == [
        "exp_001/train_data_step1.jsonl",
        "exp_001/train_data_step2.jsonl",
        "exp_001/train_data_step10.jsonl",
    ]
    assert [f["first_sequence_id"] for f in manifest["source"]["files"]] == [0, 2, 4]


def test_filtered_rewards_win_over_unfiltered_rewards(tmp_path):
    # dynamic sampling: "rewards" is the unfiltered batch, "filtered_rewards" the trained rows
    s = nemo_sample([1], [5], [-0.2], [-0.2], 0.0, reward=0.0)
    s["filtered_rewards"] = 1.0
    write_nemo_step(tmp_path / "logs", 1, [s])
    import_run("nemo-rl", tmp_path / "logs", tmp_path / "out")
    assert read(tmp_path / "out")["reward"] == [1.0]


def test_metadata_and_manifest_record_the_source(tmp_path):
    write_nemo_step(tmp_path / "logs", 1, [nemo_sample([1], [5], [-0.2], [-0.2], 0.0, 0.0)])
    import_run("nemo-rl", tmp_path / "logs", tmp_path / "out")
    meta = decode_metadata(pq.read_schema(tmp_path / "out" / "tokens" / "part-00000.parquet").metadata)
    assert meta["schema_version"] == 1
    assert meta["source"]["format"] == "nemo-rl"
    assert meta["source"]["files"] == ["train_data_step1.jsonl"]
    assert "token i" in meta["source"]["semantics"]["alignment"]
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert manifest["complete"] is True
    assert manifest["counts"]["tokens_written"] == 1
    assert manifest["shards"] == ["tokens/part-00000.parquet"]


def test_force_on_policy_ratio_zeros_are_refused_even_with_skip_bad(tmp_path):
    s = nemo_sample([1, 2], [5, 6, 7], [-0.2, -0.3, -0.4], [0.0, 0.0, 0.0], 0.0, 0.0, prompt_prev=[0.0, 0.0])
    write_nemo_step(tmp_path / "logs", 4, [s])
    with pytest.raises(NoTrainerLogprobsError, match="force_on_policy_ratio") as err:
        import_run("nemo-rl", tmp_path / "logs", tmp_path / "out", skip_bad=True)
    assert "train_data_step4.jsonl:1" in str(err.value)
    assert not (tmp_path / "out" / "manifest.json").exists()


GOOD = nemo_sample([1], [5, 6], [-0.2, -0.3], [-0.2, -0.3], 0.0, 1.0)


@pytest.mark.parametrize(
    "bad_line, reason",
    [
        ('{"token_ids": [[1, 2, 3]], "token_loss_mask": [[0, 1', "malformed JSON"),
        (
            json.dumps({**{k: [v] for k, v in GOOD.items()}, "prev_logprobs": [[0.0, -0.1]]}),
            "misaligned per-token lists",
        ),
        (json.dumps({k: [v] for k, v in {**GOOD, "token_loss_mask": [0, 0, 0]}.items()}), "selects no token"),
        (json.dumps({"idx": 3}), "missing field"),
    ],
)
def test_bad_lines_name_file_and_line_or_are_skipped_and_counted(tmp_path, bad_line, reason):
    write_nemo_step(tmp_path / "logs" / "exp_002", 2, [GOOD, GOOD], raw_lines={2: bad_line})
    with pytest.raises(ImportFormatError, match=reason) as err:
        import_run("nemo-rl", tmp_path / "logs", tmp_path / "out")
    assert str(err.value).startswith("exp_002/train_data_step2.jsonl:2: ")

    result = import_run("nemo-rl", tmp_path / "logs", tmp_path / "out2", skip_bad=True)
    assert (result.sequences, result.bad_records_skipped) == (2, 1)
    assert "skipped 1 bad record" in result.warnings[0]
    manifest = json.loads((tmp_path / "out2" / "manifest.json").read_text())
    assert manifest["bad_records"][0]["line"] == 2
    assert manifest["source"]["files"][0]["bad_records"] == 1


def test_nan_and_infinity_written_by_python_json_are_read_and_counted(tmp_path):
    s = nemo_sample([1], [5, 6], [-0.2, float("-inf")], [-0.2, float("nan")], 0.0, 1.0)
    write_nemo_step(tmp_path / "logs", 1, [s])  # json.dumps writes -Infinity and NaN
    result = import_run("nemo-rl", tmp_path / "logs", tmp_path / "out")
    t = read(tmp_path / "out")
    assert t["sampler_logprob"][1] == -math.inf and math.isnan(t["trainer_logprob"][1])
    assert any("non-finite" in w for w in result.warnings)


def test_parallel_workers_give_the_same_output_as_one_process(tmp_path, monkeypatch):
    import mismatchscope.importers._jsonl as engine

    rng = np.random.default_rng(0)
    samples = []
    for i in range(40):
        r = int(rng.integers(1, 30))
        lp = (-rng.exponential(0.5, r)).tolist()
        samples.append(
            nemo_sample(
                [1, 2, 3],
                rng.integers(0, 1000, r).tolist(),
                lp,
                np.minimum(np.asarray(lp) + rng.normal(0, 0.01, r), 0.0).tolist(),
                float(i),
                float(i % 2),
                width=40,
            )
        )
    for step in (1, 2, 3):
        write_nemo_step(tmp_path / "logs", step, samples, raw_lines={7: "not json"})
    monkeypatch.setattr(engine, "UNIT_BYTES", 5000)  # several units per file
    serial = import_run("nemo-rl", tmp_path / "logs", tmp_path / "a", workers=0, skip_bad=True, flush_tokens=300)
    parallel = import_run("nemo-rl", tmp_path / "logs", tmp_path / "b", workers=2, skip_bad=True, flush_tokens=300)
    assert read(tmp_path / "a") == read(tmp_path / "b")
    assert serial.bad_records_skipped == parallel.bad_records_skipped == 3
    man_a = json.loads((tmp_path / "a" / "manifest.json").read_text())
    man_b = json.loads((tmp_path / "b" / "manifest.json").read_text())
    assert man_a["bad_records"] == man_b["bad_records"]
    assert [b["line"] for b in man_a["bad_records"]] == [7, 7, 7]
    assert man_a["source"]["files"] == man_b["source"]["files"]


def test_refuses_an_output_dir_that_holds_an_import(tmp_path):
    write_nemo_step(tmp_path / "logs", 1, [GOOD])
    import_run("nemo-rl", tmp_path / "logs", tmp_path / "out")
    with pytest.raises(UsageError, match="already holds an import"):
        import_run("nemo-rl", tmp_path / "logs", tmp_path / "out")


def test_column_mapping_is_refused_for_a_fixed_layout(tmp_path):
    write_nemo_step(tmp_path / "logs", 1, [GOOD])
    with pytest.raises(UsageError, match="--column"):
        import_run("nemo-rl", tmp_path / "logs", tmp_path / "out", columns={"mask": "x"})


def test_force_on_policy_zeros_one_token_per_record_are_refused(tmp_path):
    """Records of one generated token each: no record has the two kept tokens the per-record check needs, but
    the import's trainer side is 3 exact zeros against 3 sampler logprobs that are not: refused all the same
    (once imported as a run with no mismatch at all)."""
    samples = [nemo_sample([1, 2], [5 + k], [-0.2 - k / 10], [0.0], 0.0, 0.0, prompt_prev=[0.0, 0.0]) for k in range(3)]
    write_nemo_step(tmp_path / "logs", 4, samples)
    with pytest.raises(NoTrainerLogprobsError, match="every one of the 3 imported tokens is exactly 0") as err:
        import_run("nemo-rl", tmp_path / "logs", tmp_path / "out")
    assert err.value.hint is not None and "force_on_policy_ratio" in err.value.hint
    assert not (tmp_path / "out").exists()


def test_a_trainer_side_with_one_exact_zero_among_others_is_kept(tmp_path):
    """A token the trainer gives probability 1 (logprob exactly 0) beside one it does not: a trainer side."""
    samples = [nemo_sample([1], [5], [-0.2], [0.0], 0.0, 0.0), nemo_sample([1], [6], [-0.3], [-0.25], 0.0, 0.0)]
    write_nemo_step(tmp_path / "logs", 4, samples)
    assert import_run("nemo-rl", tmp_path / "logs", tmp_path / "out").tokens_written == 2
