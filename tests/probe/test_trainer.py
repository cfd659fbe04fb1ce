"""The trainer side (and the HF sampler) against direct, naive computations.

Pins: chunked lm_head scoring equals a full ``log_softmax`` for any chunk
size (2e-6 on the same fp32 logits; 1e-5 end to end, where the CPU BLAS
rounds a matmul of a few rows differently); batching never changes a sequence's numbers (no leak across
right padding); the processed-logprobs kept set and ``kept_logmass`` equal a
by-hand top-p/top-k; a model whose forward transforms its logits in a way we
do not reproduce is refused; the HF sampler's logprobs equal the trainer's.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
import torch

from mismatchscope.errors import CheckpointError, InputError
from mismatchscope.probe.samplers import make_sampler
from mismatchscope.probe.token_scoring import Processing, kept_mask, score_positions
from mismatchscope.probe.trainer import HFTrainer, LogitTransform
from mismatchscope.probe.types import SamplerConfig, SamplingConfig, ScoreRequest, TrainerConfig

from ._probe_utils import max_diff, max_topk_diff, naive_logprobs, requests_for

RAW = SamplingConfig(logprobs_mode="raw_logprobs", top_k_logprobs=5)


def _requests(prompt_ids, vocab: int, seed: int = 0) -> list[ScoreRequest]:
    """Teacher-forced sequences of varied lengths (1..20 completion tokens), with listed ids."""
    gen = torch.Generator().manual_seed(seed)
    out = []
    for i, prompt in enumerate(prompt_ids):
        n = 1 + (7 * i) % 20
        completion = torch.randint(3, vocab, (n,), generator=gen).tolist()
        listed = [torch.randint(0, vocab, (4,), generator=gen).tolist() + [t] for t in completion]
        out.append(ScoreRequest(prompt, completion, listed))
    return out


def _trainer(info, **kw) -> HFTrainer:
    return HFTrainer(info, TrainerConfig(dtype="float32", device="cpu", **kw))


def _naive_rows(model, req: ScoreRequest, temperature: float = 1.0) -> torch.Tensor:
    """fp32 logits / T of the positions that predict the completion, from ``model(...)``."""
    ids = [*req.prompt_token_ids, *req.completion_token_ids]
    with torch.inference_mode():
        logits = model(input_ids=torch.tensor([ids]), use_cache=False).logits[0].float()
    p = len(req.prompt_token_ids)
    return logits[p - 1 : len(ids) - 1] / temperature


# ------------------------------------------------------------ chunking and batching


@pytest.mark.parametrize("chunk", [1, 3, 16, 4096])
def test_chunked_scoring_equals_full_log_softmax(dense_info, dense_trainer, dense_prompt_ids, chunk):
    """The trainer (one sequence per batch) vs ``log_softmax(model(ids).logits)``.

    Held to 1e-5, not 2e-6: the lm_head then multiplies only the rows that
    predict completion tokens, and the CPU BLAS picks another kernel for
    fewer than 16 rows; the fp32 *logits* themselves move by 1-2 ulp
    (measured up to ~7e-6 at logits near 12). For very unlikely tokens
    (logprob below -8) the bound scales with |logprob|: an fp32 value near
    -22 is 1.9e-6 per ulp, and another CPU's kernels were measured 6 ulp
    apart there (1.1e-5). The chunking itself is exact: see the next test,
    which holds it to 2e-6 on identical logits.
    """
    trainer = _trainer(dense_info, lm_head_chunk=chunk, batch_tokens=1)
    reqs = _requests(dense_prompt_ids, dense_info.vocab_size)
    scored = trainer.score(reqs, RAW)
    worst = 0.0
    for req, s in zip(reqs, scored, strict=True):
        ids = [*req.prompt_token_ids, *req.completion_token_ids]
        naive = naive_logprobs(dense_trainer.model, ids, len(req.prompt_token_ids))
        worst = max(worst, *(abs(a - b) / max(1.0, abs(a) / 8) for a, b in zip(naive, s.trainer_logprobs, strict=True)))
    assert worst < 1e-5, worst


@pytest.mark.parametrize("processing", [Processing(), Processing(temperature=0.7, top_p=0.9)], ids=["raw", "top_p"])
def test_chunking_is_exact_on_the_same_logits(dense_trainer, dense_info, dense_prompt_ids, processing):
    """score_positions chunk by chunk vs once over all rows, from one matmul's logits: within 2e-6."""
    reqs = _requests(dense_prompt_ids, dense_info.vocab_size, seed=5)
    logits = torch.cat([_naive_rows(dense_trainer.model, r) for r in reqs])
    labels = torch.tensor([t for r in reqs for t in r.completion_token_ids])
    listed = torch.tensor([ids for r in reqs for ids in r.sampler_topk_ids])
    whole = score_positions(logits, labels, listed, 5, processing)
    if processing.top_p == 1.0:
        naive = logits.log_softmax(-1).gather(-1, labels[:, None]).squeeze(-1)
        assert (whole.logprob - naive).abs().max() < 2e-6
    for chunk in (1, 3, 16, 4096):
        parts = [score_positions(logits[i : i + chunk], labels[i : i + chunk], listed[i : i + chunk], 5, processing)
                 for i in range(0, len(labels), chunk)]  # fmt: skip
        for name in ("logprob", "at_listed", "top_logprobs", "entropy", "kept_logmass"):
            if getattr(whole, name) is None:
                continue
            joined, expected = torch.cat([getattr(p, name) for p in parts]), getattr(whole, name)
            gap = torch.where(joined == expected, 0.0, (joined - expected).abs())  # -inf == -inf
            assert gap.max() < 2e-6, (name, chunk)


