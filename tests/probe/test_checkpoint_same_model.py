""" "Same model" means the same architecture, and a checkpoint's weights cover its config.

A trainer checkpoint that differs from the sampler's in any config field of
the forward pass is refused (its gap would read as policy lag); a checkpoint
whose safetensors miss or add tensors against its own config is refused, for
the sampler's checkpoint too (transformers would fill a missing layer with
random weights and only warn).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from mismatchscope.errors import CheckpointError
from tests.helpers import cli_no_engine as cli

pytest.importorskip("torch")
pytest.importorskip("transformers")


def _copy(src: Path, dst: Path, **config) -> Path:
    out = Path(shutil.copytree(src, dst))
    cfg = json.loads((out / "config.json").read_text())
    cfg.update(config)
    (out / "config.json").write_text(json.dumps(cfg))
    return out


@pytest.fixture(scope="module")
def later(tmp_path_factory) -> Path:
    from tests.probe.conftest import checkpoint_dir

    return checkpoint_dir("tiny-qwen3-later")


@pytest.mark.parametrize(
    "change, shown",
    [
        (
            {"num_hidden_layers": 3, "layer_types": ["full_attention"] * 3},
            "num_hidden_layers 2 (sampler) vs 3 (trainer)",
        ),
        (
            {"rope_parameters": {"rope_theta": 1000000.0, "rope_type": "default"}},
            'rope_parameters {"rope_theta": 10000.0, "rope_type": "default"} (sampler) vs '
            '{"rope_theta": 1000000.0, "rope_type": "default"} (trainer)',
        ),
        ({"rms_norm_eps": 1e-5}, "rms_norm_eps 1e-06 (sampler) vs 1e-05 (trainer)"),
        ({"tie_word_embeddings": True}, "tie_word_embeddings False (sampler) vs True (trainer)"),
        ({"sliding_window": 64, "use_sliding_window": True}, "sliding_window None (sampler) vs 64 (trainer)"),
        ({"final_logit_softcapping": 30.0}, "final_logit_softcapping absent (sampler) vs 30.0 (trainer)"),
    ],
)
def test_a_trainer_checkpoint_of_another_architecture_is_refused(
    later, dense_info, dense_tokenizer, prompt_texts, tmp_path, change, shown
):
    from mismatchscope.probe.policy_lag import open_trainer_checkpoint

    other = _copy(later, tmp_path / "other", **change)
    with pytest.raises(CheckpointError) as err:
        open_trainer_checkpoint(other, dense_info, dense_tokenizer, prompt_texts)
    assert f"is not the same model as the sampler's: {shown}" in str(err.value)


def test_fields_outside_the_forward_pass_may_differ(later, dense_info, dense_tokenizer, prompt_texts, tmp_path):
    from mismatchscope.probe.policy_lag import open_trainer_checkpoint

    other = _copy(
        later,
        tmp_path / "other",
        transformers_version="5.0.0",
        use_cache=False,
        attention_dropout=0.1,
        initializer_range=0.01,
    )
    assert open_trainer_checkpoint(other, dense_info, dense_tokenizer, prompt_texts).same_as_sampler is False


def test_weights_that_miss_a_layer_of_their_config_are_refused(dense_dir, tmp_path):
    from mismatchscope.probe.checkpoint import check_weights_cover_config, inspect_checkpoint

    three = _copy(dense_dir, tmp_path / "three", num_hidden_layers=3, layer_types=["full_attention"] * 3)
    with pytest.raises(
        CheckpointError,
        match=r"do not match its config.json: \d+ tensor\(s\) its model needs are "
        r"not in the files \(e.g. model.layers.2.",
    ):
        check_weights_cover_config(inspect_checkpoint(three))


def test_weights_with_a_tensor_the_model_has_no_place_for_are_refused(dense_dir, tmp_path):
    from safetensors.numpy import load_file, save_file

    from mismatchscope.probe.checkpoint import check_weights_cover_config, inspect_checkpoint

    one = _copy(dense_dir, tmp_path / "one", num_hidden_layers=1, layer_types=["full_attention"])
    with pytest.raises(
        CheckpointError,
        match=r"tensor\(s\) in the files have no place in its model "
        r"\(e.g. model.layers.1.",
    ):
        check_weights_cover_config(inspect_checkpoint(one))
    extra = Path(shutil.copytree(dense_dir, tmp_path / "extra"))
    tensors = load_file(extra / "model.safetensors")
    tensors["model.extra.weight"] = tensors["model.norm.weight"].copy()
    save_file(tensors, extra / "model.safetensors")
    with pytest.raises(CheckpointError, match=r"1 tensor\(s\) in the files .* \(e.g. model.extra.weight\)"):
        check_weights_cover_config(inspect_checkpoint(extra))


def test_the_bundled_checkpoints_cover_their_configs(dense_dir, moe_dir, later):
    from mismatchscope.probe.checkpoint import check_weights_cover_config, inspect_checkpoint

    for d in (dense_dir, moe_dir, later):  # the MoE's per-expert tensors load into fused ones: renamed, not missing
        check_weights_cover_config(inspect_checkpoint(d))


@pytest.mark.slow
def test_probe_refuses_a_checkpoint_missing_a_layer_before_anything_starts(dense_dir, tmp_path):
    three = _copy(dense_dir, tmp_path / "three", num_hidden_layers=3, layer_types=["full_attention"] * 3)
    prompts = tmp_path / "p.jsonl"
    prompts.write_text(json.dumps({"prompt": "hello"}) + "\n")
    out = tmp_path / "run"
    r = cli("probe", str(three), "--prompts", str(prompts), "--sampler", "hf", "--out", str(out))
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
    assert r.stderr.startswith("error: the weights in") and "model.layers.2." in r.stderr
    assert not out.exists()
