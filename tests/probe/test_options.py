"""Probe options checked before anything starts: each impossible value is one line naming the option."""

from __future__ import annotations

import json
import math
import shutil

import pytest

from mismatchscope.errors import UsageError
from mismatchscope.probe.checkpoint import inspect_checkpoint
from mismatchscope.probe.engine_checks import check_attn_implementation, server_timeout
from mismatchscope.probe.types import SamplerConfig, SamplingConfig, TrainerConfig
from tests.helpers import REPO
from tests.helpers import cli_no_engine as cli
from tests.probe.refusals import (
    CHECKPOINT,
    PROMPTS,
    error_line,
    needs_checkpoint,
    probe_unstarted,
    prompts_file,
    refused_probe,
)


def test_a_seed_beyond_64_bits_and_a_malformed_ipv6_url_are_option_errors():
    from mismatchscope.probe.engine_checks import check_sampler
    from mismatchscope.probe.options import check_sampling
    from mismatchscope.probe.types import SamplerConfig, SamplingConfig

    with pytest.raises(UsageError, match=r"--seed must be in 0..9223372036854775807"):
        check_sampling(SamplingConfig(seed=2**64))
    with pytest.raises(UsageError, match=r"is not a valid URL \(Invalid IPv6 URL\)") as e:
        check_sampler(SamplerConfig(kind="vllm-server", url="http://[::1:8000/v1?token=s3cr3tvalue"))
    assert "s3cr3tvalue" not in str(e.value)


@needs_checkpoint
@pytest.mark.parametrize(
    "args, message",
    [
        (["--sampler", "vlm"], "--sampler 'vlm' is not a sampler (use one of vllm, vllm-server, trl-server, hf)"),
        (
            ["--sampler-dtype", "float33"],
            "--sampler-dtype 'float33' is not a dtype (use one of float32, float16, bfloat16, auto)",
        ),
        (
            ["--sampler", "hf", "--sampler-dtype", "auto"],
            "--sampler-dtype 'auto' is not a dtype (use one of float32, float16, bfloat16)",
        ),
        (["--trainer-dtype", "bf17"], "--trainer-dtype 'bf17' is not a dtype (use one of float32, float16, bfloat16)"),
        (
            ["--attn-implementation", "sdpaa"],
            "--attn-implementation 'sdpaa' is not an attention implementation (use one of eager, "
            "sdpa, flash_attention_2, flash_attention_3, flash_attention_4, flex_attention (or a hub kernel, org/repo))",
        ),
        (
            ["--max-model-len", "321"],
            "--max-model-len 321 is beyond the model's context of 320 tokens (pass at most --max-model-len 320, "
            "or leave it out)",
        ),
        (["--max-model-len", "0"], "--max-model-len must be at least 1, got 0"),
        (
            ["--top-k-logprobs", "321"],
            "--top-k-logprobs 321 is more than the model's 320 tokens (pass at most --top-k-logprobs 320)",
        ),
        (["--top-k", "1000"], "--top-k 1000 is more than the model's 320 tokens (pass -1 for no top-k truncation)"),
        (["--top-k", "-5"], "--top-k must be -1 (off) or at least 0, got -5"),
        (["--logprobs-mode", "logits"], "--logprobs-mode 'logits' (use processed_logprobs or raw_logprobs)"),
        (
            ["--sampler", "vllm-server", "--url", "localhost:8000"],
            "--url 'localhost:8000' is not an http(s) URL (write --url http://HOST:PORT)",
        ),
        (
            ["--sampler", "vllm-server", "--url", "http://u:hunter22@h:80x"],
            "--url 'http://<redacted>@h:80x' has a port that is not a number",
        ),
        (["--gpu-memory-utilization", "1.5"], "--gpu-memory-utilization must be in (0, 1], got 1.5"),
        (["--top-p", "0"], "--top-p must be in (0, 1], got 0 (1 keeps the whole distribution)"),
        (
            ["--temperature", "inf"],
            "--temperature inf is not a temperature the trainer can divide its logits by (pass the finite "
            "temperature the sampler ran at (1 for plain sampling))",
        ),
        (
            ["--temperature", "1e-30"],  # vLLM samples greedily below 1e-5: once silently greedy while 0 was greedy too
            "--temperature 1e-30 is below 1e-05, where vLLM ignores the temperature and samples greedily (pass 0 "
            "for greedy sampling, or a temperature of at least 1e-05)",
        ),
        (["--trainer-device", "gpu7"], "--trainer-device 'gpu7' is not a torch device (e.g. cpu, cuda, cuda:1)"),
        (["--trainer-device", "cuda:64"], None),
        (["--device-map", "everywhere"], "--device-map 'everywhere' is not a torch device (e.g. cpu, cuda, cuda:1)"),
    ],
)
def test_options_that_would_fail_late_fail_first(tmp_path, args, message):
    if message is None:  # depends on the machine: no CUDA at all, or fewer than 65 devices
        import torch

        count = torch.cuda.device_count()
        message = (
            "--trainer-device cuda:64: no CUDA device is visible (use cpu, or check CUDA_VISIBLE_DEVICES)"
            if count == 0
            else f"--trainer-device cuda:64: only {count} CUDA device(s) are visible (use cuda:0 to cuda:{count - 1})"
        )
    assert error_line(probe_unstarted(tmp_path, *args)) == f"error: {message}"


