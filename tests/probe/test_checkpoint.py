"""Checkpoint validation, fingerprinting, tokenizer checks and prompt tokenisation.

No engine here: these run in seconds and pin the error messages a user sees.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import struct
from pathlib import Path

import pytest

from mismatchscope.errors import CheckpointError, PromptError, TokenizerMismatchError
from mismatchscope.probe.checkpoint import inspect_checkpoint
from mismatchscope.probe.tokenizer import check_tokenizer, load_tokenizer, tokenize_prompts
from tests.helpers import REPO
from tests.probe.refusals import checkpoint_copy, edit_json, needs_checkpoint, refused_probe


def _copy(src, dst):
    shutil.copytree(src, dst)
    return dst


def _small_tokenizer(texts: list[str], *, lowercase: bool = False):
    """A real byte-level BPE tokenizer trained on ``texts``: a different vocabulary from the checkpoint's."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    if lowercase:
        tok.normalizer = normalizers.Lowercase()
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=300, special_tokens=["<eos>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tok.train_from_iterator(texts * 20, trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<eos>", clean_up_tokenization_spaces=False)


# ------------------------------------------------------------ inspect_checkpoint


def test_inspect_reads_the_config_of_both_models(dense_info, moe_info, dense_dir):
    config = json.loads((dense_dir / "config.json").read_text())
    assert dense_info.model_type == "qwen3" and not dense_info.is_moe
    assert moe_info.model_type == "qwen3_moe" and moe_info.is_moe
    assert dense_info.vocab_size == config["vocab_size"]
    assert dense_info.max_model_len == config["max_position_embeddings"]
    assert dense_info.weight_files == ("model.safetensors",) and not dense_info.pickle_weights
    assert len(dense_info.sha256) == 64 and dense_info.sha256 != moe_info.sha256


def test_sha256_is_stable_and_sees_any_hashed_file_change(dense_dir, dense_info, tmp_path):
    copy = _copy(dense_dir, tmp_path / "copy")
    assert inspect_checkpoint(copy).sha256 == dense_info.sha256  # the path is not part of it
    cfg = copy / "tokenizer_config.json"
    cfg.write_text(cfg.read_text() + "\n")
    assert inspect_checkpoint(copy).sha256 != dense_info.sha256
    (copy / "notes.txt").write_text("not part of the model")
    cfg.write_text((dense_dir / "tokenizer_config.json").read_text())
    assert inspect_checkpoint(copy).sha256 == dense_info.sha256


def test_missing_checkpoint_folder(tmp_path):
    with pytest.raises(CheckpointError, match="does not exist") as err:
        inspect_checkpoint(tmp_path / "nope")
    assert isinstance(err.value, OSError)  # the stdlib type it replaces


def test_missing_config_json(tmp_path):
    (tmp_path / "model.safetensors").write_bytes(b"x")
    with pytest.raises(CheckpointError, match="no config.json"):
        inspect_checkpoint(tmp_path)


def test_no_weights(dense_dir, tmp_path):
    shutil.copy(dense_dir / "config.json", tmp_path / "config.json")
    with pytest.raises(CheckpointError, match="has no weights"):
        inspect_checkpoint(tmp_path)


def test_pickle_weights_are_refused_unless_allowed(dense_dir, tmp_path):
    shutil.copy(dense_dir / "config.json", tmp_path / "config.json")
    (tmp_path / "pytorch_model.bin").write_bytes(b"a pickle would run code")
    with pytest.raises(CheckpointError, match="pickle") as err:
        inspect_checkpoint(tmp_path)
    assert "allow-pickle" in str(err.value) and "allow_pickle" in str(err.value)
    info = inspect_checkpoint(tmp_path, allow_pickle=True)
    assert info.pickle_weights and info.weight_files == ("pytorch_model.bin",)


def test_safetensors_win_over_pickle_next_to_them(dense_dir, dense_info, tmp_path):
    copy = _copy(dense_dir, tmp_path / "copy")
    (copy / "pytorch_model.bin").write_bytes(b"stale pickle")
    info = inspect_checkpoint(copy)
    assert info.weight_files == ("model.safetensors",) and info.sha256 == dense_info.sha256


