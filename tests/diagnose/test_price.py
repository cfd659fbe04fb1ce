"""The price of zero mismatch in diagnose: certified configurations against the fastest uncertified one."""

from __future__ import annotations

from dataclasses import fields
from types import SimpleNamespace

from mismatchscope.diagnose.document import Costs, VariantFailed, VariantOk, VariantThroughput
from mismatchscope.diagnose.price import price_line, zero_price
from mismatchscope.diagnose.variants import ZERO_CHANGES, Configuration, apply, parse_vary, zero_variant
from mismatchscope.probe.types import SamplerConfig, TrainerConfig


def _throughput(pipeline, sampler, trainer):
    costs = Costs(100, None, sampler, trainer, None, None, None)
    return VariantThroughput(costs, None, pipeline, None)


def _baseline(pipeline, sampler, trainer, certified):
    return SimpleNamespace(throughput=_throughput(pipeline, sampler, trainer), certified=certified)


def _variant(pipeline, sampler, trainer, certified, name):
    """A variant that ran: only the fields the price reads are filled."""
    unread = dict.fromkeys(f.name for f in fields(VariantOk))
    return VariantOk(
        **{
            **unread,
            "name": name,
            "status": "ok",
            "throughput": _throughput(pipeline, sampler, trainer),
            "certified": certified,
        }
    )


def _doc(baseline, variants):
    return SimpleNamespace(baseline=baseline, variants=variants)


def test_zero_costs_the_fastest_uncertified_rate_over_its_own():
    broken = VariantFailed("broken", "sampler", {}, "", "failed", "it did not start")  # never the comparison
    doc = _doc(
        _baseline(400.0, 500.0, 2000.0, False),
        [
            _variant(600.0, 800.0, 2400.0, False, "fast"),
            _variant(150.0, 200.0, 600.0, True, "zero"),
            broken,
        ],
    )
    (entry,) = zero_price(doc)  # type: ignore[arg-type]
    # the fastest uncertified ok configuration is "fast" (600 > 400); 600/150 = 4, 800/200 = 4, 2400/600 = 4
    assert entry.against == "fast" and entry.cost_x == 4.0
    assert entry.sampler_cost_x == 4.0 and entry.trainer_cost_x == 4.0
    line = price_line(entry)
    assert line.startswith("zero costs 4.00x here: zero (certified)") and "fast" in line


def test_no_price_without_an_uncertified_or_a_certified_configuration():
    both_certified = _doc(_baseline(400.0, 1.0, 1.0, True), [])
    assert zero_price(both_certified) == []  # type: ignore[arg-type]
    none_certified = _doc(_baseline(400.0, 1.0, 1.0, False), [_variant(9.0, 1.0, 1.0, False, "v")])
    assert zero_price(none_certified) == []  # type: ignore[arg-type]


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
