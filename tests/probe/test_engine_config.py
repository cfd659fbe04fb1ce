"""The one engine-config builder of probe, rescore and diagnose (``probe/engine_config.py``).

Pure Python: the configs each command line gets, from its parameters by name.
"""

from __future__ import annotations

from mismatchscope.probe.engine_config import EngineValues
from mismatchscope.probe.types import SamplerConfig, SamplingConfig, TrainerConfig


def test_a_command_that_does_not_take_an_option_gets_the_configs_default():
    # diagnose takes no --trainer-device, --device-map, --routes, --zero, --url: its configs keep the defaults
    v = EngineValues.of({"sampler": "hf", "trainer_dtype": "float64", "plots": None, "bootstrap": 1000})
    assert v.trainer_config() == TrainerConfig(dtype="float64")
    assert v.sampler_config() == SamplerConfig(kind="hf")


def test_fp32_lm_head_sets_both_sides_and_each_side_alone_only_its_own():
    both = EngineValues.of({"fp32_lm_head": True})
    assert both.sampler_config().fp32_lm_head and both.trainer_config().fp32_lm_head
    sampler_only = EngineValues.of({"sampler_fp32_lm_head": True})
    assert sampler_only.sampler_config().fp32_lm_head and not sampler_only.trainer_config().fp32_lm_head
    trainer_only = EngineValues.of({"trainer_fp32_lm_head": True})
    assert trainer_only.trainer_config().fp32_lm_head and not trainer_only.sampler_config().fp32_lm_head


def test_the_zero_profile_samples_with_hf_unless_a_sampler_is_named():
    assert EngineValues.of({"zero": True}).sampler_config().kind == "hf"
    assert EngineValues.of({"zero": True, "sampler": "vllm"}).sampler_config().kind == "vllm"  # refused later
    assert EngineValues.of({"sampler": None}).sampler_config().kind == "vllm"


def test_an_unset_value_keeps_the_default_and_the_engine_args_are_passed_whole():
    # rescore of a probe run has --temperature None: the trainer config does not read it, the default stays
    v = EngineValues.of({"temperature": None, "routes": False, "n": 8}, {"max_num_seqs": 4})
    assert v.temperature == 1.0 and v.sampling_config() == SamplingConfig(n=8, max_tokens=0)
    assert v.trainer_config().record_routes is False
    assert v.sampler_config().engine_args == {"max_num_seqs": 4}