def test_custom_model_code_needs_trust_remote_code(dense_dir, tmp_path):
    config = json.loads((dense_dir / "config.json").read_text())
    config.update(model_type="my_own_lm", auto_map={"AutoModelForCausalLM": "modeling_mine.MyLM"})
    (tmp_path / "config.json").write_text(json.dumps(config))
    (tmp_path / "model.safetensors").write_bytes(b"\x02\0\0\0\0\0\0\0{}")  # a valid safetensors file holding no tensor
    with pytest.raises(CheckpointError, match="trust-remote-code"):
        inspect_checkpoint(tmp_path)
    assert inspect_checkpoint(tmp_path, trust_remote_code=True).model_type == "my_own_lm"


# ------------------------------------------------------------ tokenizers


def test_own_tokenizer_passes_every_check(dense_tokenizer, dense_info, prompt_texts, moe_dir):
    check_tokenizer(dense_tokenizer, dense_info, prompt_texts, other=load_tokenizer(moe_dir))


def test_missing_tokenizer(dense_dir, tmp_path):
    shutil.copy(dense_dir / "config.json", tmp_path / "config.json")
    with pytest.raises(CheckpointError, match="cannot load a tokenizer"):
        load_tokenizer(tmp_path)


def test_tokenizer_larger_than_the_model_vocabulary(dense_tokenizer, dense_info, prompt_texts):
    small = dataclasses.replace(dense_info, vocab_size=len(dense_tokenizer) - 10)
    with pytest.raises(TokenizerMismatchError, match=f"vocab_size is {small.vocab_size}"):
        check_tokenizer(dense_tokenizer, small, prompt_texts)


def test_tokenizer_with_another_vocabulary_is_refused(dense_tokenizer, dense_info, prompt_texts):
    other = _small_tokenizer(["the quick brown fox jumps over the lazy dog 0123456789+="])
    with pytest.raises(TokenizerMismatchError, match="different vocabularies") as err:
        check_tokenizer(dense_tokenizer, dense_info, prompt_texts, other=other)
    assert "tokens only in" in str(err.value) or "other ids" in str(err.value)


def test_tokenizers_that_encode_a_prompt_differently_are_refused(
    dense_dir, dense_tokenizer, dense_info, prompt_texts, tmp_path
):
    """Same vocabulary, no BOS: the first differing prompt and its ids are named."""
    copy = _copy(dense_dir, tmp_path / "nobos")
    spec = json.loads((copy / "tokenizer.json").read_text())
    spec["post_processor"] = None
    (copy / "tokenizer.json").write_text(json.dumps(spec))
    cfg = json.loads((copy / "tokenizer_config.json").read_text())
    cfg["add_bos_token"] = False
    (copy / "tokenizer_config.json").write_text(json.dumps(cfg))
    other = load_tokenizer(copy)
    if other.encode(prompt_texts[0]) == dense_tokenizer.encode(prompt_texts[0]):
        pytest.skip("this tokenizer adds no special tokens, so removing them changes nothing")
    with pytest.raises(TokenizerMismatchError, match="encode prompt 0") as err:
        check_tokenizer(dense_tokenizer, dense_info, prompt_texts, other=other)
    assert str(dense_tokenizer.encode(prompt_texts[0])[:3])[:-1] in str(err.value)


def test_prompt_that_does_not_round_trip_is_refused(dense_info):
    lower = _small_tokenizer(["hello world 123+456="], lowercase=True)
    with pytest.raises(TokenizerMismatchError, match="prompt 1 does not round-trip"):
        check_tokenizer(lower, dense_info, ["hello", "Hello"])


# ------------------------------------------------------------ tokenize_prompts


def test_tokenize_prompts_matches_the_tokenizer(dense_tokenizer, dense_info, prompt_texts):
    ids = tokenize_prompts(dense_tokenizer, prompt_texts, max_model_len=dense_info.max_model_len, max_tokens=16)
    assert ids == [dense_tokenizer.encode(t) for t in prompt_texts]


def test_empty_prompt_list(dense_tokenizer):
    with pytest.raises(PromptError, match="no prompts"):
        tokenize_prompts(dense_tokenizer, [], max_model_len=64, max_tokens=16)


