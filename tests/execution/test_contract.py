"""Are the two sides one program? Each case below is built by hand, its verdict read off the record."""

from __future__ import annotations

from mismatchscope.execution.contract import contract, fallbacks, kernel_key, requested_vs_used
from mismatchscope.execution.record import Identities, Numerics, WeightsDigest
from tests.execution.test_compare import run, sampler, trainer


def _with(side, **identities):
    for k, v in identities.items():
        setattr(side.identities, k, v)
    return side


def test_the_same_identities_make_one_program():
    c = contract(run())
    assert c.same is True and c.differences == []
    assert c.compared == ["weights", "sampling parameters"]
    assert c.not_compared == ["tokenizer", "chat template"]  # neither side recorded them: not compared
    assert c.sentence().startswith("both sides ran the same weights, sampling parameters")


def test_other_weights_name_the_identity_and_the_file():
    later = WeightsDigest("c" * 64, {"model.safetensors": "d" * 64})
    c = contract(run(t=_with(trainer(), weights=later)))
    assert c.same is False and [d.identity for d in c.differences] == ["weights"]
    detail = c.differences[0].detail
    assert "aaaaaaaaaaaa" in detail and "cccccccccccc" in detail and "model.safetensors" in detail
    assert c.sentence().endswith("no numerical reading applies until they match")


def test_the_checkpoint_digest_stands_in_for_weights_recorded_before_provenance():
    s = _with(sampler(), weights=None, checkpoint_sha256="1" * 64)
    t = _with(trainer(), weights=None, checkpoint_sha256="2" * 64)
    assert [d.identity for d in contract(run(s, t)).differences] == ["checkpoint files"]


def test_a_tokenizer_or_a_chat_template_of_its_own_is_another_program():
    s = _with(sampler(), tokenizer="t" * 64, chat_template="none")
    t = _with(trainer(), tokenizer="u" * 64, chat_template="v" * 64)
    assert [d.identity for d in contract(run(s, t)).differences] == ["tokenizer", "chat template"]


def test_the_distribution_the_logprobs_are_read_from():
    # processed logprobs at T = 0.7 against a trainer at T = 1: the classic bug
    s = _with(sampler(), sampling={"temperature": 0.7, "top_p": 0.9, "logprobs_mode": "processed_logprobs"})
    t = _with(trainer(), sampling={"temperature": 1.0, "top_p": 0.9})
    c = contract(run(s, t))
    assert [d.identity for d in c.differences] == ["sampling.temperature"]
    assert c.differences[0].detail == "the sampler's logprobs are at temperature 0.7, the trainer's at 1"
    # raw logprobs are read at T = 1 without truncation, whatever the request sampled at: no difference
    s.identities.sampling = {"temperature": 0.7, "top_p": 0.9, "logprobs_mode": "raw_logprobs"}
    t.identities.sampling = {"temperature": 1.0, "top_p": 1.0, "top_k": 0}
    assert contract(run(s, t)).same is True
    # top_k -1 and 0 both mean off
    s.identities.sampling = {"temperature": 1.0, "top_k": -1}
    t.identities.sampling = {"temperature": 1.0, "top_k": 0}
    assert contract(run(s, t)).same is True


def test_nothing_recorded_on_both_sides_is_not_checked():
    s = sampler(identities=Identities())
    c = contract(run(s))
    assert c.same is None and not c.checked and c.sentence().startswith("not checked")


def test_asked_for_and_ran_otherwise_is_a_fallback():
    s = sampler(
        requested=Numerics(weights_dtype="float16", attention_backend="FLASH_ATTN", kv_cache_dtype="fp8"),
        used=Numerics(weights_dtype="float32", attention_backend="FlashAttentionImpl", kv_cache_dtype="fp8"),
        fallbacks=["Failed to create oneDNN linear, fallback to torch linear."],
    )
    # the attention kernel asked for is the one that ran (two spellings of one kernel); the dtype is not
    assert requested_vs_used(s) == ["weights dtype: asked for float16, ran float32"]
    found = fallbacks(run(s))
    assert [(f.side, f.detail) for f in found] == [
        ("sampler", "weights dtype: asked for float16, ran float32"),
        ("sampler", "logged: Failed to create oneDNN linear, fallback to torch linear."),
    ]


def test_kernel_names_compare_across_spellings():
    assert kernel_key("FLASH_ATTN") == kernel_key("FlashAttentionImpl") == "flashattn"
    assert kernel_key("CPU_ATTN") == kernel_key("CPUAttentionBackendImpl")
    assert kernel_key("FLASHINFER") == kernel_key("FlashInferImpl")
    assert kernel_key("FLASH_ATTN") != kernel_key("FlashInferImpl")
