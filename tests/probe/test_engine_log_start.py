"""vLLM start failures end in one line naming what vLLM refused.

The root cause of a failed engine start is in the engine core's log lines
(a child process), which :func:`engine_output` sends to the run's log; these
tests pin how :func:`start_cause` finds it there, skipping the lines that only
point at it, and in the exception's chain when no log is captured.
Real vLLM refusing a checkpoint: tests/probe/test_engine_log.py.
"""

from __future__ import annotations

import subprocess
import sys

from mismatchscope.probe.engine_log import engine_output, start_cause

VLLM_LOG = [
    "(EngineCore pid=11) INFO 12-04 14:59:30 [core.py:101] Initializing a V1 LLM engine",
    '(Worker pid=3256) ERROR 12-04 14:59:35 [multiproc_executor.py:953]   File "x.py", line 3, in load',
    "(Worker pid=3256) ERROR 12-04 14:59:35 [multiproc_executor.py:953] KeyError: 'layers.1.mlp.gate.e_score_correction_bias'",
    "Traceback (most recent call last):",
    "RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {'EngineCore': 1}",
]


def _cause_after_a_child_wrote(tmp_path, lines: list[str], exc: BaseException) -> str | None:
    """``start_cause(exc)`` while the engine's output is captured, after a child process wrote ``lines``."""
    text = "\n".join(lines) + "\n"
    with engine_output(tmp_path / "never-made"):
        subprocess.run([sys.executable, "-c", f"import sys; sys.stderr.write({text!r})"], check=True)
        return start_cause(exc)


def test_the_cause_is_read_from_the_engine_log_past_the_pointer_line(tmp_path):
    exc = RuntimeError("Engine core initialization failed. See root cause above. Failed core proc(s): {}")
    assert _cause_after_a_child_wrote(tmp_path, VLLM_LOG, exc) == (
        "KeyError: 'layers.1.mlp.gate.e_score_correction_bias'"
    )


def test_an_inspection_failure_names_the_missing_package(tmp_path):
    lines = [
        "ERROR 12-04 14:59:44 [registry.py:600] Error in inspecting model architecture 'Qwen3_5MoeForConditionalGeneration'",
        "ERROR 12-04 14:59:44 [registry.py:600] ModuleNotFoundError: No module named 'torchvision'",
    ]
    exc = ValueError(
        "Model architectures ['Qwen3_5MoeForConditionalGeneration'] failed to be inspected. "
        "Please check the logs for more details."
    )
    assert _cause_after_a_child_wrote(tmp_path, lines, exc) == "ModuleNotFoundError: No module named 'torchvision'"


def test_without_a_captured_log_the_exception_chain_names_the_cause():
    try:
        try:
            raise NotImplementedError("MLA head size 24 is not supported by the CPU attention backend")
        except NotImplementedError as inner:
            raise RuntimeError("Engine core initialization failed. See root cause above.") from inner
    except RuntimeError as exc:
        assert start_cause(exc) == (
            "NotImplementedError: MLA head size 24 is not supported by the CPU attention backend"
        )


def test_no_cause_found_is_none(tmp_path):
    exc = RuntimeError("See root cause above")
    assert _cause_after_a_child_wrote(tmp_path, ["plain text", "INFO all good"], exc) is None
    assert start_cause(exc) is None
