"""Loading a transformers causal LM the same way for the trainer and the HF sampler.

Both sides must see identical weights, dtype and attention kernel settings
or the probe measures a loading difference instead of a numerical one, so
there is one loader. torch and transformers are imported inside the
functions: importing this module is free.
"""

from __future__ import annotations

import platform
from dataclasses import dataclass, field
from typing import Any

from mismatchscope.errors import CheckpointError, UsageError
from mismatchscope.probe.checkpoint import CheckpointInfo

from ..documents import flatten

DTYPES = ("float32", "float16", "bfloat16")
DTYPE_ALIASES = {"fp32": "float32", "float": "float32", "fp16": "float16", "half": "float16", "bf16": "bfloat16"}
"""short names a user may type; engines get the canonical name (vLLM refuses ``bf16`` and ``fp32``)."""


def canonical_dtype(name: str) -> str:
    """``"bf16"`` -> ``"bfloat16"``; any other name unchanged (checking it is the caller's job)."""
    return DTYPE_ALIASES.get(name, name)


def torch_dtype(name: str):
    """``"float32"`` -> ``torch.float32``; the names vLLM also takes (no ``auto``:
    it silently picks a different dtype per machine, so a probe must say which)."""
    import torch

    canonical = canonical_dtype(name)
    if canonical not in DTYPES:
        raise UsageError(f"unknown dtype {name!r}", hint=f"use one of {', '.join(DTYPES)}")
    return getattr(torch, canonical)


def resolve_device(device: str | None) -> str:
    """The torch device to use: the given one, else cuda when present, else cpu."""
    import torch

    if device:
        return device
    return "cuda" if torch.cuda.is_available() else "cpu"


def load_causal_lm(
    info: CheckpointInfo,
    *,
    dtype: str,
    device: str | None = None,
    device_map: str | None = None,
    attn_implementation: str | None = None,
    trust_remote_code: bool = False,
    experts_implementation: str | None = None,
):
    """``AutoModelForCausalLM`` in eval mode, in ``dtype``, on ``device`` (or spread by ``device_map``).

    ``use_safetensors`` follows the checkpoint: pickle weights load only when
    :func:`inspect_checkpoint` accepted them (``allow_pickle``).
    """
    from transformers import AutoModelForCausalLM

    kwargs: dict[str, Any] = {
        "dtype": torch_dtype(dtype),
        "trust_remote_code": trust_remote_code,
        "use_safetensors": not info.pickle_weights,
    }
    if attn_implementation is not None:
        kwargs["attn_implementation"] = attn_implementation
    if device_map is not None:
        kwargs["device_map"] = device_map
    if experts_implementation is not None:  # MoE under the zero profile (probe/zero.py)
        kwargs["experts_implementation"] = experts_implementation
    try:
        model = AutoModelForCausalLM.from_pretrained(str(info.path), **kwargs)
    except (OSError, ValueError) as exc:
        raise CheckpointError(f"transformers cannot load {str(info.path)!r}: {exc}") from exc
    except ImportError as exc:  # a kernel or package the options need; the checks before the run catch the usual ones
        raise UsageError(
            f"transformers cannot load {str(info.path)!r} with attn_implementation={attn_implementation!r}: {exc}"
        ) from exc
    if device_map is None:
        model = model.to(resolve_device(device))  # pyright: ignore[reportArgumentType]  # transformers stubs mistype to()
    model.eval()
    model.requires_grad_(False)
    return model


def device_names(devices: set[str] | list[str]) -> list[str]:
    """Human names of the devices a model sits on (GPU model, or the CPU's)."""
    import torch

    names = []
    for dev in sorted({str(d) for d in devices}):
        if dev.startswith("cuda") and torch.cuda.is_available():
            index = torch.device(dev).index or 0
            names.append(torch.cuda.get_device_name(index))
        elif dev == "cpu":
            names.append(cpu_name())
        else:
            names.append(dev)
    return names


def cpu_name() -> str:
    """The CPU model string (``/proc/cpuinfo`` on Linux), else ``platform.processor()``."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "cpu"


@dataclass(frozen=True)
class TorchVersions:
    """torch / transformers / CUDA versions for a run manifest."""

    torch: str
    transformers: str
    cuda: str | None


@dataclass(frozen=True)
class ModelDescription:
    """dtype, devices and attention kernel of a loaded model, and the versions it runs on."""

    dtype: str
    devices: list[str]
    device_names: list[str]
    attn_implementation: str | None
    versions: TorchVersions = field(metadata=flatten())


def torch_versions() -> TorchVersions:
    """torch / transformers / CUDA versions for a run manifest."""
    import torch
    import transformers

    return TorchVersions(
        torch.__version__, transformers.__version__, torch.version.cuda if torch.cuda.is_available() else None
    )


def model_description(model) -> ModelDescription:
    """dtype, devices and attention kernel of a loaded model."""
    devices = {str(p.device) for p in model.parameters()}
    return ModelDescription(
        dtype=str(next(model.parameters()).dtype).removeprefix("torch."),
        devices=sorted(devices),
        device_names=device_names(devices),
        attn_implementation=getattr(model.config, "_attn_implementation", None),
        versions=torch_versions(),
    )
