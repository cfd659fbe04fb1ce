"""``import skyrl``, ``import verl``, ``import roll`` on files written by each stack's own code.

``tests/data/stack_dumps/build.py`` wrote them (SkyRL 0.4.0's, 0.1.0's and
skyrl-train 0.3.1's, verl 0.9.1's own code; ROLL's own source files, as it
does not install) from three sequences of the bundled tiny-qwen3-moe: prompt
+ completion 5 + 6, 3 + 5 (completion token 2 masked out), 6 + 3;
``reference.json`` holds, per sequence and completion token, the model's
logprob at T = 1 (the trainer's) and that minus 0.1 (minus 0.5 at completion
tokens (0, 1) and (2, 0): the sampler's). So each import must give 6 + 4 + 3
= 13 tokens, drop 11 + 8 + 9 - 13 = 15, and reproduce the reference numbers
exactly (float32 in the files, compared as float64). Beside them each dump
holds the rows its stack adds that train no token, skipped and counted: SkyRL
0.4.0 a fourth, truncated sample whose loss mask overlong filtering zeroed and
2 rows of batch padding (4 rows to a data-parallel size of 3), the older
SkyRLs 1 row of padding (3 to 2), verl a fourth sample that generated nothing.
"""

from __future__ import annotations

import json
import pickle
import sys
import types
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from mismatchscope.errors import ImportFormatError, InputError, UntrustedPickleError
from mismatchscope.importers import import_run
from tests.helpers import cli

pytest.importorskip("torch")

DUMPS = Path(__file__).resolve().parents[1] / "data" / "stack_dumps"
REF = json.loads((DUMPS / "reference.json").read_text())[:3]  # the fourth: SkyRL's truncated sample
MASKS = [[1] * 6, [1, 1, 0, 1, 1], [1] * 3]
PROMPTS = [[11, 45, 97, 130, 7], [12, 88, 150], [19, 23, 71, 260, 99, 140]]
COMPLETIONS = [[201, 33, 64, 90, 17, 2], [44, 300, 5, 61, 2], [77, 8, 2]]
SRC = {"skyrl": DUMPS / "skyrl", "verl": DUMPS / "verl", "roll": DUMPS / "roll"}
STEP = {"skyrl": 3, "verl": 4, "roll": 2}
DUMP = {  # fixture -> (import format, its folder, step, rows skipped by what they are)
    "skyrl": ("skyrl", DUMPS / "skyrl", 3, {"padding": 2, "loss_mask_all_zero": 1}),
    "skyrl-0.1.0": ("skyrl", DUMPS / "skyrl-0.1.0", 2, {"padding": 1}),
    "skyrl-train-0.3.1": ("skyrl", DUMPS / "skyrl-train-0.3.1", 2, {"padding": 1}),
    "verl": ("verl", DUMPS / "verl", 4, {"empty_response": 1}),
    "verl-numpy": ("verl", DUMPS / "verl_numpy", 4, {"empty_response": 1}),
    "roll": ("roll", DUMPS / "roll", 2, {}),
}


def _kept(key: str) -> np.ndarray:
    return np.concatenate([np.asarray(r[key])[np.asarray(m, bool)] for r, m in zip(REF, MASKS, strict=True)])


def _tokens(out: Path):
    shards = sorted((out / "tokens").glob("*.parquet"))
    table = pq.ParquetFile(shards[0]).read()
    return table.sort_by([("sequence_id", "ascending"), ("position", "ascending")]).to_pydict()


@pytest.mark.parametrize("dump", list(DUMP))
def test_each_stack_dump_imports_its_own_numbers(dump, tmp_path):
    """With no flag: ROLL's real dump (tensordict >= 0.10, never consolidated), the old SkyRL layout (tensors
    pickled through torch), verl's numpy serialization mode, and the rows each stack adds counted, not bad."""
    fmt, src, step, skipped = DUMP[dump]
    result = import_run(fmt, src, tmp_path / "out")
    assert (result.sequences, result.tokens_written, result.tokens_dropped_by_mask) == (3, 13, 15)
    assert (result.rows_skipped, result.bad_records_skipped) == (skipped, 0)
    t = _tokens(tmp_path / "out")
    kept_ids = [tok for c, m in zip(COMPLETIONS, MASKS, strict=True) for tok, k in zip(c, m, strict=True) if k]
    assert t["token_id"] == kept_ids
    assert t["sequence_id"] == [0] * 6 + [1] * 4 + [2] * 3
    assert set(t["step"]) == {step}
    np.testing.assert_array_equal(np.asarray(t["sampler_logprob"]), _kept("sampler"))
    if fmt == "skyrl":  # both sides, and the advantages 0.25, 0.5, 0.75 per row
        np.testing.assert_array_equal(np.asarray(t["trainer_logprob"]), _kept("trainer"))
        assert t["advantage"] == [0.25] * 6 + [0.5] * 4 + [0.75] * 3
    else:  # the rollout's side only: the trainer's comes from rescore, with every sequence's ids
        assert np.isnan(t["trainer_logprob"]).all()
        seqs = pq.read_table(tmp_path / "out" / "sequences.parquet").to_pydict()
        assert seqs["prompt_token_ids"] == PROMPTS
        assert seqs["completion_token_ids"] == COMPLETIONS
        assert seqs["completion_kept"] == [[bool(k) for k in m] for m in MASKS]
        assert any("sampler's side only" in w for w in result.warnings)
        rewards = [1.0] * 6 + [0.0] * 4 + [1.0] * 3  # ROLL's episode_scores; verl's dump has no rm_scores
        assert t["reward"] == rewards if fmt == "roll" else np.isnan(t["reward"]).all()


