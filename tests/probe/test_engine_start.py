"""vLLM start failures end in one line naming what vLLM refused.

The root cause of a failed engine start is in the engine core's log lines
(a child process); these tests pin how it is found: in the exception chain
first, then in the captured stderr, skipping the lines that only point at it.
The last test starts real vLLM on a checkpoint its CPU build refuses.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from mismatchscope.probe.samplers.engine_start import StderrTail, root_cause

VLLM_LOG = [
    "(EngineCore pid=11) INFO 12-04 14:59:30 [core.py:101] Initializing a V1 LLM engine",
    '(Worker pid=3256) ERROR 12-04 14:59:35 [multiproc_executor.py:953]   File "x.py", line 3, in load',
    "(Worker pid=3256) ERROR 12-04 14:59:35 [multiproc_executor.py:953] KeyError: 'layers.1.mlp.gate.e_score_correction_bias'",
    "Traceback (most recent call last):",
    "RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {'EngineCore': 1}",
]


def test_the_cause_is_read_from_the_engine_log_past_the_pointer_line():
    exc = RuntimeError("Engine core initialization failed. See root cause above. Failed core proc(s): {}")
    assert root_cause(exc, VLLM_LOG) == "KeyError: 'layers.1.mlp.gate.e_score_correction_bias'"


def test_an_inspection_failure_names_the_missing_package():
    lines = [
        "ERROR 12-04 [registry.py:600] Error in inspecting model architecture 'Qwen3_5MoeForConditionalGeneration'",
        "ERROR 12-04 [registry.py:600] ModuleNotFoundError: No module named 'torchvision'",
    ]
    exc = ValueError(
        "Model architectures ['Qwen3_5MoeForConditionalGeneration'] failed to be inspected. "
        "Please check the logs for more details."
    )
    assert root_cause(exc, lines) == "ModuleNotFoundError: No module named 'torchvision'"


def test_the_exception_chain_wins_over_the_log():
    try:
        try:
            raise NotImplementedError("MLA head size 24 is not supported by the CPU attention backend")
        except NotImplementedError as inner:
            raise RuntimeError("Engine core initialization failed. See root cause above.") from inner
    except RuntimeError as exc:
        assert root_cause(exc, VLLM_LOG) == (
            "NotImplementedError: MLA head size 24 is not supported by the CPU attention backend"
        )


def test_no_cause_found_is_none():
    assert root_cause(RuntimeError("See root cause above"), ["plain text", "INFO all good"]) is None


def test_stderr_tail_keeps_what_a_child_wrote_and_passes_it_on(capfd):
    tail = StderrTail()
    with tail:
        subprocess.run(
            [sys.executable, "-c", "import sys; sys.stderr.write('ValueError: float32 is not supported\\n')"],
            check=True,
        )
    import time

    for _ in range(50):  # the forwarding thread reads the pipe asynchronously
        if tail.lines():
            break
        time.sleep(0.05)
    assert "ValueError: float32 is not supported" in tail.lines()
    assert "ValueError: float32 is not supported" in capfd.readouterr().err


@pytest.mark.vllm
@pytest.mark.slow
def test_a_refused_engine_start_is_one_line_naming_the_cause(tmp_path):
    """A DeepSeek-V3 checkpoint in float32: vLLM's CPU build does not start it; the line says why."""
    pytest.importorskip("vllm")
    from tests.helpers import cli
    from tests.probe.test_route_families import _build

    from .conftest import sample_data_dir

    ckpt = _build("deepseek_v3", tmp_path)
    prompts = tmp_path / "p.jsonl"
    prompts.write_text((sample_data_dir() / "prompts.jsonl").read_text().splitlines()[0] + "\n")
    r = cli(
        "probe",
        str(ckpt),
        "--prompts",
        str(prompts),
        "--out",
        str(tmp_path / "run"),
        "--sampler",
        "vllm",
        "--sampler-dtype",
        "float32",
        "-n",
        "1",
        "--max-tokens",
        "2",
    )
    assert r.returncode == 2, r.stderr[-3000:]
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith("error: vLLM could not start an engine for "), last
    assert "See root cause above" not in last and "--sampler hf" in last
    assert "Traceback" not in r.stderr.split("error: vLLM could not start")[-1]
