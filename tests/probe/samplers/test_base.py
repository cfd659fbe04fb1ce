"""How engine answers become :class:`Completion` fields, on hand-written inputs.

vLLM reports, per position, the sampled token *and* the top-k in one
mapping, sampled first: k entries when the sampled token is ranked in the
top-k, k + 1 when it is not. The file format stores the top-k by rank and
the sampled logprob apart; these cases pin the split.
"""

from __future__ import annotations

import math

import pytest

from mismatchscope.errors import PromptError, UsageError
from mismatchscope.probe.samplers.base import check_prompts, from_sentinel, manifest_safe, split_topk
from mismatchscope.probe.types import SamplingConfig


def test_sampled_token_outside_the_top_k_is_not_listed():
    # sampled 9 (rank 4) first, then the top-3 by rank
    entries = [(9, -2.5, 4), (1, -0.5, 1), (2, -1.0, 2), (3, -2.0, 3)]
    assert split_topk(9, entries, 3) == (-2.5, [1, 2, 3], [-0.5, -1.0, -2.0])


def test_sampled_token_inside_the_top_k_keeps_its_rank():
    # sampled 2 is rank 2: vLLM's dict keeps it first, with its top-k rank
    entries = [(2, -1.0, 2), (1, -0.5, 1), (3, -2.0, 3)]
    assert split_topk(2, entries, 3) == (-1.0, [1, 2, 3], [-0.5, -1.0, -2.0])


def test_without_ranks_the_logprob_orders_the_top_k():
    # the server's top_logprobs: no ranks, sampled first
    entries = [(2, -1.0, None), (1, -0.5, None), (3, -2.0, None)]
    assert split_topk(2, entries, 3) == (-1.0, [1, 2, 3], [-0.5, -1.0, -2.0])
    entries = [(7, -3.0, None), (1, -0.5, None), (2, -1.0, None)]
    assert split_topk(7, entries, 2) == (-3.0, [1, 2], [-0.5, -1.0])


def test_k_zero_records_only_the_sampled_token():
    assert split_topk(5, [(5, -0.1, 3)], 0) == (-0.1, [], [])


def test_missing_sampled_token_is_an_error():
    with pytest.raises(ValueError, match="sampled token 4"):
        split_topk(4, [(1, -0.5, 1)], 1)


def test_sentinel_means_minus_infinity():
    assert from_sentinel(-9999.0) == -math.inf and from_sentinel(None) == -math.inf
    assert from_sentinel(-1.25) == -1.25


def test_manifest_never_holds_credentials():
    args = {"hf_token": "hf_x", "api_key": "sk", "max_num_batched_tokens": 8, "tokenizer": "t", "obj": object()}
    safe = manifest_safe(args)
    assert safe["hf_token"] == safe["api_key"] == "<redacted>"
    assert safe["max_num_batched_tokens"] == 8 and safe["tokenizer"] == "t" and isinstance(safe["obj"], str)


def test_prompt_and_sampling_checks():
    good = SamplingConfig()
    with pytest.raises(PromptError, match="no prompts"):
        check_prompts([], good)
    with pytest.raises(PromptError, match="prompt 1 has no tokens"):
        check_prompts([[1], []], good)
    with pytest.raises(UsageError, match="top_p"):
        check_prompts([[1]], SamplingConfig(top_p=0.0))


def test_server_url_credentials_are_not_recorded():
    from mismatchscope.probe.samplers.http_client import base_url as _base_url
    from mismatchscope.redact import redact_url as _without_credentials

    assert _without_credentials("http://u:pw@127.0.0.1:8000") == "http://<redacted>@127.0.0.1:8000"
    assert _without_credentials("http://127.0.0.1:8000") == "http://127.0.0.1:8000"
    assert _base_url("http://127.0.0.1:8000/v1/") == "http://127.0.0.1:8000"