def test_the_allow_list_runs_nothing_and_refuses_other_classes(tmp_path):
    """A pickle naming any other callable is refused before anything runs, even inside a stack's layout."""
    src = tmp_path / "dumped_data"
    src.mkdir()
    (src / "global_step_1_training_input.pkl").write_bytes(pickle.dumps({"batch_dict": {"sequences": print}}))
    with pytest.raises(UntrustedPickleError, match=r"builtins\.print"):
        import_run("skyrl", tmp_path, tmp_path / "out")
    assert not (tmp_path / "out").exists()
    r = cli("import", "skyrl", str(tmp_path), "--out", str(tmp_path / "o2"))
    assert r.returncode == 2 and "--trust-pickle" in r.stderr and "Traceback" not in r.stderr


def _field(a) -> dict:
    a = np.asarray(a)
    return {"format": "numpy", "data": a.tobytes(), "shape": a.shape, "dtype": str(a.dtype)}


def test_skyrl_before_its_left_padding_change(tmp_path):
    """SkyRL before March 2026 padded prompts left and responses right (response token j at column j).
    Row 0: prompt [7, 8, 9], response [21, 22]; row 1: prompt [5], response [31, 32, 33], loss mask 1 0 1.
    max prompt 3, max response 3: sequences [[7 8 9 21 22 0], [0 0 5 31 32 33]]."""
    f32 = np.float32
    batch = {
        "sequences": [[7, 8, 9, 21, 22, 0], [0, 0, 5, 31, 32, 33]],
        "attention_mask": [[1, 1, 1, 1, 1, 0], [0, 0, 1, 1, 1, 1]],
        "response_mask": [[1, 1, 0], [1, 1, 1]],
        "loss_mask": np.array([[1, 1, 0], [1, 0, 1]], dtype=f32),
        "rollout_logprobs": np.array([[-0.1, -0.2, 0], [-0.3, -0.4, -0.5]], dtype=f32),
        "action_log_probs": np.array([[-0.15, -0.25, 0], [-0.35, -0.45, -0.55]], dtype=f32),
        "advantages": np.array([[1, 1, 0], [-1, -1, -1]], dtype=f32),
    }
    src = tmp_path / "dumped_data"
    src.mkdir()
    state = {"batch_dict": {k: _field(v) for k, v in batch.items()}, "batch_size": 2, "metadata": {}}
    (src / "global_step_7_training_input.pkl").write_bytes(pickle.dumps(state))
    result = import_run("skyrl", tmp_path, tmp_path / "out")
    t = _tokens(tmp_path / "out")
    assert t["token_id"] == [21, 22, 31, 33]
    np.testing.assert_allclose(t["sampler_logprob"], [-0.1, -0.2, -0.3, -0.5], rtol=1e-6)
    np.testing.assert_allclose(t["trainer_logprob"], [-0.15, -0.25, -0.35, -0.55], rtol=1e-6)
    assert t["advantage"] == [1, 1, -1, -1] and set(t["step"]) == {7}
    assert result.tokens_dropped_by_mask == 5 + 4 - 4  # real tokens minus kept


def _dataproto_module(name: str, monkeypatch):
    """A class of the stack's qualified name, pickling the stack's DataProto state (the builder's pattern);
    the stand-in modules leave ``sys.modules`` with the test."""
    parts = name.split(".")
    for i in range(1, len(parts)):
        if ".".join(parts[:i]) not in sys.modules:
            monkeypatch.setitem(sys.modules, ".".join(parts[:i]), types.ModuleType(".".join(parts[:i])))
    mod = types.ModuleType(name)

    class DataProto:
        def __init__(self, state):
            self.state = state

        def __getstate__(self):
            return self.state

    DataProto.__module__, DataProto.__qualname__ = name, "DataProto"
    setattr(mod, "DataProto", DataProto)  # noqa: B010  (a module made here)
    monkeypatch.setitem(sys.modules, name, mod)
    return DataProto


