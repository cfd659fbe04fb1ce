"""What a vLLM engine's arguments asked for, and the sampling parameters as recorded, from plain values (the live
engine's side is tests/probe/samplers/test_vllm_offline.py's)."""

from __future__ import annotations

from types import SimpleNamespace

from mismatchscope.execution.vllm_side import requested_numerics, sampling_params


def test_only_what_was_asked_for_is_requested():
    asked = requested_numerics(
        {
            "dtype": "bfloat16",
            "enforce_eager": True,
            "kv_cache_dtype": "fp8",
            "hf_overrides": {"head_dtype": "float32"},
            "enable_prefix_caching": False,
            "moe_backend": "auto",
        },
        {"VLLM_ATTENTION_BACKEND": "flash_attn", "VLLM_BATCH_INVARIANT": "1"},
    )
    assert (asked.weights_dtype, asked.kv_cache_dtype, asked.lm_head_dtype) == ("bfloat16", "fp8", "float32")
    assert asked.attention_backend == "FLASH_ATTN" and asked.batch_invariant is True
    assert asked.cuda_graphs == asked.compile == "none" and asked.prefix_caching is False
    assert asked.moe_kernel is None and asked.chunked_prefill is None  # "auto" and unset ask for nothing
    nothing = requested_numerics({"dtype": "auto"}, {"VLLM_BATCH_INVARIANT": "0"})
    assert nothing.weights_dtype is None and nothing.cuda_graphs is None and nothing.batch_invariant is False


def test_the_sampling_parameters_as_the_engine_received_them():
    params = SimpleNamespace(n=4, temperature=0.7, top_p=0.9, top_k=-1, min_p=0.0, seed=3, max_tokens=64, logprobs=5)
    params.stop = ["</s>"]  # not a field that shapes tokens and logprobs: not recorded
    got = sampling_params(params, "processed_logprobs")
    assert got == {
        "n": 4,
        "temperature": 0.7,
        "top_p": 0.9,
        "top_k": 0,  # vLLM takes -1 and 0 alike for off
        "min_p": 0.0,
        "seed": 3,
        "max_tokens": 64,
        "logprobs": 5,
        "logprobs_mode": "processed_logprobs",
    }
    assert sampling_params({"temperature": 1.0, "seed": None}) == {"temperature": 1.0}
