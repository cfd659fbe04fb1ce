"""The price of zero mismatch in diagnose: certified configurations against the fastest uncertified one."""

from __future__ import annotations

from mismatchscope.diagnose.document import ZeroPrice
from mismatchscope.diagnose.price import price_line, zero_price
from mismatchscope.diagnose.variants import ZERO_CHANGES, Configuration, apply, parse_vary, zero_variant
from mismatchscope.documents import from_json
from mismatchscope.probe.types import SamplerConfig, TrainerConfig


def _config(pipeline, sampler, trainer, certified, name=None, status="ok"):
    rec = {
        "throughput": {
            "pipeline_tokens_per_s": pipeline,
            "sampler_tokens_per_s": sampler,
            "trainer_tokens_per_s": trainer,
        },
        "certified": certified,
        "status": status,
    }
    return rec if name is None else {**rec, "name": name}


def test_zero_costs_the_fastest_uncertified_rate_over_its_own():
    payload = {
        "baseline": _config(400.0, 500.0, 2000.0, False),
        "variants": [
            _config(600.0, 800.0, 2400.0, False, "fast"),
            _config(150.0, 200.0, 600.0, True, "zero"),
            _config(900.0, 1.0, 1.0, False, "broken", status="failed"),  # not ok: never the comparison
        ],
    }
    (entry,) = zero_price(payload)
    # the fastest uncertified ok configuration is "fast" (600 > 400); 600/150 = 4, 800/200 = 4, 2400/600 = 4
    assert entry["against"] == "fast" and entry["cost_x"] == 4.0
    assert entry["sampler_cost_x"] == 4.0 and entry["trainer_cost_x"] == 4.0
    line = price_line(from_json(ZeroPrice, entry))
    assert line.startswith("zero costs 4.00x here: zero (certified)") and "fast" in line


def test_no_price_without_an_uncertified_or_a_certified_configuration():
    both_certified = {"baseline": _config(400.0, 1.0, 1.0, True), "variants": []}
    assert zero_price(both_certified) == []
    none_certified = {"baseline": _config(400.0, 1.0, 1.0, False), "variants": [_config(9.0, 1.0, 1.0, False, "v")]}
    assert zero_price(none_certified) == []


def test_the_zero_variant_runs_the_transformers_engines_in_the_trainers_dtype():
    (v,) = parse_vary(["zero"])
    assert v == zero_variant() and v.changes == ZERO_CHANGES and v.side == "sampler"
    base = Configuration(
        SamplerConfig(kind="vllm", dtype="float16", engine_args={"kv_cache_dtype": "fp8"}),
        TrainerConfig(dtype="float32", attn_implementation="eager"),
    )
    cfg = apply(base, v)
    assert cfg.sampler.kind == "hf" and cfg.sampler.zero and cfg.trainer.zero
    # the trainer's dtype and attention kernel, none of vLLM's engine arguments
    assert cfg.sampler.dtype == "float32" and cfg.sampler.engine_args == {"attn_implementation": "eager"}
