"""What every diagnose worker process does first and last: the engine's environment, and a failure in one line.

The configuration worker (``worker.py``) and the localisation worker (``locate/worker.py``) both run vLLM
in-process in a child of ``diagnose``, and both report a failure to the parent as one line in their result
file; the two share this module rather than one importing the other.
"""

from __future__ import annotations

import os


def configure_env(env: dict[str, str]) -> None:
    """The spec's variables, then vLLM in this process (its model reachable for hooks), logging to stderr."""
    os.environ.update(env)
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    os.environ.setdefault("VLLM_LOGGING_STREAM", "ext://sys.stderr")
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")


def one_line(e: BaseException) -> str:
    text = f"{type(e).__name__}: {e}".strip().splitlines()
    return text[0] if text else type(e).__name__
