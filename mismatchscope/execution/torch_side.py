"""A side that runs a torch model in this process (the trainer, a transformers sampler): read off the live objects.

Nothing here imports torch: the model passed in has done that, and torch's
process-wide switches (TF32, reduced-precision reductions, deterministic
algorithms) are read from the module already loaded. A process without torch
records them as unknown.
"""

from __future__ import annotations

import platform
import sys
from collections import Counter
from typing import Any

from .._version import __version__
from .record import Deployment, Numerics


def _torch() -> Any:
    return sys.modules.get("torch")


def software(**extra: str | None) -> dict[str, str | None]:
    """Python, mismatchscope, torch and its CUDA or ROCm, transformers: what this process runs, then ``extra``."""
    torch = _torch()
    version = getattr(torch, "version", None)
    transformers = sys.modules.get("transformers")
    out: dict[str, str | None] = {
        "python": platform.python_version(),
        "mismatchscope": __version__,
        "torch": getattr(torch, "__version__", None) if torch is not None else None,
        "cuda": getattr(version, "cuda", None),
        "rocm": getattr(version, "hip", None),
        "transformers": getattr(transformers, "__version__", None) if transformers is not None else None,
    }
    out.update(extra)
    return {k: (None if v is None else str(v)) for k, v in out.items()}


def torch_switches() -> Numerics:
    """torch's process-wide numerics switches, as this process has them set."""
    torch = _torch()
    if torch is None:
        return Numerics()
    backends = getattr(torch, "backends", None)
    matmul = getattr(getattr(backends, "cuda", None), "matmul", None)
    cudnn = getattr(backends, "cudnn", None)

    def flag(obj: Any, name: str) -> bool | None:
        try:
            value = getattr(obj, name)
        except Exception:  # a backend torch was built without raises on access
            return None
        return bool(value) if isinstance(value, bool) else None

    def call(name: str) -> Any:
        fn = getattr(torch, name, None)
        try:
            return fn() if callable(fn) else None
        except Exception:
            return None

    precision = call("get_float32_matmul_precision")
    deterministic = call("are_deterministic_algorithms_enabled")
    return Numerics(
        deterministic=deterministic if isinstance(deterministic, bool) else None,
        tf32_matmul=flag(matmul, "allow_tf32"),
        tf32_cudnn=flag(cudnn, "allow_tf32"),
        float32_matmul_precision=precision if isinstance(precision, str) else None,
        fp16_reduced_precision_reduction=flag(matmul, "allow_fp16_reduced_precision_reduction"),
        bf16_reduced_precision_reduction=flag(matmul, "allow_bf16_reduced_precision_reduction"),
    )


def dtype_name(dtype: Any) -> str | None:
    return None if dtype is None else str(dtype).removeprefix("torch.")


def model_numerics(model: Any) -> Numerics:
    """A loaded model's numerics as used: its weights' dtype (the most common among its parameters), its
    lm_head's, its attention kernel, whether it is compiled, and torch's switches."""
    inner = getattr(model, "_orig_mod", model)  # torch.compile's wrapper keeps the model here
    counts = Counter(dtype_name(p.dtype) for p in inner.parameters())
    head = None
    output_embeddings = getattr(inner, "get_output_embeddings", None)
    if callable(output_embeddings):
        module = output_embeddings()
        weight = getattr(module, "weight", None)
        head = dtype_name(getattr(weight, "dtype", None))
    config = getattr(inner, "config", None)
    switches = torch_switches()
    switches.weights_dtype = counts.most_common(1)[0][0] if counts else None
    switches.lm_head_dtype = head
    switches.attention_backend = getattr(config, "_attn_implementation", None)
    switches.compile = "torch.compile" if inner is not model else "none"
    switches.cuda_graphs = None
    return switches


def model_deployment(model: Any, device_names: list[str] | None = None) -> Deployment:
    """The devices a model sits on (their names when given)."""
    inner = getattr(model, "_orig_mod", model)
    devices = sorted({str(p.device) for p in inner.parameters()})
    return Deployment(devices=device_names if device_names is not None else devices)
