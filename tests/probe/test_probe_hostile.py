"""Hostile inputs to ``probe``: each is refused with one line naming what is wrong, before the
run directory exists (or, for a server's answer, before anything is recorded).

Pins, case by case: a prompt holding a lone surrogate; dtype aliases reaching an engine; an
attention kernel that cannot load here; an empty or garbage safetensors file; engine args vLLM
or the hf sampler would refuse late; server answers whose logprobs or token ids cannot be
right; a bad server timeout, and the message a hanging server gets; an unknown model_type or a
malformed size in config.json; a foreign tokenizer; an ``--out`` that is not a run directory;
a start that fails before its first round leaving nothing behind; the order of the first
lines on stderr. No vLLM engine starts here; the server is the crafted one of
``test_probe_errors`` on loopback.
"""

from __future__ import annotations

import json
import math
import shutil
import struct
import time
from pathlib import Path

import pytest

from mismatchscope import rundir
from mismatchscope.errors import CheckpointError, SamplerError, TokenizerMismatchError, UsageError
from mismatchscope.probe.checkpoint import inspect_checkpoint
from mismatchscope.probe.engine_checks import check_attn_implementation, server_timeout
from mismatchscope.probe.tokenizer import check_tokenizer, load_tokenizer
from mismatchscope.probe.types import SamplerConfig, SamplingConfig, TrainerConfig
from tests.helpers import cli_no_engine as cli
from tests.probe.test_probe_errors import CHECKPOINT, GOOD_CHOICE, _choice, _sample, error_line, server  # noqa: F401

pytestmark = pytest.mark.skipif(not (CHECKPOINT / "config.json").is_file(), reason="needs the bundled tiny-qwen3")

ONE_PROMPT = '{"prompt": "1+1="}\n'


def _prompts(tmp_path: Path, text: str = ONE_PROMPT) -> Path:
    path = tmp_path / "prompts.jsonl"
    path.write_text(text)
    return path


def _refused(tmp_path: Path, *args: str, checkpoint: Path = CHECKPOINT, prompts: Path | None = None) -> str:
    """The one error line of a probe refused before its run directory exists."""
    out = tmp_path / "run"
    r = cli("probe", str(checkpoint), "--out", str(out), "--prompts", str(prompts or _prompts(tmp_path)), *args)
    line = error_line(r)
    assert not out.exists(), "the run directory was made before the refusal"
    return line


def _copy(tmp_path: Path, name: str = "ckpt") -> Path:
    return Path(shutil.copytree(CHECKPOINT, tmp_path / name))


def _edit_json(path: Path, **changes) -> None:
    data = json.loads(path.read_text())
    data.update(changes)
    path.write_text(json.dumps(data))


# ---- 1. prompts -------------------------------------------------------------------------------


def test_a_lone_surrogate_names_the_file_and_line(tmp_path):
    prompts = _prompts(tmp_path, '{"prompt": "1+1="}\n{"prompt": "\\ud800 1+1="}\n')
    assert _refused(tmp_path, prompts=prompts) == (
        f"error: {prompts}:2: \"prompt\" holds '\\ud800', a lone UTF-16 surrogate that is not a character "
        "(write the character itself, or its escaped surrogate pair)"
    )


def test_an_escaped_surrogate_pair_is_one_character(tmp_path):
    from mismatchscope.errors import PromptError
    from mismatchscope.probe.prompts import load_prompts

    p = _prompts(tmp_path, '{"prompt": "\\ud83d\\ude00 1+1=", "answer": "\\ud800"}\n')
    with pytest.raises(PromptError, match=r":1: \"answer\" holds '\\ud800'"):  # the prompt's pair was fine
        load_prompts(p)
    p.write_text('{"prompt": "\\ud83d\\ude00 1+1="}\n')
    assert load_prompts(p)[0].text == "\U0001f600 1+1="


# ---- 2. dtype aliases ---------------------------------------------------------------------------


