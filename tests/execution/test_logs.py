"""The fallbacks an engine's log announces. The lines are real: vLLM 0.32 (CPU build) and transformers wrote them
while a probe of the bundled model started (the worker's oneDNN fallback, the model runner it fell back to)."""

from __future__ import annotations

from mismatchscope.execution.logs import fallbacks, logged_backends

LOG = """\
Triton is installed, but doesn't include CPU backend. Disabling Triton.
(MainProcess pid=14103) WARNING 12-06 09:26:46 [vllm.py:1703] Enforce eager set, disabling torch.compile, \
CUDAGraphs, and JIT kernel warmup. This is equivalent to setting -cc.mode=none -cc.cudagraph_mode=none
(MainProcess pid=14103) WARNING 12-06 09:26:46 [vllm.py:725] Model Runner V2 requires Triton; using the V1 model \
runner instead.
/site-packages/vllm/triton_utils/dispatcher.py:138: FutureWarning: `torch.distributed.reduce_op` is deprecated, \
please use `torch.distributed.ReduceOp` instead
(Worker pid=15276) WARNING 12-06 09:27:42 [cpu_worker.py:114] libtcmalloc is not found in LD_PRELOAD.
(Worker pid=15276) WARNING 12-06 09:27:43 [utils.py:597] Failed to create oneDNN linear, fallback to torch linear.
(VllmWorker-0 pid=15276) WARNING 12-06 09:27:42 [vllm.py:725] Model Runner V2 requires Triton; using the V1 model \
runner instead.
(EngineCore pid=14907) INFO 12-06 09:29:37 [cpu.py:178] Cannot use FLASH_ATTN backend on CPU.
(EngineCore pid=14907) INFO 12-06 09:29:37 [unquantized.py:529] Using CPUUnquantizedExperts MoE backend
(EngineCore pid=14907) INFO 12-06 09:29:37 [cuda.py:446] Using FLASHINFER backend.
sdpa is not supported for this model: falling back to eager attention (hf_token=abc123secretvalue)
"""


def test_each_fallback_once_without_its_process_and_time_and_the_engines_apart():
    engine, other = fallbacks(LOG)
    assert engine == [
        "Model Runner V2 requires Triton; using the V1 model runner instead.",  # logged by two processes: once
        "Failed to create oneDNN linear, fallback to torch linear.",
        "Cannot use FLASH_ATTN backend on CPU.",
    ]
    # transformers' line (no vLLM header) is the other side's; its credential-named field is redacted;
    # a deprecation's "use X instead", a disabled option the user asked for, a missing library are not fallbacks
    assert other == ["sdpa is not supported for this model: falling back to eager attention (hf_token=<redacted>"]


def test_the_kernels_vllm_names_at_its_info_level():
    assert logged_backends(LOG) == ("FLASHINFER", "CPUUnquantizedExperts")
    assert logged_backends("WARNING nothing here") == (None, None)
