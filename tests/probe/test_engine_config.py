"""The one engine-config builder of probe, rescore and diagnose (``probe/engine_config.py``).

Pure Python: the configs each command line gets, from its parameters by name.
"""

from __future__ import annotations

from mismatchscope.probe.engine_config import EngineValues
from mismatchscope.probe.types import SamplerConfig, SamplingConfig, TrainerConfig


def _of(params: dict, engine_args: dict | None = None) -> EngineValues:
    """``EngineValues.of`` of a command line that has every engine option and sets those in ``params``."""
    return EngineValues.of({**dict.fromkeys(EngineValues.names()), **params}, engine_args)


def test_a_command_that_does_not_take_an_option_gets_the_configs_default():
    # diagnose takes no --trainer-device, --device-map, --routes, --zero, --url: its configs keep the defaults
    not_taken = frozenset({"trainer_device", "device_map", "routes", "zero", "url"})
    params = dict.fromkeys(EngineValues.names() - not_taken)
    v = EngineValues.of({**params, "sampler": "hf", "trainer_dtype": "float64", "plots": None}, not_taken=not_taken)
    assert v.trainer_config() == TrainerConfig(dtype="float64")
    assert v.sampler_config() == SamplerConfig(kind="hf")


def test_fp32_lm_head_sets_both_sides_and_each_side_alone_only_its_own():
    both = _of({"fp32_lm_head": True})
    assert both.sampler_config().fp32_lm_head and both.trainer_config().fp32_lm_head
    sampler_only = _of({"sampler_fp32_lm_head": True})
    assert sampler_only.sampler_config().fp32_lm_head and not sampler_only.trainer_config().fp32_lm_head
    trainer_only = _of({"trainer_fp32_lm_head": True})
    assert trainer_only.trainer_config().fp32_lm_head and not trainer_only.sampler_config().fp32_lm_head


def test_the_zero_profile_samples_with_hf_unless_a_sampler_is_named():
    assert _of({"zero": True}).sampler_config().kind == "hf"
    assert _of({"zero": True, "sampler": "vllm"}).sampler_config().kind == "vllm"  # refused later
    assert _of({"sampler": None}).sampler_config().kind == "vllm"


def test_an_unset_value_keeps_the_default_and_the_engine_args_are_passed_whole():
    # rescore of a probe run has --temperature None: the trainer config does not read it, the default stays
    v = _of({"temperature": None, "routes": False, "n": 8}, {"max_num_seqs": 4})
    assert v.temperature == 1.0 and v.sampling_config() == SamplingConfig(n=8, max_tokens=0)
    assert v.trainer_config().record_routes is False
    assert v.sampler_config().engine_args == {"max_num_seqs": 4}


def test_an_option_renamed_on_one_side_only_is_an_error_not_a_default():
    """A command whose parameter ``top_p`` became ``nucleus``: its value would silently fall back to the default."""
    import pytest

    params = {**dict.fromkeys(EngineValues.names() - {"top_p"}), "nucleus": 0.9}
    with pytest.raises(TypeError, match=r"without a parameter: \['top_p'\]"):
        EngineValues.of(params)
    with pytest.raises(TypeError, match=r"declared not taken but given: \['n'\]"):
        EngineValues.of(dict.fromkeys(EngineValues.names()), not_taken=frozenset({"n"}))


def test_the_zero_profile_runs_one_dtype_on_both_sides_unless_the_sampler_dtype_is_given():
    # the default sampler dtype (float16) under --zero takes the trainer's; one given otherwise is kept (and
    # refused later by the zero profile's check), and without --zero nothing moves
    assert _of({"zero": True, "trainer_dtype": "float64"}).profiled().sampler_config().dtype == "float64"
    assert _of({"zero": True}).profiled().sampler_config().dtype == "float32"
    assert _of({"zero": True, "sampler_dtype": "bfloat16"}).profiled().sampler_config().dtype == "bfloat16"
    assert _of({"trainer_dtype": "float64"}).profiled().sampler_config().dtype == "float16"