def _refused(*args: str):
    r = cli("probe", *args)
    error_line(r)
    return r


@needs_checkpoint
def test_inputs_refused_before_the_vllm_engine_starts(tmp_path):
    """The default sampler (vLLM): each refusal comes before an engine would start, so none starts here."""
    r = _refused(str(tmp_path / "nope"), "--prompts", str(PROMPTS), "--out", str(tmp_path / "o1"))
    assert "does not exist" in r.stderr
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    assert "empty" in _refused(str(CHECKPOINT), "--prompts", str(empty), "--out", str(tmp_path / "o2")).stderr
    long = tmp_path / "long.jsonl"
    long.write_text(json.dumps({"prompt": "1+1=" * 200}) + "\n")
    assert (
        "--max-tokens"
        in _refused(str(CHECKPOINT), "--prompts", str(long), "--max-tokens", "8", "--out", str(tmp_path / "o3")).stderr
    )
    # a tokenizer with another vocabulary on the sampler side
    other = tmp_path / "other-tok"
    other.mkdir()
    spec = json.loads((CHECKPOINT / "tokenizer.json").read_text())
    vocab = spec["model"]["vocab"]
    first, second = list(vocab)[10], list(vocab)[11]
    vocab[first], vocab[second] = vocab[second], vocab[first]  # same tokens, two ids swapped
    (other / "tokenizer.json").write_text(json.dumps(spec))
    shutil.copy(CHECKPOINT / "tokenizer_config.json", other / "tokenizer_config.json")
    r = _refused(
        str(CHECKPOINT), "--prompts", str(PROMPTS), "--sampler-tokenizer", str(other), "--out", str(tmp_path / "o4")
    )
    assert "tokenizer" in r.stderr.lower()
    pickled = tmp_path / "pickled"
    shutil.copytree(CHECKPOINT, pickled)
    (pickled / "model.safetensors").rename(pickled / "pytorch_model.bin")
    assert "--allow-pickle" in _refused(str(pickled), "--prompts", str(PROMPTS), "--out", str(tmp_path / "o5")).stderr


@needs_checkpoint
def test_rescore_checks_trainer_options_before_creating_its_run(tmp_path):
    src, out = tmp_path / "src", tmp_path / "new"
    src.mkdir()
    assert error_line(cli("rescore", str(src), "--out", str(out), "--trainer-dtype", "f32x")) == (
        "error: --trainer-dtype 'f32x' is not a dtype (use one of float32, float16, bfloat16)"
    )
    assert error_line(cli("rescore", str(src), "--out", str(src))) == (
        f"error: --out {src} is the run being rescored (give the rescored run a new directory)"
    )
    assert not out.exists()