def test_dtype_aliases_reach_engines_and_manifest_spelled_out(tmp_path):
    from mismatchscope.probe.options import ProbeOptions, canonical_options
    from mismatchscope.probe.samplers.vllm_offline import VLLMOfflineSampler

    opts = ProbeOptions(
        checkpoint=CHECKPOINT,
        prompts=tmp_path / "p",
        out=tmp_path / "o",
        sampling=SamplingConfig(),
        sampler=SamplerConfig(dtype="bf16"),
        trainer=TrainerConfig(dtype="fp32"),
    )
    canon = canonical_options(opts)
    assert (canon.sampler.dtype, canon.trainer.dtype) == ("bfloat16", "float32")
    info = inspect_checkpoint(CHECKPOINT)
    for alias, name in (("bf16", "bfloat16"), ("fp32", "float32"), ("half", "float16"), ("auto", "auto")):
        sampler = VLLMOfflineSampler(SamplerConfig(dtype=alias), info)  # no sampling given: no engine starts
        assert sampler.engine_args(SamplingConfig())["dtype"] == name


def test_an_hf_probe_with_aliases_records_the_canonical_dtypes(tmp_path):
    out = tmp_path / "run"
    r = cli(
        "probe",
        str(CHECKPOINT),
        "--out",
        str(out),
        "--prompts",
        str(_prompts(tmp_path)),
        "--sampler",
        "hf",
        "--sampler-dtype",
        "fp32",
        "--trainer-dtype",
        "float",
        "-n",
        "1",
        "--max-tokens",
        "2",
        "--format",
        "json",
    )
    assert r.returncode == 0, r.stderr[-2000:]
    config = json.loads((out / "manifest.json").read_text())["config"]
    assert (config["sampler"]["dtype"], config["trainer"]["dtype"]) == ("float32", "float32")


# ---- 3/4/13. attention kernels ---------------------------------------------------------------------


