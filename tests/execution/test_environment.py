"""The environment a side records: the engines' and torch's switches, never a credential, never a path."""

from __future__ import annotations

from mismatchscope.execution.environment import PATH, engine_environment
from mismatchscope.redact import REDACTED


def test_only_the_engines_switches_are_kept_and_credentials_never():
    env = {
        "VLLM_ATTENTION_BACKEND": "FLASHINFER",
        "VLLM_BATCH_INVARIANT": "1",
        "NVIDIA_TF32_OVERRIDE": "0",
        "CUBLAS_WORKSPACE_CONFIG": ":4096:8",
        "VLLM_API_KEY": "sk-live-0123456789",  # a credential's name: left out whole
        "NCCL_SOCKET_PASSWORD": "hunter2-pw",
        "VLLM_HF_TOKEN_FILE": "tok",
        "HF_TOKEN": "hf_abcdefgh",  # not an engine switch at all
        "HOME": "/root",
        "PATH": "/usr/bin",
        # what vLLM names its own process with, new on every start: two runs of one stack would differ in them
        "VLLM_DIST_IDENT": "vllm_dist_af18814f86a94714bcbb69e39bc66f02",
        "VLLM_OBJECT_STORAGE_SHM_BUFFER_NAME": "vllm_mm_oFcC-jRBRua51FhubdNVQA",
        "VLLM_PORT": "51234",
    }
    got = engine_environment(env)
    assert got == {
        "CUBLAS_WORKSPACE_CONFIG": ":4096:8",
        "NVIDIA_TF32_OVERRIDE": "0",
        "VLLM_ATTENTION_BACKEND": "FLASHINFER",
        "VLLM_BATCH_INVARIANT": "1",
    }


def test_a_url_keeps_its_host_not_its_password_and_a_path_is_not_recorded():
    env = {
        "VLLM_REMOTE_STORE": "http://alice:s3cr3t-pass@store.example:8000/x",
        "VLLM_SIGNED": "https://host/x?token=abcdef123456&y=1",
        "VLLM_CACHE_ROOT": "/home/alice/.cache/vllm",
        "TORCHINDUCTOR_CACHE_DIR": "~/inductor",
        "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True",
    }
    got = engine_environment(env)
    assert got["VLLM_REMOTE_STORE"] == f"http://{REDACTED}@store.example:8000/x"
    assert "abcdef123456" not in got["VLLM_SIGNED"] and REDACTED in got["VLLM_SIGNED"]
    assert got["VLLM_CACHE_ROOT"] == PATH and got["TORCHINDUCTOR_CACHE_DIR"] == PATH
    assert got["PYTORCH_CUDA_ALLOC_CONF"] == "expandable_segments:True"  # ':' is not a path
    assert engine_environment(env, paths=True)["VLLM_CACHE_ROOT"] == "/home/alice/.cache/vllm"