@needs_checkpoint
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


@needs_checkpoint
def test_an_hf_probe_with_aliases_records_the_canonical_dtypes(tmp_path):
    out = tmp_path / "run"
    r = cli(
        "probe",
        str(CHECKPOINT),
        "--out",
        str(out),
        "--prompts",
        str(prompts_file(tmp_path)),
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


def _has(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


@needs_checkpoint
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
    assert refused_probe(tmp_path, "--sampler", "hf", "--attn-implementation", kernel) == (
        f"error: --attn-implementation {kernel}: the {package} package is not installed (no module {module}) "
        f"(pip install {package} on a CUDA machine, or use sdpa)"
    )


@needs_checkpoint
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


@needs_checkpoint
def test_a_hub_kernel_needs_the_kernels_package(tmp_path):
    if _has("kernels"):
        pytest.skip("kernels is installed here")
    assert refused_probe(tmp_path, "--sampler", "hf", "--attn-implementation", "nonexistent-org/nokernel") == (
        "error: --attn-implementation 'nonexistent-org/nokernel' is a hub kernel, and loading one needs the kernels "
        "package, which is not installed (pip install kernels (it downloads the kernel when the model loads), or use sdpa)"
    )


@needs_checkpoint
@pytest.mark.parametrize("name", ["paged|sdpaa", "paged|", "a/b/c", "sdpa "])
def test_names_that_are_no_kernel(name):
    with pytest.raises(UsageError, match=f"--attn-implementation {name!r} is not an attention implementation"):
        check_attn_implementation(name)


@needs_checkpoint
def test_known_kernels_pass():
    for name in ("eager", "sdpa", "paged|eager", "paged|sdpa", "flex_attention", None):
        check_attn_implementation(name)


@needs_checkpoint
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
    assert refused_probe(tmp_path, *args) == f"error: {message}"


@needs_checkpoint
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
    assert refused_probe(tmp_path, "--engine-arg", "bogus_option=1").startswith(
        "error: --engine-arg bogus_option is not an option"
    )


@needs_checkpoint
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


@needs_checkpoint
def test_timeout_default_and_given():
    assert (
        server_timeout({}) == 600.0
        and server_timeout({"timeout": 2}) == 2.0
        and server_timeout({"timeout": 0.5}) == 0.5
    )


@needs_checkpoint
def test_a_timeout_refused_through_the_cli(tmp_path):
    assert refused_probe(
        tmp_path, "--sampler", "vllm-server", "--url", "http://127.0.0.1:1", "--engine-arg", "timeout=-1"
    ) == (
        "error: --engine-arg timeout=-1 is not a number of seconds (give a positive number, e.g. --engine-arg timeout=60 "
        "(default 600))"
    )


@needs_checkpoint
def test_a_bad_option_is_reported_before_the_bundled_model_note(tmp_path):
    r = cli("probe", "--sampler", "vlm", "--out", str(tmp_path / "run"))
    assert r.stderr == "error: --sampler 'vlm' is not a sampler (use one of vllm, vllm-server, trl-server, hf)\n"


@needs_checkpoint
def test_an_unknown_rule_is_refused_before_any_engine_starts(tmp_path):
    """``--rule`` is read first: a misspelt rule used to be refused only after the whole probe had run."""
    golden = REPO / "tests" / "data" / "golden-probe"
    for args in (
        ["probe", str(CHECKPOINT), "--sampler", "hf", "--out", str(tmp_path / "probe")],
        ["rescore", str(golden), "--out", str(tmp_path / "rescore")],
    ):
        line = error_line(cli(*args, "--rule", "nope"))
        assert line.startswith("error: unknown rule 'nope' (valid rules: ")
    assert sorted(p.name for p in tmp_path.iterdir()) == []
