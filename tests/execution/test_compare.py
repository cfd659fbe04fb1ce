"""Two records field by field: changed first, a field one side did not record never a change, the gate's stack
changes without the requests' shape. The records are built by hand; each expected row is read off them."""

from __future__ import annotations

from mismatchscope.execution.compare import label, runs, shown, sides, stack_changes
from mismatchscope.execution.record import (
    RECORD_VERSION,
    Deployment,
    Identities,
    Numerics,
    RunProvenance,
    SideProvenance,
    WeightsDigest,
)

W = WeightsDigest("a" * 64, {"model.safetensors": "b" * 64})


def sampler(**changes) -> SideProvenance:
    side = SideProvenance(
        source="probe",
        engine="vllm",
        identities=Identities(weights=W, sampling={"temperature": 1.0, "top_p": 1.0, "seed": 0, "n": 4}),
        software={"python": "3.11.7", "vllm": "0.32.0"},
        requested=Numerics(weights_dtype="float16"),
        used=Numerics(weights_dtype="float16", attention_backend="FLASH_ATTN"),
        environment={"VLLM_USE_V1": "1"},
        fallbacks=[],
        deployment=Deployment(devices=["NVIDIA H100"], tensor_parallel=1),
    )
    for k, v in changes.items():
        setattr(side, k, v)
    return side


def trainer() -> SideProvenance:
    return SideProvenance(
        source="probe",
        engine="transformers",
        identities=Identities(weights=W, sampling={"temperature": 1, "top_p": 1.0}),
        software={"python": "3.11.7", "torch": "2.13.0"},
        used=Numerics(weights_dtype="float32", attention_backend="sdpa"),
    )


def run(s: SideProvenance | None = None, t: SideProvenance | None = None) -> RunProvenance:
    return RunProvenance(RECORD_VERSION, s or sampler(), t or trainer())


def test_one_runs_sides_changed_first_then_one_side_then_same_then_not_recorded():
    rows = sides(run())
    order = [r.status for r in rows]
    assert order == sorted(order, key=["changed", "one side", "same", "not recorded"].index)
    by = {r.field: r for r in rows}
    assert by["engine"].status == "changed" and by["used.weights_dtype"].status == "changed"
    assert by["identities.weights"].status == "same" and by["identities.weights"].left == "a" * 64
    # temperature 1.0 and 1 are one number; a key only the sampler has is on one side, not changed
    assert by["identities.sampling.temperature"].status == "same"
    assert by["identities.sampling.seed"].status == "one side"
    assert by["software.vllm"].status == "one side" and by["software.torch"].status == "one side"
    assert by["environment.VLLM_USE_V1"].status == "one side"  # the trainer's environment: not recorded
    assert by["used.kv_cache_dtype"].status == "not recorded"


def test_two_runs_each_side_against_its_own_and_the_stack_changes_the_gate_lists():
    upgraded = sampler(
        software={"python": "3.11.7", "vllm": "0.33.0"},
        used=Numerics(weights_dtype="float16", attention_backend="FLASHINFER"),
        identities=Identities(weights=W, sampling={"temperature": 1.0, "top_p": 1.0, "seed": 1, "n": 8}),
        source="rescore",
    )
    rows = runs(run(), run(upgraded))
    changed = [r.field for r in rows if r.status == "changed"]
    assert changed == [
        "sampler.source",
        "sampler.identities.sampling.seed",
        "sampler.identities.sampling.n",
        "sampler.software.vllm",
        "sampler.used.attention_backend",
    ]
    # the gate leaves out who recorded a side and the requests' seed and count: its comparability judges them
    stack = stack_changes(run(), run(upgraded))
    assert [r.change() for r in stack] == [
        "vLLM: 0.32.0 -> 0.33.0",
        "attention (used): FLASH_ATTN -> FLASHINFER",
    ]
    assert stack_changes(run(), run()) == []


def test_a_field_one_run_did_not_record_is_never_a_stack_change():
    older = sampler(software={"python": "3.11.7", "vllm": None}, environment=None)
    assert stack_changes(run(older), run()) == []
    rows = {r.field: r for r in runs(run(older), run())}
    assert rows["sampler.software.vllm"].status == "one side"


def test_labels_and_values_in_words():
    assert label("used.attention_backend") == "attention (used)"
    assert label("requested.kv_cache_dtype") == "KV cache dtype (requested)"
    assert label("environment.VLLM_USE_V1") == "$VLLM_USE_V1"
    assert label("identities.sampling.temperature") == "sampling temperature"
    assert shown("0" * 64) == "0" * 12  # a digest as git shortens a commit: no ellipsis, no cut word
    assert shown(None) == "not recorded" and shown([]) == "none" and shown(True) == "yes"
    assert shown(["a", "b"]) == "a; b"