def _verl_dump(tmp_path: Path, drop: str, monkeypatch) -> Path:
    """verl's own file with one tensor left out: its consolidated TensorDict bytes rebuilt without ``drop``."""
    from mismatchscope.importers.stack_pickle import load_stack_pickle, load_tensordict

    src = next(DUMPS.glob("verl/*/*/4/gen_batch.dp"))
    state = load_stack_pickle(src, "x", False, "verl").state
    tensors = {k: v.clone() for k, v in load_tensordict(state[0], "x", False).items() if k != drop}
    import io

    import torch

    buf = io.BytesIO()
    torch.save(tensors, buf)  # a plain dict of tensors: the safe loader reads it too
    cls = _dataproto_module("verl.protocol", monkeypatch)
    step = tmp_path / "dump" / "e_p" / "GBS2_N2_in8_out7" / "4"
    step.mkdir(parents=True)
    (step / "gen_batch.dp").write_bytes(pickle.dumps(cls((buf.getvalue(), state[1], state[2]))))
    return tmp_path / "dump"


def test_verl_without_rollout_log_probs_names_the_setting(tmp_path, monkeypatch):
    with pytest.raises(ImportFormatError, match="calculate_log_probs=true"):
        import_run("verl", _verl_dump(tmp_path, "rollout_log_probs", monkeypatch), tmp_path / "out")


def test_verl_rollout_data_dir_jsonl_is_text_and_scores_only(tmp_path):
    (tmp_path / "1.jsonl").write_text(json.dumps({"input": "q", "output": "a", "score": 1.0, "step": 1}) + "\n")
    with pytest.raises(InputError, match="text and scores only"):
        import_run("verl", tmp_path, tmp_path / "out")
    r = cli("import", "verl", str(tmp_path), "--out", str(tmp_path / "o"))
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) <= 2 and "Traceback" not in r.stderr


def test_roll_shift_is_undone_not_repeated(tmp_path, monkeypatch):
    """Token j reads column j - 1. Reading column j instead would give sequence 0's first kept token the
    logprob of its second (-0.5 offset, SHIFTED) and the last token 0: the exact match in the first test
    fails; here an unshifted (full-width) infer_logprobs is refused by name."""
    import io

    import torch

    from mismatchscope.importers.stack_pickle import load_stack_pickle, load_tensordict

    src = DUMPS / "roll" / "train" / "step_000002.pkl"
    state = load_stack_pickle(src, "x", False, "ROLL").state
    tensors = {k: v.clone() for k, v in load_tensordict(state[0].value, "x", False).items()}
    tensors["infer_logprobs"] = torch.zeros(3, 20)
    buf = io.BytesIO()
    torch.save(tensors, buf)
    cls = _dataproto_module("roll.distributed.scheduler.protocol", monkeypatch)
    (tmp_path / "train").mkdir()
    (tmp_path / "train" / "step_000002.pkl").write_bytes(
        pickle.dumps(cls((io.BytesIO(buf.getvalue()), state[1], state[2], state[3])), protocol=5)
    )
    with pytest.raises(ImportFormatError, match=r"shifts it by one"):
        import_run("roll", tmp_path, tmp_path / "out")


def test_report_runs_on_a_skyrl_import(tmp_path):
    """|log p - log q| by hand: 11 kept tokens at 0.1 and 2 at 0.5 -> mean 2.1 / 13 = 0.16154, max 0.5."""
    out = tmp_path / "out"
    assert cli("import", "skyrl", str(SRC["skyrl"]), "--out", str(out)).returncode == 0
    r = cli("report", str(out), "--format", "json")
    assert r.returncode == 0, r.stderr
    metrics = json.loads(r.stdout)["metrics"]
    assert metrics["abs_logprob_diff_mean"] == pytest.approx(2.1 / 13, abs=1e-6)
    assert metrics["abs_logprob_diff_max"] == pytest.approx(0.5, abs=1e-6)


def test_certify_runs_on_a_skyrl_import(tmp_path):
    """Every kept pair differs by 0.1 or 0.5 in log space: none is bitwise equal, so the run is not certified."""
    out = tmp_path / "out"
    assert cli("import", "skyrl", str(SRC["skyrl"]), "--out", str(out)).returncode == 0
    r = cli("certify", str(out))
    assert r.returncode != 2, r.stderr
    assert "13 of 13 pairs differ" in r.stdout


