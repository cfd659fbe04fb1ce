"""Probe options checked before anything starts: each impossible value is one line naming the option."""

from __future__ import annotations

import pytest

from mismatchscope.errors import UsageError


def test_a_seed_beyond_64_bits_and_a_malformed_ipv6_url_are_option_errors():
    from mismatchscope.probe.options import check_sampler, check_sampling
    from mismatchscope.probe.types import SamplerConfig, SamplingConfig

    with pytest.raises(UsageError, match=r"--seed must be in 0..9223372036854775807"):
        check_sampling(SamplingConfig(seed=2**64))
    with pytest.raises(UsageError, match=r"is not a valid URL \(Invalid IPv6 URL\)") as e:
        check_sampler(SamplerConfig(kind="vllm-server", url="http://[::1:8000/v1?token=s3cr3tvalue"))
    assert "s3cr3tvalue" not in str(e.value)