def test_chunked_scoring_equals_full_log_softmax_moe(moe_info, moe_trainer, moe_prompt_ids):
    reqs = _requests(moe_prompt_ids, moe_info.vocab_size, seed=1)
    scored = _trainer(moe_info, lm_head_chunk=32, batch_tokens=1).score(reqs, RAW)
    worst = 0.0
    for req, s in zip(reqs, scored, strict=True):
        ids = [*req.prompt_token_ids, *req.completion_token_ids]
        naive = naive_logprobs(moe_trainer.model, ids, len(req.prompt_token_ids))
        worst = max(worst, *(abs(a - b) for a, b in zip(naive, s.trainer_logprobs, strict=True)))
    assert worst < 1e-5, worst  # same BLAS caveat as the dense test


def test_batching_does_not_change_a_sequence(dense_info, dense_prompt_ids):
    """Each sequence alone (batch_tokens=1) vs all in one right-padded batch with longer ones.

    Not bitwise: a padded batch takes the masked attention kernel instead of
    the causal fast path, which moves fp32 results by ~1e-6. A leak of padding
    or of another row into a sequence would move them by O(0.1).
    """
    reqs = _requests(dense_prompt_ids, dense_info.vocab_size, seed=2)
    sampling = SamplingConfig(temperature=0.7, top_p=0.9, top_k_logprobs=5)
    alone_trainer = _trainer(dense_info, batch_tokens=1)
    together_trainer = _trainer(dense_info, batch_tokens=10**6)
    assert len(alone_trainer._batches(reqs)) == len(reqs) and len(together_trainer._batches(reqs)) == 1
    alone = alone_trainer.score(reqs, sampling)
    together = together_trainer.score(reqs, sampling)
    for a, b in zip(alone, together, strict=True):
        np.testing.assert_allclose(a.trainer_logprobs, b.trainer_logprobs, atol=2e-5, rtol=0)
        np.testing.assert_allclose(a.kept_logmass, b.kept_logmass, atol=2e-5, rtol=0)
        np.testing.assert_allclose(a.entropy, b.entropy, atol=1e-5, rtol=0)
        assert a.topk_ids == b.topk_ids


def test_progress_counts_requests(dense_trainer, dense_info, dense_prompt_ids):
    seen: list[int] = []
    reqs = _requests(dense_prompt_ids, dense_info.vocab_size)
    dense_trainer.score(reqs, RAW, on_progress=seen.append)
    assert sum(seen) == len(reqs)


# ------------------------------------------------------------ what is computed per position


def test_raw_mode_topk_entropy_and_listed_ids_equal_the_full_distribution(dense_trainer, dense_info, dense_prompt_ids):
    """Tolerances 1e-5 absolute, plus 2e-6 relative for listed ids deep in the tail: the trainer
    scores the three in one padded batch (see the batching test), and the fp32 rounding of a
    logprob near -20 is itself a few 1e-6 (float32 spacing there is 1.9e-6)."""
    reqs = _requests(dense_prompt_ids[:3], dense_info.vocab_size, seed=3)
    scored = dense_trainer.score(reqs, RAW)
    for req, s in zip(reqs, scored, strict=True):
        full = _naive_rows(dense_trainer.model, req).log_softmax(-1)
        assert s.kept_logmass is None
        top = torch.topk(full, 5, dim=-1)
        assert s.topk_ids == top.indices.tolist()
        np.testing.assert_allclose(s.topk_logprobs, top.values.numpy(), atol=1e-5)
        np.testing.assert_allclose(s.entropy, -(full.exp() * full).sum(-1).numpy(), atol=2e-5)
        listed = full.gather(-1, torch.tensor(req.sampler_topk_ids))
        np.testing.assert_allclose(s.logprobs_at_sampler_topk, listed.numpy(), atol=1e-5, rtol=2e-6)


