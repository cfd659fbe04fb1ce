"""The in-process vLLM sampler against the fp32 transformers trainer.

Pins what the probe rests on:

* fp32 vLLM vs the fp32 trainer agree to < 1e-4 on every sampled token and
  every listed top-k id, dense and MoE (measured ~5e-6): what is left is
  kernel rounding, not a definition difference;
* the trainer reproduces each logprobs mode: ``processed_logprobs`` at T=0.7
  (trainer divides by T), with top-p 0.9 and top-k (trainer renormalises
  over the kept set, ``kept_logmass`` < 0 somewhere), and ``raw_logprobs`` at
  T=0.7 (trainer at T=1). Scoring under the wrong convention is far off, so
  each convention is really being tested;
* fp16 vLLM vs the fp32 trainer is a clearly nonzero mismatch (> 1e-4).

Three engines for the whole session: dense fp32 processed, dense fp16
processed, MoE fp32 raw.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
import torch

from mismatchscope.probe.samplers import SAMPLERS, make_sampler
from mismatchscope.probe.samplers.vllm_offline import VLLMOfflineSampler
from mismatchscope.probe.token_scoring import kept_mask
from mismatchscope.probe.types import SamplerConfig, SamplingConfig
from tests.probe._probe_utils import max_diff, max_topk_diff, n_tokens, requests_for

TOL = 1e-4
PROCESSED = SamplingConfig(n=4, max_tokens=16, temperature=1.0, top_k_logprobs=5, seed=0)
RAW = dataclasses.replace(PROCESSED, logprobs_mode="raw_logprobs")


@pytest.fixture(scope="module")
def dense32(vllm_sampler, dense_info):
    return vllm_sampler(dense_info, "float32", "processed_logprobs")


@pytest.fixture(scope="module")
def moe32_raw(vllm_sampler, moe_info):
    return vllm_sampler(moe_info, "float32", "raw_logprobs")


def _compare(sampler, trainer, prompts, sampling, scoring=None):
    completions = sampler.sample(prompts, sampling)
    scored = trainer.score(requests_for(completions, prompts), scoring or sampling)
    return completions, scored


# ------------------------------------------------------------ fp32 agreement


@pytest.mark.vllm
def test_fp32_vllm_matches_the_fp32_trainer_dense(dense32, dense_trainer, dense_prompt_ids):
    completions, scored = _compare(dense32, dense_trainer, dense_prompt_ids, PROCESSED)
    assert [(c.prompt_index, c.sample_index) for c in completions] == [
        (p, s) for p in range(len(dense_prompt_ids)) for s in range(PROCESSED.n)
    ]
    assert n_tokens(completions) > 50
    assert max_diff(completions, scored) < TOL
    assert max_topk_diff(completions, scored) < TOL


@pytest.mark.vllm
def test_fp32_vllm_matches_the_fp32_trainer_moe(moe32_raw, moe_trainer, moe_prompt_ids):
    completions, scored = _compare(moe32_raw, moe_trainer, moe_prompt_ids, RAW)
    assert n_tokens(completions) > 50
    assert max_diff(completions, scored) < TOL
    assert max_topk_diff(completions, scored) < TOL


@pytest.mark.vllm
def test_completions_are_well_formed(dense32, dense_prompt_ids, dense_info):
    completions = dense32.sample(dense_prompt_ids, PROCESSED)
    eos = dense_info.config["eos_token_id"]
    for c in completions:
        assert 0 < len(c.token_ids) <= PROCESSED.max_tokens
        assert len(c.sampler_logprobs) == len(c.topk_ids) == len(c.topk_logprobs) == len(c.token_ids)
        assert (c.finish_reason == "stop") == (c.token_ids[-1] == eos)
        for token, lq, ids, lps in zip(c.token_ids, c.sampler_logprobs, c.topk_ids, c.topk_logprobs, strict=True):
            assert len(ids) == PROCESSED.top_k_logprobs and lps == sorted(lps, reverse=True)
            assert token not in ids or lps[ids.index(token)] == lq
            assert lq <= 0.0 and (token in ids or lq <= lps[-1])


@pytest.mark.vllm
def test_one_engine_serves_repeated_calls_deterministically(dense32, dense_prompt_ids):
    engine = dense32._llm
    first = dense32.sample(dense_prompt_ids[:3], PROCESSED)
    second = dense32.sample(dense_prompt_ids[:3], PROCESSED)
    assert dense32._llm is engine
    assert [c.token_ids for c in first] == [c.token_ids for c in second]
    assert [c.sampler_logprobs for c in first] == [c.sampler_logprobs for c in second]
    seen: list[int] = []
    dense32.sample(dense_prompt_ids[:3], dataclasses.replace(PROCESSED, seed=1), on_progress=seen.append)
    assert sum(seen) == 3 * PROCESSED.n


@pytest.mark.vllm
def test_describe_records_the_engine(dense32):
    info = dense32.describe()
    assert info["engine"] == "vllm" and info["version"] and info["dtype"] == "float32"
    assert info["logprobs_mode"] == "processed_logprobs" and info["device_names"]
    args = info["engine_args"]
    assert args["tensor_parallel_size"] == 1 and args["dtype"] == "float32" and args["enforce_eager"] is True


# ------------------------------------------------------------ logprobs modes


@pytest.mark.vllm
def test_processed_logprobs_at_temperature_match_the_trainer_divided_by_t(dense32, dense_trainer, dense_prompt_ids):
    sampling = dataclasses.replace(PROCESSED, temperature=0.7)
    completions, scored = _compare(dense32, dense_trainer, dense_prompt_ids, sampling)
    assert max_diff(completions, scored) < TOL
    assert max_topk_diff(completions, scored) < TOL
    as_raw = dense_trainer.score(requests_for(completions, dense_prompt_ids), RAW)
    assert max_diff(completions, as_raw) > 1e-2  # the convention matters: T=1 is far off


@pytest.mark.vllm
def test_raw_logprobs_at_temperature_match_the_trainer_at_t1(moe32_raw, moe_trainer, moe_prompt_ids):
    sampling = dataclasses.replace(RAW, temperature=0.7)
    completions, scored = _compare(moe32_raw, moe_trainer, moe_prompt_ids, sampling)
    assert all(s.kept_logmass is None for s in scored)
    assert max_diff(completions, scored) < TOL
    as_processed = moe_trainer.score(
        requests_for(completions, moe_prompt_ids), dataclasses.replace(sampling, logprobs_mode="processed_logprobs")
    )
    assert max_diff(completions, as_processed) > 1e-2


@pytest.mark.vllm
@pytest.mark.parametrize(("top_p", "top_k"), [(0.9, -1), (1.0, 5), (0.8, 8)], ids=["top_p0.9", "top_k5", "both"])
def test_processed_logprobs_with_truncation_match_the_renormalised_trainer(
    dense32, dense_trainer, dense_prompt_ids, top_p, top_k
):
    sampling = dataclasses.replace(PROCESSED, temperature=0.7, top_p=top_p, top_k=top_k)
    completions, scored = _compare(dense32, dense_trainer, dense_prompt_ids, sampling)
    assert max_diff(completions, scored) < TOL
    assert max_topk_diff(completions, scored) < TOL  # -inf outside the kept set on both sides
    kept = [m for s in scored for m in s.kept_logmass]
    assert len(kept) == n_tokens(completions) and all(m <= 1e-6 for m in kept)
    assert min(kept) < -1e-3, "top-p/top-k never cut anything: nothing was tested"
    if top_p < 1.0:  # the sampler's own listed ids show the cut: -inf beyond the kept set
        assert any(lp == -math.inf for c in completions for row in c.topk_logprobs for lp in row)
    # Undoing the renormalisation gives the trainer's full-vocabulary T-scaled logprob.
    full = dense_trainer.score(
        requests_for(completions, dense_prompt_ids), dataclasses.replace(sampling, top_p=1.0, top_k=-1)
    )
    for s, f in zip(scored, full, strict=True):
        for lp, m, lf in zip(s.trainer_logprobs, s.kept_logmass, f.trainer_logprobs, strict=True):
            assert lp + m == pytest.approx(lf, abs=1e-5)


@pytest.mark.vllm
def test_greedy_processed_logprobs_are_the_full_distribution_at_t1(dense32, dense_trainer, dense_prompt_ids):
    """vLLM's greedy path skips temperature and top-p even in processed mode; so does the trainer."""
    sampling = dataclasses.replace(PROCESSED, temperature=0.0, top_p=0.5, n=2)
    completions, scored = _compare(dense32, dense_trainer, dense_prompt_ids, sampling)
    assert all(s.kept_logmass is None for s in scored)
    assert max_diff(completions, scored) < TOL
    assert all(c.token_ids == completions[i - i % 2].token_ids for i, c in enumerate(completions))