def test_empty_prompt(dense_tokenizer):
    with pytest.raises(PromptError, match="prompt 1 is empty"):
        tokenize_prompts(dense_tokenizer, ["1+2=", ""], max_model_len=64, max_tokens=16)


def test_prompt_longer_than_the_context(dense_tokenizer, dense_info):
    long_prompt = "+".join(str(i) for i in range(200)) + "="
    n = len(dense_tokenizer.encode(long_prompt))
    limit = dense_info.max_model_len
    with pytest.raises(PromptError) as err:
        tokenize_prompts(dense_tokenizer, ["1+2=", long_prompt], max_model_len=limit, max_tokens=16)
    message = str(err.value)
    assert "prompt 1" in message and f"{n} tokens" in message and f"max_model_len={limit}" in message
    assert "--max-tokens" in message


def test_prompt_plus_max_tokens_over_the_context(dense_tokenizer, dense_info):
    limit = dense_info.max_model_len
    with pytest.raises(PromptError, match=f"max_tokens={limit} it needs"):
        tokenize_prompts(dense_tokenizer, ["1+2="], max_model_len=limit, max_tokens=limit)


TINY = REPO / "sample_data" / "tiny-qwen3"


def test_a_file_given_as_a_checkpoint_is_named_as_a_file():
    from mismatchscope.probe.checkpoint import inspect_checkpoint

    with pytest.raises(CheckpointError, match="config.json' is a file, not a checkpoint folder"):
        inspect_checkpoint(TINY / "config.json")


def _safetensors(header: dict, data: bytes) -> bytes:
    raw = json.dumps(header).encode()
    return struct.pack("<Q", len(raw)) + raw + data