MOE = DUMPS.parents[2] / "sample_data" / "tiny-qwen3-moe"


def _rescore(imported: Path, out: Path) -> dict:
    r = cli(
        "rescore", str(imported), "--out", str(out), "--trainer-checkpoint", str(MOE), "--temperature", "1",
        "--trainer-batch-tokens", "1", "--format", "json",
    )  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout)["report"]


@pytest.mark.slow
def test_skyrl_routes_show_flip_rates_after_rescore(tmp_path):
    """The routes in the dump are the checkpoint's own top-2 (the builder's forward): rescored by it, no token
    flips. Rows: 10 + 7 + 8 = 25 captured (the last token of each is never fed forward), 2 MoE layers each;
    rows predicting no kept token: 4 + 2 + 5 predict prompt tokens, 1 the masked completion token: 12.
    An off-by-one in the left padding or the packed
    offsets would compare other tokens' routes and flip."""
    out = tmp_path / "imported"
    r = cli(
        "import", "skyrl", str(SRC["skyrl"]), "--out", str(out),
        "--routes", str(SRC["skyrl"]), "--routes-format", "skyrl", "--routes-config", str(MOE),
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    manifest = json.loads((out / "manifest.json").read_text())
    assert (manifest["routes"]["rows"], manifest["routes"]["missing_captures"]) == (25, 0)
    routing = _rescore(out, tmp_path / "rescored")["routing"]
    assert (routing["tokens_compared"], routing["tokens_flipped"]) == (13, 0)
    assert (routing["prompt_rows_compared"], routing["prompt_rows_flipped"]) == (12, 0)


@pytest.mark.slow
def test_a_verl_import_gets_its_trainer_side_from_rescore(tmp_path):
    """The sampler side is the model's logprob minus 0.1 (0.5 twice): rescored at T = 1 by the same
    checkpoint, |log p - log q| averages 2.1 / 13 and peaks at 0.5 (float32 forwards: within 1e-4)."""
    out = tmp_path / "imported"
    assert cli("import", "verl", str(SRC["verl"]), "--out", str(out)).returncode == 0
    metrics = _rescore(out, tmp_path / "rescored")["metrics"]
    assert metrics["abs_logprob_diff_mean"] == pytest.approx(2.1 / 13, abs=1e-4)
    assert metrics["abs_logprob_diff_max"] == pytest.approx(0.5, abs=1e-4)


def test_a_sampler_only_import_points_at_rescore(tmp_path):
    r = cli("import", "roll", str(SRC["roll"]), "--out", str(tmp_path / "out"))
    assert r.returncode == 0, r.stderr
    assert "next: mismatchscope rescore" in r.stdout and "--temperature T" in r.stdout
    assert "sampler's side only" in r.stderr


def test_report_and_certify_on_a_sampler_only_import_name_rescore(tmp_path):
    """Before rescore every trainer logprob is empty: the refusal says why and what to run, not 'find where
    the run produced' a NaN it never produced."""
    from mismatchscope.api import report
    from mismatchscope.certify.load import load
    from mismatchscope.errors import NoTokensError

    out = tmp_path / "out"
    import_run("roll", SRC["roll"], out)
    with pytest.raises(NoTokensError, match="finite logprobs") as e:
        report(out)
    assert e.value.hint is not None and f"mismatchscope rescore {out}" in e.value.hint
    with pytest.raises(InputError, match="13 of 13 tokens") as e:
        load(out)
    assert e.value.hint is not None and "sampler's side only" in e.value.hint


def test_a_roll_dump_with_only_val_says_where_the_steps_are(tmp_path):
    (tmp_path / "dump" / "val").mkdir(parents=True)
    (tmp_path / "dump" / "val" / "step_000002.pkl").write_bytes(
        (SRC["roll"] / "train" / "step_000002.pkl").read_bytes()
    )
    with pytest.raises(InputError, match="only val/ holds step files") as e:
        import_run("roll", tmp_path / "dump", tmp_path / "out")
    assert e.value.hint == f"point at {tmp_path / 'dump' / 'val'} to import them"
    assert not (tmp_path / "out").exists()  # refused before anything was written


def test_doctor_runs_on_a_skyrl_import(tmp_path):
    out = tmp_path / "out"
    assert cli("import", "skyrl", str(SRC["skyrl"]), "--out", str(out)).returncode == 0
    r = cli("doctor", str(out))
    assert r.returncode in (0, 1), r.stderr  # 1: a pipeline problem is likely; 2 would be an error
    assert "policy_lag" in r.stdout
