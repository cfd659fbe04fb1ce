"""The one engine-config builder of probe, rescore and diagnose (``probe/engine_config.py``).

Pure Python: the configs each command line gets from the values it passes by keyword.
"""

from __future__ import annotations

from mismatchscope.probe.engine_config import EngineValues
from mismatchscope.probe.types import SamplerConfig, SamplingConfig, TrainerConfig


def test_a_command_that_does_not_take_an_option_gets_the_configs_default():
    # diagnose takes no --trainer-device, --device-map, --routes, --zero, --url: its configs keep the defaults
    v = EngineValues(sampler="hf", trainer_dtype="float64")
    assert v.trainer_config() == TrainerConfig(dtype="float64")
    assert v.sampler_config() == SamplerConfig(kind="hf")


def test_fp32_lm_head_sets_both_sides_and_each_side_alone_only_its_own():
    both = EngineValues(fp32_lm_head=True)
    assert both.sampler_config().fp32_lm_head and both.trainer_config().fp32_lm_head
    sampler_only = EngineValues(sampler_fp32_lm_head=True)
    assert sampler_only.sampler_config().fp32_lm_head and not sampler_only.trainer_config().fp32_lm_head
    trainer_only = EngineValues(trainer_fp32_lm_head=True)
    assert trainer_only.trainer_config().fp32_lm_head and not trainer_only.sampler_config().fp32_lm_head


def test_the_zero_profile_samples_with_hf_unless_a_sampler_is_named():
    assert EngineValues(zero=True).sampler_config().kind == "hf"
    assert EngineValues(zero=True, sampler="vllm").sampler_config().kind == "vllm"  # refused later
    assert EngineValues(sampler=None).sampler_config().kind == "vllm"


def test_the_engine_args_are_passed_whole_and_sampling_takes_its_values():
    v = EngineValues(routes=False, n=8, engine_args={"max_num_seqs": 4})
    assert v.temperature == 1.0 and v.sampling_config() == SamplingConfig(n=8, max_tokens=0)
    assert v.trainer_config().record_routes is False
    assert v.sampler_config().engine_args == {"max_num_seqs": 4}


def test_the_zero_profile_runs_one_dtype_on_both_sides_unless_the_sampler_dtype_is_given():
    # the default sampler dtype (float16) under --zero takes the trainer's; one given otherwise is kept (and
    # refused later by the zero profile's check), and without --zero nothing moves
    assert EngineValues(zero=True, trainer_dtype="float64").profiled().sampler_config().dtype == "float64"
    assert EngineValues(zero=True).profiled().sampler_config().dtype == "float32"
    assert EngineValues(zero=True, sampler_dtype="bfloat16").profiled().sampler_config().dtype == "bfloat16"
    assert EngineValues(trainer_dtype="float64").profiled().sampler_config().dtype == "float16"