@pytest.mark.vllm
def test_kept_mask_equals_vllms_own_top_k_top_p():
    pytest.importorskip("vllm", reason="needs real vLLM (install the cpu or vllm extra)")
    from vllm.v1.sample.ops.topk_topp_sampler import apply_top_k_top_p_pytorch

    logits = torch.randn(32, 384, generator=torch.Generator().manual_seed(1)) * 2
    for top_k, top_p in [(0, 0.9), (0, 0.3), (7, 1.0), (12, 0.6)]:
        k = torch.full((32,), top_k, dtype=torch.long) if top_k else None
        p = torch.full((32,), top_p) if top_p < 1 else None
        expected = apply_top_k_top_p_pytorch(logits.clone(), k, p)
        assert torch.equal(kept_mask(logits, top_k, top_p), torch.isfinite(expected))


# ------------------------------------------------------------ a real mismatch


@pytest.mark.vllm
def test_fp16_vllm_differs_from_the_fp32_trainer(vllm_sampler, dense_info, dense_trainer, dense_prompt_ids):
    fp16 = vllm_sampler(dense_info, "float16", "processed_logprobs")
    completions, scored = _compare(fp16, dense_trainer, dense_prompt_ids, PROCESSED)
    worst = max_diff(completions, scored)
    assert 1e-4 < worst < 0.5, worst
    assert fp16.describe()["dtype"] == "float16"


