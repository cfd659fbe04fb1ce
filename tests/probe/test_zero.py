"""The zero-mismatch profile (``probe --zero``): a fresh probe certifies, and the profile refuses what it cannot run.

The certificates are reproduced from fresh runs of the real transformers
engines on the bundled models (two prompts, short completions), never from
recorded fixtures: a change to either side's program shows here.
"""

from __future__ import annotations

import json

import pytest

from mismatchscope.bundled import sample_dir
from mismatchscope.certify import certify_run
from mismatchscope.errors import UsageError
from mismatchscope.probe.command import run_probe
from mismatchscope.probe.options import ProbeOptions
from mismatchscope.probe.types import SamplerConfig, SamplingConfig, TrainerConfig
from mismatchscope.probe.zero import check_zero

PAIRINGS = {"trainer_vs_sampler_decode", "trainer_vs_sampler_prefill", "prefill_vs_decode"}


def _zero_probe(tmp_path, model: str, max_tokens: int, full_vocab: bool = False):
    prompts = tmp_path / "p.jsonl"
    lines = (sample_dir() / "prompts.jsonl").read_text().splitlines()[:2]
    prompts.write_text("\n".join(lines) + "\n")
    opts = ProbeOptions(
        checkpoint=sample_dir() / model,
        prompts=prompts,
        out=tmp_path / "run",
        sampling=SamplingConfig(n=2, max_tokens=max_tokens, seed=3),
        sampler=SamplerConfig(kind="hf", dtype="float32", device="cpu", zero=True),
        trainer=TrainerConfig(dtype="float32", device="cpu", zero=True),
        sampler_prefill=True,
        full_vocab=full_vocab,
    )
    return certify_run(run_probe(opts))


def test_a_fresh_zero_probe_of_the_dense_model_certifies_all_three_pairings(tmp_path):
    verdict = _zero_probe(tmp_path, "tiny-qwen3", 12, full_vocab=True)
    assert {p.pairing.name for p in verdict.pairings} == PAIRINGS
    assert {p.name for p in verdict.absent} == {"trainer_vs_training_forward", "sampler_vs_training_forward"}
    # 2 prompts x 2 samples x at most 12 tokens, each pair byte-equal
    assert all(p.equal and p.tokens == verdict.coverage.tokens for p in verdict.pairings)
    assert 4 <= verdict.coverage.tokens <= 48 and verdict.certified, verdict.reasons
    manifest = json.loads((tmp_path / "run" / "manifest.json").read_text())
    assert '"zero": true' in json.dumps(manifest)
    from mismatchscope.certify.rows import full_vocab_check

    rows = full_vocab_check(tmp_path / "run")  # the whole distributions too, not only the sampled tokens
    assert rows.equal and rows.rows == verdict.coverage.tokens and rows.first is None


def test_a_fresh_zero_probe_of_the_moe_model_certifies_logprobs_and_routes(tmp_path):
    verdict = _zero_probe(tmp_path, "tiny-qwen3-moe", 8)
    assert all(p.equal for p in verdict.pairings) and len(verdict.pairings) == 3
    assert verdict.routes.passed is True, verdict.routes.status
    assert verdict.certified, verdict.reasons


@pytest.mark.parametrize(
    ("sampler", "trainer", "message"),
    [
        (SamplerConfig(kind="vllm", dtype="float32", zero=True), TrainerConfig(zero=True), "transformers engines"),
        (SamplerConfig(kind="hf", dtype="float16", zero=True), TrainerConfig(zero=True), "one dtype"),
        (SamplerConfig(kind="hf", dtype="float32", zero=True), TrainerConfig(), "both sides"),
        (
            SamplerConfig(kind="hf", dtype="float32", zero=True, engine_args={"attn_implementation": "eager"}),
            TrainerConfig(zero=True),
            "one attention kernel",
        ),
        (SamplerConfig(kind="hf", dtype="float32", zero=True), TrainerConfig(zero=True, fp32_lm_head=True), "lm_head"),
    ],
)
def test_the_profile_refuses_what_is_not_one_program(sampler, trainer, message):
    with pytest.raises(UsageError, match=message):
        check_zero(sampler, trainer)


def test_row_logprobs_are_the_bytes_score_positions_gives():
    torch = pytest.importorskip("torch")
    from mismatchscope.probe.token_scoring import Processing, row_logprobs, score_positions

    g = torch.Generator().manual_seed(0)
    logits = torch.randn((6, 50), generator=g) * 4
    labels = torch.randint(0, 50, (6,), generator=g)
    for processing in (Processing(), Processing(temperature=0.7, top_p=0.9)):
        rows = row_logprobs(logits, processing)
        scored = score_positions(logits, labels, labels[:, None], 3, processing).logprob
        picked = rows.gather(-1, labels[:, None]).squeeze(-1)
        # bit equality is the point: both take one rounded subtraction of the same two fp32 values
        assert torch.equal(picked.view(torch.int32), scored.view(torch.int32))
