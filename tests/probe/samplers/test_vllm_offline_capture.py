"""``--locate`` on the vLLM side (``diagnose/locate/vllm_capture.py``): hooks inside the real in-process engine
close the chain.

The engine's own capture of the log-softmax at the recorded tokens must equal the prompt logprobs the same
engine returns for the same prefill (``prefill_logprobs``, the sampler's recorded prefill): bit for bit, since
it is the same float32 log-softmax of the same logits. Uses the session's shared engines (no new start), which
is why it lives beside the offline sampler's tests, where those engines are.
"""

from __future__ import annotations

import numpy as np
import pytest

from mismatchscope.diagnose.locate.points import Sequence, point_names, sample_positions

pytestmark = pytest.mark.vllm


@pytest.mark.parametrize("which", ["moe-float32", "dense-float16"])
def test_the_engine_capture_reproduces_its_own_prefill_logprobs(vllm_sampler, moe_info, dense_info, which):
    from mismatchscope.diagnose.locate.vllm_capture import capture_vllm
    from mismatchscope.probe.types import SamplingConfig

    info, dtype, mode = (
        (moe_info, "float32", "raw_logprobs")
        if which == "moe-float32"
        else (dense_info, "float16", "processed_logprobs")
    )
    sampler = vllm_sampler(info, dtype, mode)
    seqs = [Sequence([3, 4, 5, 6], list(range(20, 44)), "a"), Sequence([7, 8], list(range(60, 75)), "b")]
    positions = sample_positions(seqs, 32)
    capture, closure = capture_vllm(sampler.engine_for(SamplingConfig(logprobs_mode=mode)), seqs, positions, "s")
    engine = sampler.prefill_logprobs([s.prompt for s in seqs], [s.completion for s in seqs], SamplingConfig())
    for i, (s, pos) in enumerate(zip(seqs, positions, strict=True)):
        recorded = np.asarray(engine[i])[pos - (len(s.prompt) - 1)]
        assert np.array_equal(capture.values["logprob"][i][:, 0], recorded.astype(np.float32))
    assert closure == 0.0
    moe = {0, 1} if info.is_moe else set()
    assert set(capture.values) == set(point_names(info.config["num_hidden_layers"], moe))  # every point exists