@pytest.mark.vllm
def test_provenance_records_what_each_engine_ran(vllm_sampler, dense_info, moe32_raw, dense_prompt_ids):
    """The engine's side of a run, read off the live engine: what its arguments asked for, what it resolved and
    runs, and the sampling parameters its last request carried (the probe adds identities and fallbacks)."""
    import vllm

    from mismatchscope.execution.contract import requested_vs_used

    fp16 = vllm_sampler(dense_info, "float16", "processed_logprobs")
    fp16.sample(dense_prompt_ids[:2], dataclasses.replace(PROCESSED, temperature=0.7, top_p=0.9, n=2, seed=3))
    side = fp16.provenance()
    assert side.engine == "vllm" and side.software["vllm"] == vllm.__version__
    assert side.requested.weights_dtype == "float16" and side.used.weights_dtype == "float16"
    assert side.used.kv_cache_dtype == "float16" and side.used.lm_head_dtype == "float16"  # "auto": the model's
    assert side.requested.cuda_graphs == side.used.cuda_graphs == "none"  # enforce_eager, as the probe asks
    assert side.requested.compile == side.used.compile == "none"
    assert isinstance(side.used.attention_backend, str) and side.used.attention_backend  # the engine names it
    assert isinstance(side.used.prefix_caching, bool) and isinstance(side.used.chunked_prefill, bool)
    assert side.used.moe_kernel == "none (dense model)" and side.used.logits_dtype == "float32"
    assert isinstance(side.used.tf32_matmul, bool)  # the engine runs in this process: torch's switches are its own
    assert requested_vs_used(side) == []
    assert side.identities.sampling == {
        "n": 2,
        "temperature": 0.7,
        "top_p": 0.9,
        "top_k": 0,
        "min_p": 0.0,
        "presence_penalty": 0.0,
        "frequency_penalty": 0.0,
        "repetition_penalty": 1.0,
        "seed": 3,
        "max_tokens": 16,
        "min_tokens": 0,
        "logprobs": 5,
        "ignore_eos": False,
        "logprobs_mode": "processed_logprobs",
    }
    assert side.deployment.tensor_parallel == 1 and side.deployment.pipeline_parallel == 1
    assert side.deployment.devices == fp16.describe()["device_names"]
    moe = moe32_raw.provenance()  # the MoE engine's experts run a fused-MoE method its inspection names
    assert moe.used.moe_kernel and "moe" in moe.used.moe_kernel.lower()