@needs_checkpoint
def test_safetensors_headers_are_read_up_front(tmp_path):
    ckpt = checkpoint_copy(tmp_path)
    weights = ckpt / "model.safetensors"
    huge = int.from_bytes(b"\xff" * 8, "little")
    cases = [
        (b"", "it is 0 bytes, too short for the 8-byte header length"),
        (b"\xff" * 4096, f"its header length ({huge} bytes) does not fit the file (4096 bytes)"),
        (struct.pack("<Q", 4) + b"[1] ", "its header is not a JSON object"),
        (struct.pack("<Q", 3) + b"{x}", "its header is not JSON"),
        (_safetensors({"w": {"dtype": "F32", "shape": [2]}}, b""), "tensor 'w' has no valid data_offsets"),
    ]
    # a header promising 8 bytes of data where 4 follow: 8 (length) + header + 8 > the file's 8 + header + 4
    truncated = _safetensors({"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}, b"\0" * 4)
    header_len = len(truncated) - 8 - 4
    cases.append(
        (truncated, f"its tensors need {8 + header_len + 8} bytes but the file has {8 + header_len + 4} (truncated?)")
    )
    for content, problem in cases:
        weights.write_bytes(content)
        with pytest.raises(CheckpointError) as err:
            inspect_checkpoint(ckpt)
        assert str(err.value) == (
            f"{str(weights)!r} is not a readable safetensors file: {problem} (the file is empty, "
            "truncated or not safetensors: copy or save the checkpoint again)"
        )
    weights.write_bytes(
        _safetensors(
            {"__metadata__": {"format": "pt"}, "w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}, b"\0" * 8
        )
    )
    assert inspect_checkpoint(ckpt).weight_files == ("model.safetensors",)  # a whole file passes


@needs_checkpoint
def test_an_empty_weights_file_is_refused_by_the_cli(tmp_path):
    ckpt = checkpoint_copy(tmp_path)
    (ckpt / "model.safetensors").write_bytes(b"")
    line = refused_probe(tmp_path, "--sampler", "hf", checkpoint=ckpt)
    assert line.startswith(
        f"error: {str(ckpt / 'model.safetensors')!r} is not a readable safetensors file: it is 0 bytes"
    )


@needs_checkpoint
def test_an_unknown_model_type_is_refused_before_the_run(tmp_path):
    import transformers

    ckpt = checkpoint_copy(tmp_path)
    edit_json(ckpt / "config.json", model_type="qwen9000")
    assert refused_probe(tmp_path, "--sampler", "hf", checkpoint=ckpt) == (
        f'error: config.json\'s model_type "qwen9000" is not a model transformers {transformers.__version__} knows '
        "(fix model_type in config.json, or upgrade transformers if the model is newer than it)"
    )


@needs_checkpoint
@pytest.mark.parametrize(
    "key, value, shown",
    [
        ("vocab_size", True, "true"),
        ("vocab_size", "320", '"320"'),
        ("vocab_size", 320.0, "320.0"),
        ("max_position_embeddings", -1, "-1"),
        ("max_position_embeddings", False, "false"),
    ],
)
def test_a_malformed_size_in_config_json(tmp_path, key, value, shown):
    ckpt = checkpoint_copy(tmp_path)
    edit_json(ckpt / "config.json", **{key: value})
    with pytest.raises(CheckpointError) as err:
        inspect_checkpoint(ckpt)
    assert str(err.value) == (
        f"config.json in {str(ckpt)!r} is malformed: {key} should be a positive integer, got {shown} "
        "(fix config.json (save_pretrained writes it))"
    )


def _foreign_tokenizer(folder: Path) -> None:
    """A real byte-level BPE of 300 tokens (fits the 320-row embedding) whose specials sit at other ids."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=300, special_tokens=["<eos>", "<pad>", "<bos>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tok.train_from_iterator(["12+34=46", "1+1=2 and 7+8=15"] * 20, trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<bos>",
        eos_token="<eos>",
        pad_token="<pad>",
        clean_up_tokenization_spaces=False,
    )
    for name in ("tokenizer.json", "tokenizer_config.json"):
        (folder / name).unlink()
    fast.save_pretrained(folder)


@needs_checkpoint
def test_a_foreign_tokenizer_that_fits_the_embedding_is_refused(tmp_path):
    ckpt = checkpoint_copy(tmp_path)
    _foreign_tokenizer(ckpt)
    tokenizer = load_tokenizer(ckpt)
    assert len(tokenizer) < 320 and tokenizer.bos_token_id == 2  # passes the size check, round-trips prompts
    with pytest.raises(TokenizerMismatchError) as err:
        check_tokenizer(tokenizer, inspect_checkpoint(ckpt), ["1+1="])
    assert str(err.value) == (
        "the tokenizer's BOS '<bos>' is id 2, but config.json's bos_token_id is 1: the tokenizer is "
        "not this checkpoint's (use the tokenizer saved with this checkpoint)"
    )


@needs_checkpoint
def test_eos_may_be_any_of_the_configured_ones(tmp_path, dense_tokenizer):
    ckpt = checkpoint_copy(tmp_path)
    edit_json(ckpt / "config.json", eos_token_id=5)  # the tokenizer's EOS is 2
    edit_json(ckpt / "generation_config.json", eos_token_id=[5, 2])
    check_tokenizer(dense_tokenizer, inspect_checkpoint(ckpt), ["1+1="])  # 2 is in generation_config.json: accepted
    (ckpt / "generation_config.json").unlink()
    with pytest.raises(TokenizerMismatchError) as err:
        check_tokenizer(dense_tokenizer, inspect_checkpoint(ckpt), ["1+1="])
    assert str(err.value).startswith("the tokenizer's EOS '<eos>' is id 2, but config.json's eos_token_id is 5:")
    edit_json(ckpt / "config.json", eos_token_id=2, bos_token_id=400)
    with pytest.raises(TokenizerMismatchError, match="config.json's bos_token_id 400 is not a token of the tokenizer"):
        check_tokenizer(dense_tokenizer, inspect_checkpoint(ckpt), ["1+1="])


@needs_checkpoint
@pytest.mark.parametrize("name", ["tiny-qwen3", "tiny-qwen3-moe", "tiny-qwen3-later"])
def test_the_bundled_models_pass_the_tokenizer_checks(name):
    from tests.probe.conftest import checkpoint_dir

    folder = checkpoint_dir(name)
    check_tokenizer(load_tokenizer(folder), inspect_checkpoint(folder), ["12+34=", "1+1="])
