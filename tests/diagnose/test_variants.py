"""Variant matrices: a file that cannot be read as the matrix it claims to be is refused in one line."""

from __future__ import annotations

import pytest

from mismatchscope.errors import UsageError


def test_a_matrix_file_that_is_not_utf8(tmp_path):
    from mismatchscope.diagnose.variants import load_matrix

    path = tmp_path / "m.toml"
    path.write_bytes(b'[variant.a]\n"sampler.dtype" = "\xff"\n')
    with pytest.raises(UsageError, match=r"m.toml is not UTF-8 text \(byte 0xff at offset 31\)"):
        load_matrix(path)


def test_matrix_file_groups_keys_and_apply_merges_engine_args(tmp_path):
    from mismatchscope.diagnose.variants import Configuration, apply, load_matrix
    from mismatchscope.probe.types import SamplerConfig, TrainerConfig

    path = tmp_path / "m.toml"
    path.write_text(
        '[variant.fp32_everything]\nsampler.dtype = "float32"\nsampler.engine.hf_overrides = {head_dtype = "float32"}\n'
        '"trainer.fp32_lm_head" = true\n\n[variant.invariant]\nsampler.env.VLLM_BATCH_INVARIANT = 1\n'
    )
    a, b = load_matrix(path)
    assert (a.name, a.side, b.side) == ("fp32_everything", "sampler", "sampler")
    assert a.changes == {
        "sampler.dtype": "float32",
        "sampler.engine.hf_overrides": {"head_dtype": "float32"},
        "trainer.fp32_lm_head": True,
    }
    base = Configuration(SamplerConfig(dtype="float16", engine_args={"seed": 1}), TrainerConfig())
    cfg = apply(base, a)
    assert cfg.sampler.dtype == "float32" and cfg.trainer.fp32_lm_head is True
    assert cfg.sampler.engine_args == {"seed": 1, "hf_overrides": {"head_dtype": "float32"}}
    assert apply(base, b).env == {"VLLM_BATCH_INVARIANT": "1"}


def test_default_matrix_on_cpu_skips_gpu_knobs_with_reasons():
    from mismatchscope.diagnose.variants import Configuration, default_matrix
    from mismatchscope.probe.types import SamplerConfig, TrainerConfig

    m = default_matrix("cpu", Configuration(SamplerConfig(dtype="float16"), TrainerConfig()))
    run = {v.name: v for v in m if v.skip_reason is None}
    skipped = {v.name: v.skip_reason for v in m if v.skip_reason}
    assert set(run) == {
        "sampler.dtype=float32",
        "sampler.fp32_lm_head",
        "sampler.kv_cache_dtype=fp8",
        "sampler.compile",
        "sampler.max_num_seqs=1",
        "sampler.prefix_caching",
        "trainer.dtype=bfloat16",
        "trainer.attn=eager",
        "trainer.attn=sdpa",
        "trainer.fp32_lm_head",
    }
    assert set(skipped) == {
        "sampler.dtype=bfloat16",
        "sampler.batch_invariant",
        "sampler.attention=FLASHINFER",
        "sampler.chunked_prefill",
        "trainer.attn=flash_attention_2",
        "zero",
    }
    gpu = {k: r for k, r in skipped.items() if k not in ("sampler.chunked_prefill", "zero")}
    assert all(r.startswith("needs a GPU") for r in gpu.values())
    # the zero profile is listed with its price in time and the flag that runs it
    assert skipped["zero"].startswith("not in the default matrix") and "--vary zero" in skipped["zero"]
    assert "CPU Generator does not use offset" in skipped["sampler.chunked_prefill"]


def test_the_time_left_is_each_sides_mean_so_far_else_the_baselines_guess():
    from mismatchscope.diagnose.run import Remaining

    left = Remaining({"sampler": 40.0, "trainer": 6.0})
    # nothing run yet: two sampler-side variants at the baseline's 40 s, one trainer-side at 6 s
    assert left.seconds(["sampler", "sampler", "trainer"]) == 86.0
    assert left.words(["sampler", "sampler", "trainer"]) == "about 85 s left"
    left.spent["sampler"] += [20.0, 30.0]  # the sampler side's own mean, 25 s, replaces the guess
    assert left.seconds(["sampler", "trainer"]) == 31.0
    assert left.words(["sampler"] * 8) == "about 3 min left"  # 200 s