def _has(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


@pytest.mark.parametrize(
    "kernel, module, package",
    [
        ("flash_attention_2", "flash_attn", "flash-attn"),
        ("flash_attention_3", "flash_attn_interface", "flash-attn-3"),
    ],
)
def test_flash_attention_without_its_package(tmp_path, kernel, module, package):
    if _has(module):
        pytest.skip(f"{module} is installed here")
    assert _refused(tmp_path, "--sampler", "hf", "--attn-implementation", kernel) == (
        f"error: --attn-implementation {kernel}: the {package} package is not installed (no module {module}) "
        f"(pip install {package} on a CUDA machine, or use sdpa)"
    )


def test_flash_attention_installed_but_no_cuda(monkeypatch):
    import torch

    from mismatchscope.probe import engine_checks

    monkeypatch.setattr(engine_checks, "installed", lambda module: True)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(UsageError) as err:
        check_attn_implementation("flash_attention_2")
    assert str(err.value) == (
        "--attn-implementation flash_attention_2: FlashAttention needs a CUDA device and none "
        "is visible (use sdpa (or eager))"
    )
    with pytest.raises(UsageError, match="does not run on cpu"):
        check_attn_implementation("paged|flash_attention_2", device="cpu")


def test_a_hub_kernel_needs_the_kernels_package(tmp_path):
    if _has("kernels"):
        pytest.skip("kernels is installed here")
    assert _refused(tmp_path, "--sampler", "hf", "--attn-implementation", "nonexistent-org/nokernel") == (
        "error: --attn-implementation 'nonexistent-org/nokernel' is a hub kernel, and loading one needs the kernels "
        "package, which is not installed (pip install kernels (it downloads the kernel when the model loads), or use sdpa)"
    )


@pytest.mark.parametrize("name", ["paged|sdpaa", "paged|", "a/b/c", "sdpa "])
def test_names_that_are_no_kernel(name):
    with pytest.raises(UsageError, match=f"--attn-implementation {name!r} is not an attention implementation"):
        check_attn_implementation(name)


def test_known_kernels_pass():
    for name in ("eager", "sdpa", "paged|eager", "paged|sdpa", "flex_attention", None):
        check_attn_implementation(name)


@pytest.mark.parametrize(
    "args, message",
    [
        (
            ["--attn-implementation", "paged|sdpaa"],
            "--attn-implementation 'paged|sdpaa' is not an attention implementation "
            "(use one of eager, sdpa, flash_attention_2, flash_attention_3, flash_attention_4, flex_attention (or a hub kernel, org/repo))",
        ),
        (
            ["--sampler", "hf", "--engine-arg", "attn_implementation=sdpaa"],
            "--engine-arg attn_implementation 'sdpaa' is not an "
            "attention implementation (use one of eager, sdpa, flash_attention_2, flash_attention_3, flash_attention_4, "
            "flex_attention (or a hub kernel, org/repo))",
        ),
        (
            ["--sampler", "hf", "--engine-arg", "bogus=1"],
            "the hf sampler does not take engine args ['bogus'] "
            "(it takes attn_implementation, trust_remote_code, batch_size)",
        ),
        (
            ["--sampler", "hf", "--engine-arg", "batch_size=abc"],
            '--engine-arg batch_size="abc" is not a positive integer '
            "(rows per generate call, e.g. --engine-arg batch_size=16)",
        ),
        (
            ["--sampler", "hf", "--engine-arg", "batch_size=0"],
            "--engine-arg batch_size=0 is not a positive integer "
            "(rows per generate call, e.g. --engine-arg batch_size=16)",
        ),
        (
            ["--sampler", "hf", "--engine-arg", "trust_remote_code=yes"],
            '--engine-arg trust_remote_code="yes" is not true or false',
        ),
    ],
)
def test_sampler_options_refused_before_the_run(tmp_path, args, message):
    assert _refused(tmp_path, *args) == f"error: {message}"


# ---- 5/14/27. the checkpoint's files ----------------------------------------------------------------


def _safetensors(header: dict, data: bytes) -> bytes:
    raw = json.dumps(header).encode()
    return struct.pack("<Q", len(raw)) + raw + data


def test_safetensors_headers_are_read_up_front(tmp_path):
    ckpt = _copy(tmp_path)
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


def test_an_empty_weights_file_is_refused_by_the_cli(tmp_path):
    ckpt = _copy(tmp_path)
    (ckpt / "model.safetensors").write_bytes(b"")
    line = _refused(tmp_path, "--sampler", "hf", checkpoint=ckpt)
    assert line.startswith(
        f"error: {str(ckpt / 'model.safetensors')!r} is not a readable safetensors file: it is 0 bytes"
    )


def test_an_unknown_model_type_is_refused_before_the_run(tmp_path):
    import transformers

    ckpt = _copy(tmp_path)
    _edit_json(ckpt / "config.json", model_type="qwen9000")
    assert _refused(tmp_path, "--sampler", "hf", checkpoint=ckpt) == (
        f'error: config.json\'s model_type "qwen9000" is not a model transformers {transformers.__version__} knows '
        "(fix model_type in config.json, or upgrade transformers if the model is newer than it)"
    )


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
    ckpt = _copy(tmp_path)
    _edit_json(ckpt / "config.json", **{key: value})
    with pytest.raises(CheckpointError) as err:
        inspect_checkpoint(ckpt)
    assert str(err.value) == (
        f"config.json in {str(ckpt)!r} is malformed: {key} should be a positive integer, got {shown} "
        "(fix config.json (save_pretrained writes it))"
    )


# ---- 28. the tokenizer belongs to the checkpoint ----------------------------------------------------


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


def test_a_foreign_tokenizer_that_fits_the_embedding_is_refused(tmp_path):
    ckpt = _copy(tmp_path)
    _foreign_tokenizer(ckpt)
    tokenizer = load_tokenizer(ckpt)
    assert len(tokenizer) < 320 and tokenizer.bos_token_id == 2  # passes the size check, round-trips prompts
    with pytest.raises(TokenizerMismatchError) as err:
        check_tokenizer(tokenizer, inspect_checkpoint(ckpt), ["1+1="])
    assert str(err.value) == (
        "the tokenizer's BOS '<bos>' is id 2, but config.json's bos_token_id is 1: the tokenizer is "
        "not this checkpoint's (use the tokenizer saved with this checkpoint)"
    )


def test_eos_may_be_any_of_the_configured_ones(tmp_path, dense_tokenizer):
    ckpt = _copy(tmp_path)
    _edit_json(ckpt / "config.json", eos_token_id=5)  # the tokenizer's EOS is 2
    _edit_json(ckpt / "generation_config.json", eos_token_id=[5, 2])
    check_tokenizer(dense_tokenizer, inspect_checkpoint(ckpt), ["1+1="])  # 2 is in generation_config.json: accepted
    (ckpt / "generation_config.json").unlink()
    with pytest.raises(TokenizerMismatchError) as err:
        check_tokenizer(dense_tokenizer, inspect_checkpoint(ckpt), ["1+1="])
    assert str(err.value).startswith("the tokenizer's EOS '<eos>' is id 2, but config.json's eos_token_id is 5:")
    _edit_json(ckpt / "config.json", eos_token_id=2, bos_token_id=400)
    with pytest.raises(TokenizerMismatchError, match="config.json's bos_token_id 400 is not a token of the tokenizer"):
        check_tokenizer(dense_tokenizer, inspect_checkpoint(ckpt), ["1+1="])


@pytest.mark.parametrize("name", ["tiny-qwen3", "tiny-qwen3-moe", "tiny-qwen3-later"])
def test_the_bundled_models_pass_the_tokenizer_checks(name):
    from tests.probe.conftest import checkpoint_dir

    folder = checkpoint_dir(name)
    check_tokenizer(load_tokenizer(folder), inspect_checkpoint(folder), ["12+34=", "1+1="])


# ---- 6. engine args vLLM would refuse late ----------------------------------------------------------


def test_vllm_engine_args_are_checked_against_vllm(tmp_path):
    pytest.importorskip("vllm", reason="needs vLLM's declarations")
    import vllm

    from mismatchscope.probe.engine_checks import check_vllm_engine_args

    for args, message in [
        (
            {"bogus_option": 1},
            f"--engine-arg bogus_option is not an option of vllm.LLM (vLLM {vllm.__version__}) "
            "(see vLLM's EngineArgs for its options)",
        ),
        (
            {"max_num_seq": 2},
            f"--engine-arg max_num_seq is not an option of vllm.LLM (vLLM {vllm.__version__}) "
            "(did you mean max_num_seqs?)",
        ),
        (
            {"max_num_seqs": "abc"},
            '--engine-arg max_num_seqs="abc": Input should be a valid integer, unable to parse string as an integer',
        ),
        (
            {"max_num_seqs": 2.5},
            "--engine-arg max_num_seqs=2.5: Input should be a valid integer, got a number with a fractional part",
        ),
    ]:
        with pytest.raises(UsageError) as err:
            check_vllm_engine_args(args)
        assert str(err.value) == message
    check_vllm_engine_args(
        {"max_num_seqs": 2, "kv_cache_dtype": "auto", "compilation_config": 0, "enable_prefix_caching": True}
    )
    assert _refused(tmp_path, "--engine-arg", "bogus_option=1").startswith(
        "error: --engine-arg bogus_option is not an option"
    )


# ---- 7/8/9/11/12. what a vllm-server answers ---------------------------------------------------------


def _raw_answer(server, body: bytes):
    url, handler = server
    handler.routes["completions"] = (200, body)
    return _sample(url)


@pytest.mark.parametrize(
    "answer, message",
    [
        (
            _choice(logprobs__top_logprobs=[{"token_id:9": -0.1}, None]),
            "POST /v1/completions: choices[0].logprobs.top_logprobs[0] does not list the sampled token 5 (tokens[0])",
        ),
        (
            _choice(logprobs__token_logprobs=[None, None]),
            "POST /v1/completions: choices[0].logprobs.token_logprobs[0] should be a number, got null",
        ),
        (
            _choice(logprobs__tokens=["token_id:5", "token_id:-3"], token_ids=None),
            "POST /v1/completions: choices[0].logprobs.tokens: 'token_id:-3' is not a token id of the model (0..319) "
            "(is the server serving another model or tokenizer?)",
        ),
        (
            _choice(logprobs__tokens=["token_id:5", "token_id:320"], token_ids=None),  # vocab_size 320: ids 0..319
            "POST /v1/completions: choices[0].logprobs.tokens: 'token_id:320' is not a token id of the model (0..319) "
            "(is the server serving another model or tokenizer?)",
        ),
        (
            _choice(logprobs__top_logprobs=[{"token_id:5": -0.5, "token_id:-1": -2.0}, None]),
            "POST /v1/completions: choices[0].logprobs.top_logprobs[0]: 'token_id:-1' is not a token id of the model (0..319) "
            "(is the server serving another model or tokenizer?)",
        ),
        (
            _choice(logprobs__token_logprobs=[2.5, -1.0]),
            "POST /v1/completions: choices[0].logprobs.token_logprobs[0] is 2.5, which is not a logprob (logprobs are <= 0) "
            "(is the server in a logits --logprobs-mode?)",
        ),
        (
            _choice(logprobs__top_logprobs=[{"token_id:5": -0.5, "token_id:9": 0.5}, None]),
            "POST /v1/completions: choices[0].logprobs.top_logprobs[0] values[1] is 0.5, which is not a logprob (logprobs are "
            "<= 0) (is the server in a logits --logprobs-mode?)",
        ),
    ],
)
def test_server_answers_that_cannot_be_right_name_the_field(server, answer, message):
    with pytest.raises(SamplerError) as err:
        _raw_answer(server, json.dumps(answer).encode())
    assert str(err.value) == message


def test_server_infinities(server):
    """JSON's Infinity is no logprob; -Infinity is -inf, as vLLM's -9999.0 is; 1e-5 is rounding, kept as sent."""
    body = json.dumps(_choice(logprobs__token_logprobs=[-1.0, -1.0], logprobs__top_logprobs=None)).replace(
        "-1.0, -1.0", "%s"
    )
    with pytest.raises(SamplerError) as err:
        _raw_answer(server, (body % "Infinity, -1.0").encode())
    assert str(err.value) == (
        "POST /v1/completions: choices[0].logprobs.token_logprobs[0] is inf, which is not a logprob "
        "(logprobs are <= 0) (is the server in a logits --logprobs-mode?)"
    )
    with pytest.raises(SamplerError, match=r"token_logprobs\[1\] should be a number, got nan"):
        _raw_answer(server, (body % "-1.0, NaN").encode())
    (c,) = _raw_answer(server, (body % "-Infinity, 1e-05").encode())
    assert c.sampler_logprobs == [-math.inf, 1e-05]
    (c,) = _raw_answer(server, (body % "-9999.0, -0.25").encode())
    assert c.sampler_logprobs == [-math.inf, -0.25]


def test_a_bad_answer_through_the_cli_leaves_no_run(server, tmp_path):
    url, handler = server
    handler.routes["completions"] = (200, json.dumps(_choice(logprobs__token_logprobs=[2.5, -1.0])).encode())
    line = _refused(
        tmp_path, "--sampler", "vllm-server", "--url", url, "-n", "1", "--max-tokens", "2", "--top-k-logprobs", "1"
    )
    assert line == (
        "error: POST /v1/completions: choices[0].logprobs.token_logprobs[0] is 2.5, which is not a logprob "
        "(logprobs are <= 0) (is the server in a logits --logprobs-mode?)"
    )


# ---- 10/25. the server's timeout -------------------------------------------------------------------


@pytest.mark.parametrize(
    "value, shown",
    [("abc", '"abc"'), (-1, "-1"), (None, "null"), (0, "0"), (True, "true"), (math.inf, "Infinity"), (math.nan, "NaN")],
)
def test_a_timeout_that_is_not_seconds(value, shown):
    with pytest.raises(UsageError) as err:
        server_timeout({"timeout": value})
    assert str(err.value) == (
        f"--engine-arg timeout={shown} is not a number of seconds "
        "(give a positive number, e.g. --engine-arg timeout=60 (default 600))"
    )


def test_timeout_default_and_given():
    assert (
        server_timeout({}) == 600.0
        and server_timeout({"timeout": 2}) == 2.0
        and server_timeout({"timeout": 0.5}) == 0.5
    )


def test_a_timeout_refused_through_the_cli(tmp_path):
    assert _refused(
        tmp_path, "--sampler", "vllm-server", "--url", "http://127.0.0.1:1", "--engine-arg", "timeout=-1"
    ) == (
        "error: --engine-arg timeout=-1 is not a number of seconds (give a positive number, e.g. --engine-arg timeout=60 "
        "(default 600))"
    )


def test_a_server_that_does_not_answer_in_time(server):
    url, handler = server

    def slow(h):
        time.sleep(2.0)
        return json.dumps({"choices": [GOOD_CHOICE]}).encode()

    handler.routes["completions"] = (200, slow)
    with pytest.raises(SamplerError) as err:
        _sample(url, timeout=0.5)
    assert str(err.value) == (
        f"POST {url}/v1/completions: the vLLM server did not answer within 0.5 s "
        "(raise --engine-arg timeout=SECONDS (default 600), or check the server)"
    )


# ---- 15/16. the run directory ----------------------------------------------------------------------


def test_an_unreachable_server_leaves_no_run_and_a_rerun_is_not_blocked(tmp_path):
    from tests.probe.conftest import free_port

    args = ["--sampler", "vllm-server", "--url", f"http://127.0.0.1:{free_port()}", "-n", "1", "--max-tokens", "2"]
    for _ in range(2):  # the second run gets the same answer, not "already holds a probe run"
        line = _refused(tmp_path, *args)
        assert (
            line.startswith("error: cannot reach the vLLM server at http://127.0.0.1:") and "Connection refused" in line
        )


def test_a_start_that_fails_after_the_run_was_made_takes_it_back(server, tmp_path):
    """The models check passes; the first completions request fails: nothing was sampled, nothing is left."""
    url, handler = server
    handler.routes["completions"] = (500, b'{"error": "engine dead"}')
    out = tmp_path / "run"
    args = [
        "probe",
        str(CHECKPOINT),
        "--out",
        str(out),
        "--prompts",
        str(_prompts(tmp_path)),
        "--sampler",
        "vllm-server",
        "--url",
        url,
        "-n",
        "1",
        "--max-tokens",
        "2",
        "--top-k-logprobs",
        "1",
    ]
    for _ in range(2):
        assert (
            error_line(cli(*args))
            == f'error: POST {url}/v1/completions failed with HTTP 500: {{"error": "engine dead"}}'
        )
        assert not out.exists()
    handler.routes["completions"] = (200, json.dumps({"choices": [GOOD_CHOICE]}).encode())
    r = cli(*args)
    assert r.returncode == 0, r.stderr[-2000:]
    assert json.loads((out / "manifest.json").read_text())["status"] == "complete"


def test_an_unstarted_run_is_replaced_and_a_sampled_one_is_kept(tmp_path):
    from mismatchscope.probe.writer import RunDir

    run = RunDir(tmp_path / "run")
    run.open({"a": 1}, resume=False)
    run.write_manifest({"fingerprint": {"a": 1}, "status": "running"})  # what a killed start leaves
    manifest = run.open({"a": 2}, resume=False)  # another configuration, no --resume: replaced, not refused
    assert manifest == {"fingerprint": {"a": 2}, "status": "running", "shard_index": rundir.INDEX_VERSION}
    run.write_manifest(manifest)
    (run.samples / "round-00000.parquet").write_bytes(b"a sampled round")
    run.discard_unstarted()
    assert run.exists()  # a sampled round is worth a --resume
    with pytest.raises(UsageError, match="already holds a probe run"):
        run.open({"a": 2}, resume=False)
    (run.samples / "round-00000.parquet").unlink()
    run.discard_unstarted()
    assert sorted(p.name for p in run.path.iterdir()) == []


def test_an_out_that_holds_other_files_is_refused_without_a_lock(tmp_path):
    other = tmp_path / "notes"
    other.mkdir()
    (other / "notes.txt").write_text("mine")
    assert error_line(cli("probe", str(CHECKPOINT), "--out", str(other), "--prompts", str(_prompts(tmp_path)))) == (
        f"error: {other} exists and is not a probe run directory (choose an empty or new --out)"
    )
    assert sorted(p.name for p in other.iterdir()) == ["notes.txt"]
    ckpt = _copy(tmp_path)
    before = sorted(p.name for p in ckpt.iterdir())
    assert error_line(cli("probe", str(ckpt), "--out", str(ckpt), "--prompts", str(_prompts(tmp_path)))) == (
        f"error: {ckpt} exists and is not a probe run directory (choose an empty or new --out)"
    )
    assert sorted(p.name for p in ckpt.iterdir()) == before


def test_a_run_inside_another_run_is_refused(tmp_path):
    outer = tmp_path / "outer"
    (outer / "tokens").mkdir(parents=True)
    (outer / "manifest.json").write_text('{"status": "complete"}')
    inner = outer / "tokens" / "inner"
    r = cli("probe", str(CHECKPOINT), "--out", str(inner), "--prompts", str(_prompts(tmp_path)))
    assert error_line(r) == (
        f"error: --out {inner} is inside the run directory {outer} (give each run its own folder, outside other runs)"
    )
    assert not inner.exists()


def test_an_empty_out_is_refused(tmp_path):
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    (cwd / "mine.txt").write_text("x")
    for command in (["probe", str(CHECKPOINT)], ["rescore", str(tmp_path)]):
        r = cli(*command, "--out", "", cwd=cwd)
        assert error_line(r) == "error: --out is an empty path (give --out a new folder, e.g. --out runs/new)"
        assert sorted(p.name for p in cwd.iterdir()) == ["mine.txt"]


# ---- 26. the first line on stderr is the error ----------------------------------------------------


def test_a_bad_option_is_reported_before_the_bundled_model_note(tmp_path):
    r = cli("probe", "--sampler", "vlm", "--out", str(tmp_path / "run"))
    assert r.stderr == "error: --sampler 'vlm' is not a sampler (use one of vllm, vllm-server, trl-server, hf)\n"


def test_a_long_prompt_gets_our_error_only(tmp_path, dense_tokenizer):
    text = "1+2+" * 200 + "="
    n = len(dense_tokenizer.encode(text))
    assert n > 320  # longer than the tokenizer's model_max_length: transformers would warn
    prompts = _prompts(tmp_path, json.dumps({"prompt": text}) + "\n")
    r = cli("probe", str(CHECKPOINT), "--out", str(tmp_path / "run"), "--prompts", str(prompts), "--sampler", "hf")
    line = error_line(r)
    assert r.stderr == line + "\n"  # no transformers warning before it
    assert f"is {n} tokens; with max_tokens=1 it needs {n + 1} > max_model_len=320" in line
