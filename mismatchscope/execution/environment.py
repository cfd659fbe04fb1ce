"""The environment variables that change what an engine or torch computes, fit for a manifest.

Recorded: the engines' and torch's own switches (``VLLM_*``, ``SGLANG_*``,
``TORCH_*``, ``PYTORCH_*``, ``TORCHINDUCTOR_*``, ``CUDA_*``, ``CUBLAS_*``,
``CUDNN_*``, ``NCCL_*``, ``NVIDIA_TF32_OVERRIDE``, ``TRITON_*``,
``FLASHINFER_*``, ROCm's ``HIP_*``/``ROCM_*``/``HSA_*``, the thread counts).
Never recorded: a variable whose name says it holds a credential
(``VLLM_API_KEY``, ``NCCL_..._PASSWORD``: :func:`mismatchscope.redact.is_secret_name`),
one that names the process rather than how it computes (an engine's own
identifiers, ports and addresses, new on every start), any other variable,
and a path (shown as ``<path>``, unless asked): a path outside the run says
where someone's files are, not how the engine computes.
Every value kept still goes through :func:`mismatchscope.redact.redact`.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping

from ..redact import REDACTED, is_secret_name, redact, redact_url

PREFIXES = (
    "VLLM_",
    "SGLANG_",
    "TORCH_",
    "PYTORCH_",
    "TORCHINDUCTOR_",
    "CUDA_",
    "CUBLAS_",
    "CUBLASLT_",
    "CUDNN_",
    "NCCL_",
    "TRITON_",
    "FLASHINFER_",
    "HIP_",
    "ROCM_",
    "HSA_",
)
NAMES = ("NVIDIA_TF32_OVERRIDE", "OMP_NUM_THREADS", "MKL_NUM_THREADS")
PATH = "<path>"
_PER_PROCESS = re.compile(r"(?:_IDENT|_PORT|_HOST_IP|_BUFFER_NAME|_INSTANCE_ID|_RPC_BASE_PATH|_MASTER_ADDR)$")
"""names an engine gives a value of its own on every start (vLLM's ``VLLM_DIST_IDENT``, its shared-memory
``VLLM_OBJECT_STORAGE_SHM_BUFFER_NAME``, ports and addresses): they say which process, not how it computes, and
would make two runs of one stack differ."""
_SECRET_WORDS = re.compile(r"(?i)(token|secret|passw|pwd|credential|api_?key|auth)")
"""words that make a variable's name a credential's even inside a longer word (``NCCL_PASSWORDFILE``)."""


def relevant(name: str) -> bool:
    return name.startswith(PREFIXES) or name in NAMES


def engine_environment(environ: Mapping[str, str] | None = None, *, paths: bool = False) -> dict[str, str]:
    """The relevant variables of ``environ`` (the process's own by default), sorted, safe to record."""
    env = os.environ if environ is None else environ
    out = {}
    for name in sorted(env):
        if not relevant(name) or is_secret_name(name) or _SECRET_WORDS.search(name) or _PER_PROCESS.search(name):
            continue
        out[name] = safe_value(env[name], paths=paths)
    return out


def safe_value(value: str, *, paths: bool = False) -> str:
    """A value as recorded: credentials inside it redacted, a path replaced by :data:`PATH` unless ``paths``."""
    text = str(value)
    if "://" in text:
        text = str(redact_url(text))
    text = redact(text)
    if REDACTED in text:
        return text
    if not paths and _is_path(text):
        return PATH
    return text


def _is_path(text: str) -> bool:
    """An absolute or home-relative path, or a list of them (``a:b``)."""
    return any(part.startswith(("/", "~", "./", "../")) for part in text.split(os.pathsep) if part) or (
        os.sep in text and not text.startswith(("http", "sm_", "compute_")) and " " not in text and "=" not in text
    )
