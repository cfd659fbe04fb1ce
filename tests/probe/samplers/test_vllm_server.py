"""The ``vllm-server`` sampler against a real vLLM OpenAI server on 127.0.0.1.

Pins: for the same checkpoint, dtype, logprobs mode and seed, the server
returns the same completions as the in-process engine, token for token, with
the same sampled and top-k logprobs (``-9999.0`` read back as -inf; on CPU
they were bitwise equal, the test allows 1e-6 in case batching differs), and so
the same agreement with the trainer; the checks before sampling refuse a
server on another model, with another tokenizer, or in another logprobs
mode; the API key never reaches ``describe()``; an unreachable URL is a
clear :class:`SamplerConnectionError`.
"""

from __future__ import annotations

import dataclasses
import json
import math
import shutil

import pytest

from mismatchscope.errors import CheckpointError, SamplerConnectionError, TokenizerMismatchError, UsageError
from mismatchscope.probe.checkpoint import inspect_checkpoint
from mismatchscope.probe.samplers import make_sampler
from mismatchscope.probe.types import SamplerConfig, SamplingConfig
from tests.probe._probe_utils import gap, max_diff, requests_for
from tests.probe.conftest import free_port

SAMPLING = SamplingConfig(n=4, max_tokens=16, temperature=0.7, top_p=0.9, top_k_logprobs=5, seed=0)


def _server_sampler(url: str, info, **engine_args):
    return make_sampler(SamplerConfig(kind="vllm-server", url=url, dtype="float32", engine_args=engine_args), info)


def _one_prompt(info) -> list[list[int]]:
    from mismatchscope.probe.checkpoint import load_tokenizer

    return [load_tokenizer(info.path).encode("12+34=")]


@pytest.fixture(scope="module")
def server_sampler(vllm_server, dense_info):
    return _server_sampler(vllm_server, dense_info)


@pytest.mark.vllm
def test_server_gives_the_offline_engines_completions_and_logprobs(
    server_sampler, vllm_sampler, dense_info, dense_trainer, dense_prompt_ids
):
    offline = vllm_sampler(dense_info, "float32", "processed_logprobs")
    greedy = dataclasses.replace(SAMPLING, temperature=0.0)  # n copies of each prompt, n=1 each
    for sampling in (SAMPLING, dataclasses.replace(SAMPLING, temperature=1.0, top_p=1.0, seed=3), greedy):
        served = server_sampler.sample(dense_prompt_ids, sampling)
        local = offline.sample(dense_prompt_ids, sampling)
        assert [(c.prompt_index, c.sample_index) for c in served] == [(c.prompt_index, c.sample_index) for c in local]
        assert [c.token_ids for c in served] == [c.token_ids for c in local]
        assert [c.finish_reason for c in served] == [c.finish_reason for c in local]
        assert [c.topk_ids for c in served] == [c.topk_ids for c in local]
        worst = 0.0
        for s, o in zip(served, local):
            worst = max([worst, *(gap(a, b) for a, b in zip(s.sampler_logprobs, o.sampler_logprobs))])
            for rs, ro in zip(s.topk_logprobs, o.topk_logprobs):
                worst = max([worst, *(gap(a, b) for a, b in zip(rs, ro))])
        assert worst < 1e-6, worst
        scored = dense_trainer.score(requests_for(served, dense_prompt_ids), sampling)
        assert max_diff(served, scored) < 1e-4
    # top-p 0.9 cut some listed ids: the server's -9999.0 came back as -inf
    cut = server_sampler.sample(dense_prompt_ids, SAMPLING)
    assert any(lp == -math.inf for c in cut for row in c.topk_logprobs for lp in row)


@pytest.mark.vllm
def test_describe_reports_the_checks_and_never_the_key(vllm_server, dense_info, monkeypatch):
    monkeypatch.setenv("PROBE_TEST_KEY", "sk-not-to-be-recorded")
    sampler = make_sampler(
        SamplerConfig(kind="vllm-server", url=vllm_server + "/v1/", api_key_env="PROBE_TEST_KEY"), dense_info
    )
    sampler.sample(_one_prompt(dense_info), SAMPLING)
    info = sampler.describe()
    assert "sk-not-to-be-recorded" not in json.dumps(info)
    assert info["api_key_set"] is True and info["api_key_env"] == "PROBE_TEST_KEY"
    assert info["checks"]["logprobs_mode"] == "processed_logprobs"
    assert info["checks"]["tokenizer"].startswith("same ids")
    assert info["engine"] == "vllm-server" and info["version"] and info["url"] == vllm_server


@pytest.mark.vllm
def test_a_server_in_another_logprobs_mode_is_refused(server_sampler, dense_prompt_ids):
    with pytest.raises(UsageError, match="--logprobs-mode raw_logprobs"):
        server_sampler.sample(dense_prompt_ids, dataclasses.replace(SAMPLING, logprobs_mode="raw_logprobs"))


@pytest.mark.vllm
def test_a_server_on_another_model_is_refused(vllm_server, moe_info):
    with pytest.raises(CheckpointError, match="not the checkpoint 'tiny-qwen3-moe'"):
        _server_sampler(vllm_server, moe_info)


@pytest.mark.vllm
def test_a_server_with_another_tokenizer_is_refused(vllm_server, dense_dir, dense_prompt_ids, tmp_path):
    """Our copy of the checkpoint has two digit tokens swapped: the server's ids differ from ours."""
    copy = tmp_path / dense_dir.name
    shutil.copytree(dense_dir, copy)
    spec = json.loads((copy / "tokenizer.json").read_text())
    vocab = spec["model"]["vocab"]
    vocab["1"], vocab["2"] = vocab["2"], vocab["1"]
    (copy / "tokenizer.json").write_text(json.dumps(spec))
    sampler = _server_sampler(vllm_server, inspect_checkpoint(copy))
    with pytest.raises(TokenizerMismatchError, match=r"tokenizes prompt \d+ .* but the checkpoint's tokenizer gives"):
        sampler.sample(dense_prompt_ids, SAMPLING)


def test_an_unreachable_server_is_a_clear_error(dense_info):
    url = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(SamplerConnectionError, match=f"cannot reach the vLLM server at {url}") as err:
        _server_sampler(url, dense_info, timeout=5)
    assert isinstance(err.value, ConnectionError) and "--url" in str(err.value)


def test_the_server_sampler_needs_a_url(dense_info):
    with pytest.raises(UsageError, match="URL"):
        make_sampler(SamplerConfig(kind="vllm-server"), dense_info)