def _keep_by_hand(logits: np.ndarray, top_k: int, top_p: float) -> np.ndarray:
    """vLLM's rule written out per token: top-k by value (ties kept), then keep a token iff the
    mass of the tokens ranked strictly above it is < p."""
    keep = np.ones_like(logits, dtype=bool)
    if top_k > 0:
        keep &= logits >= np.sort(logits)[::-1][top_k - 1]
    z = np.where(keep, logits, -np.inf)
    probs = np.exp(z - z.max())
    probs /= probs.sum()
    order = np.argsort(-probs, kind="stable")
    above = 0.0
    for idx in order:
        if above >= top_p:
            keep[idx] = False
        above += probs[idx]
    return keep


@pytest.mark.parametrize(("top_k", "top_p"), [(0, 0.9), (5, 1.0), (8, 0.8)])
def test_processed_mode_renormalises_over_the_kept_set(dense_trainer, dense_info, dense_prompt_ids, top_k, top_p):
    sampling = SamplingConfig(temperature=0.7, top_p=top_p, top_k=top_k, top_k_logprobs=5)
    reqs = _requests(dense_prompt_ids[:4], dense_info.vocab_size, seed=4)
    scored = dense_trainer.score(reqs, sampling)
    truncated = 0
    for req, s in zip(reqs, scored, strict=True):
        rows = _naive_rows(dense_trainer.model, req, temperature=0.7).double().numpy()
        for row, label, lp, kept_mass in zip(
            rows, req.completion_token_ids, s.trainer_logprobs, s.kept_logmass, strict=True
        ):
            keep = _keep_by_hand(row, top_k, top_p)
            full_lse = np.logaddexp.reduce(row)
            kept_lse = np.logaddexp.reduce(row[keep])
            expected = row[label] - kept_lse if keep[label] else -math.inf
            assert lp == pytest.approx(expected, abs=1e-5) or (lp == expected == -math.inf)
            assert kept_mass == pytest.approx(kept_lse - full_lse, abs=1e-5)
            truncated += kept_mass < -1e-6
    assert truncated > 0, "the kept set never dropped anything: the test checks nothing"


def test_greedy_is_compared_at_temperature_one_over_the_full_vocabulary():
    assert Processing.from_sampling(SamplingConfig(temperature=0.0, top_p=0.5)) == Processing()
    assert Processing.from_sampling(SamplingConfig(temperature=0.7, logprobs_mode="raw_logprobs")) == Processing()
    assert Processing.from_sampling(SamplingConfig(temperature=0.7, top_k=-1)) == Processing(temperature=0.7)


def test_kept_mask_agrees_with_transformers_warpers():
    """HF's TopK/TopP warpers implement the same rule as vLLM's reference; ours must agree."""
    from transformers.generation.logits_process import TopKLogitsWarper, TopPLogitsWarper

    logits = torch.randn(64, 300, generator=torch.Generator().manual_seed(0)) * 3
    for top_k, top_p in [(0, 0.9), (0, 0.5), (10, 1.0), (20, 0.7)]:
        expected = logits.clone()
        if top_k:
            expected = TopKLogitsWarper(top_k)(None, expected)
        if top_p < 1:
            expected = TopPLogitsWarper(top_p)(None, expected)
        assert torch.equal(kept_mask(logits, top_k, top_p), torch.isfinite(expected))


# ------------------------------------------------------------ logit transforms and refusals


def test_softcapping_transform():
    transform = LogitTransform.from_config({"final_logit_softcapping": 30.0})
    x = torch.tensor([0.0, 30.0, -300.0])
    np.testing.assert_allclose(transform(x).numpy(), [0.0, 30 * math.tanh(1.0), -30 * math.tanh(10.0)], rtol=1e-6)
    assert LogitTransform.from_config({}).to_dict() == {"final_logit_softcapping": None, "logit_scale": 1.0}