# ------------------------------------------------------------ engine arguments (no engine started)


def test_engine_args_pass_user_options_unchanged_and_omit_unset_ones(dense_info):
    cfg = SamplerConfig(
        kind="vllm",
        dtype="float16",
        tensor_parallel_size=2,
        fp32_lm_head=True,
        max_num_seqs=None,
        engine_args={"max_num_batched_tokens": 4096, "enable_prefix_caching": False, "hf_token": "hf_secret"},
    )
    sampler = VLLMOfflineSampler(cfg, dense_info)
    args = sampler.engine_args(SamplingConfig(top_k_logprobs=50, seed=7, logprobs_mode="raw_logprobs"))
    assert args["tensor_parallel_size"] == 2 and args["dtype"] == "float16"
    assert args["hf_overrides"] == {"head_dtype": "float32"}
    assert args["max_num_batched_tokens"] == 4096 and args["enable_prefix_caching"] is False
    assert args["logprobs_mode"] == "raw_logprobs" and args["seed"] == 7 and args["max_logprobs"] == 50
    for unset in ("max_num_seqs", "gpu_memory_utilization", "max_model_len"):
        assert unset not in args
    assert sampler._llm is None  # nothing started without a sampling config
    sampler._engine_args = args
    assert "hf_secret" not in str(sampler.describe())


def test_unknown_sampler_kind(dense_info):
    from mismatchscope.errors import UsageError

    assert set(SAMPLERS) == {"vllm", "vllm-server", "trl-server", "hf"}
    with pytest.raises(UsageError, match="unknown sampler"):
        make_sampler(dataclasses.replace(SamplerConfig(), kind="sglang"), dense_info)


@pytest.mark.vllm
def test_prefill_scoring_longer_than_one_engine_step(dense32, dense_prompt_ids):
    """More prefill tokens than the engine schedules in one step (48 x 300 = 14,400): vLLM
    splits prefills into chunks, and on the CPU build a *seeded* request whose prefill is
    chunked crashes ("CPU Generator does not use offset"), so prefill scoring must not seed.
    A sequence scored inside that batch agrees with itself scored alone (fp32, 1e-4)."""
    rng = np.random.default_rng(0)
    prompt = dense_prompt_ids[0]
    completions = [rng.integers(3, 300, 300 - len(prompt)).tolist() for _ in range(48)]
    batch = dense32.prefill_logprobs([prompt] * len(completions), completions, PROCESSED)
    assert [len(b) for b in batch] == [len(c) for c in completions]
    assert all(math.isfinite(x) and x <= 0 for b in batch for x in b)
    (alone,) = dense32.prefill_logprobs([prompt], completions[:1], PROCESSED)
    assert max(abs(a - b) for a, b in zip(alone, batch[0], strict=True)) < TOL