def test_model_whose_forward_differs_from_the_head_path_is_refused(dense_info, dense_prompt_ids):
    """A config claiming a softcap the model's forward doesn't apply: caught, not recorded as mismatch."""
    lying = dataclasses.replace(dense_info, config={**dense_info.config, "final_logit_softcapping": 1.0})
    trainer = HFTrainer(lying, TrainerConfig(dtype="float32", device="cpu"))
    with pytest.raises(CheckpointError, match="differs from the model's own forward"):
        trainer.score(_requests(dense_prompt_ids[:1], dense_info.vocab_size), RAW)


def test_fp32_lm_head_multiplies_in_fp32(dense_info, dense_prompt_ids):
    """An fp16 trainer with fp32_lm_head: logits = fp32(hidden) @ fp32(W), not fp16 @ fp16."""
    req = _requests(dense_prompt_ids[:1], dense_info.vocab_size)[0]
    ids = [*req.prompt_token_ids, *req.completion_token_ids]
    start = len(req.prompt_token_ids)
    results = {}
    for fp32_head in (False, True):
        trainer = HFTrainer(dense_info, TrainerConfig(dtype="float16", device="cpu", fp32_lm_head=fp32_head))
        results[fp32_head] = trainer.score([req], RAW)[0].trainer_logprobs
        with torch.inference_mode():
            hidden = trainer.model.model(input_ids=torch.tensor([ids])).last_hidden_state[0, start - 1 : -1]
            weight = trainer.model.lm_head.weight
            logits = hidden.float() @ weight.float().T if fp32_head else (hidden @ weight.T).float()
        expected = logits.log_softmax(-1).gather(-1, torch.tensor(req.completion_token_ids)[:, None]).squeeze(-1)
        np.testing.assert_allclose(results[fp32_head], expected.numpy(), atol=1e-5)
        assert trainer.describe()["fp32_lm_head"] is fp32_head and trainer.describe()["dtype"] == "float16"
    assert results[True] != results[False]


def test_token_outside_the_vocabulary_is_refused(dense_trainer, dense_info, dense_prompt_ids):
    bad = ScoreRequest(dense_prompt_ids[0], [1, dense_info.vocab_size], [])
    with pytest.raises(InputError, match="outside the model's vocabulary"):
        dense_trainer.score([bad], RAW)


def test_describe_names_versions_dtype_and_device(dense_trainer):
    info = dense_trainer.describe()
    assert info["dtype"] == "float32" and info["devices"] == ["cpu"] and info["torch"] and info["transformers"]
    assert info["attn_implementation"] and info["device_names"]


# ------------------------------------------------------------ the HF sampler


@pytest.fixture(scope="module")
def hf_sampler(dense_info):
    sampler = make_sampler(SamplerConfig(kind="hf", dtype="float32", device="cpu"), dense_info)
    yield sampler
    sampler.close()


@pytest.mark.parametrize(
    "sampling",
    [
        SamplingConfig(n=3, max_tokens=12, temperature=0.7, top_p=0.9, top_k_logprobs=5),
        SamplingConfig(n=3, max_tokens=12, temperature=0.7, logprobs_mode="raw_logprobs", top_k_logprobs=5),
        SamplingConfig(n=2, max_tokens=12, temperature=0.0, top_k_logprobs=3),
    ],
    ids=["processed-T0.7-top_p0.9", "raw-T0.7", "greedy"],
)
def test_hf_sampler_matches_the_trainer(hf_sampler, dense_trainer, dense_prompt_ids, sampling):
    prompts = dense_prompt_ids[:4]
    completions = hf_sampler.sample(prompts, sampling)
    assert [(c.prompt_index, c.sample_index) for c in completions] == [
        (p, s) for p in range(len(prompts)) for s in range(sampling.n)
    ]
    eos = set(hf_sampler.eos_ids)
    for c in completions:
        assert 0 < len(c.token_ids) <= sampling.max_tokens
        assert not eos & set(c.token_ids[:-1])  # nothing after an EOS is kept
        assert (c.finish_reason == "stop") == (c.token_ids[-1] in eos)
        assert all(len(ids) == sampling.top_k_logprobs for ids in c.topk_ids)
    scored = dense_trainer.score(requests_for(completions, prompts), sampling)
    assert max_diff(completions, scored) < 1e-4
    assert max_topk_diff(completions, scored) < 1e-4
    if sampling.temperature == 0:
        assert all(c.token_ids == completions[i - i % 2].token_ids for i, c in enumerate(completions))
