"""The engines' own options, checked before any engine starts: sampler and trainer settings a probe,
a rescore and a diagnose all pass on to vLLM, transformers and torch.

A misspelt dtype, an attention kernel whose package is missing, a device that
does not exist here or an ``--engine-arg`` vLLM does not take would otherwise
surface minutes later, when the engine first reads it, after the run
directory exists and the weights are loading. Each is judged here from the
option alone (vLLM's own declarations for its engine args), importing no
sampler module, so every sampler can import these checks.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import math
import re
import urllib.parse
from typing import TYPE_CHECKING, Any

from ..errors import UsageError
from ..redact import redact_url

if TYPE_CHECKING:
    from pydantic import TypeAdapter
from .hf_model import DTYPES, canonical_dtype
from .types import SamplerConfig, TrainerConfig

VLLM_ONLY_DTYPES = ("auto",)
"""vLLM takes ``auto``; the transformers side refuses it (it picks a different dtype per machine)."""
ATTN_IMPLEMENTATIONS = (
    "eager",
    "sdpa",
    "flash_attention_2",
    "flash_attention_3",
    "flash_attention_4",
    "flex_attention",
)
"""transformers' built-in kernels; ``paged|NAME`` (NAME one of these) and hub kernels (``org/repo``) are also accepted."""
FLASH_PACKAGES = {
    "flash_attention_2": ("flash_attn", "flash-attn"),
    "flash_attention_3": ("flash_attn_interface", "flash-attn-3"),
    "flash_attention_4": ("flash_attn", "flash-attn-4"),
}
"""module transformers imports for each FlashAttention kernel, and the package that installs it."""
HUB_KERNEL = re.compile(r"^[^/:|]+/[^/:]+(?:@[^/:]+)?(?::[^/:]+)?$")
"""transformers' pattern for a hub kernel name (``org/repo[@rev][:function]``)."""
HF_ENGINE_ARGS = ("attn_implementation", "trust_remote_code", "batch_size")
"""what ``--engine-arg`` may set for ``--sampler hf``."""
SERVER_TIMEOUT_S = 600.0
"""seconds one HTTP request to a ``vllm-server`` may take (``--engine-arg timeout=...``): a big batch of long completions is slow."""


def check_dtype(name: str, option: str, extra: tuple[str, ...] = ()) -> None:
    valid = (*DTYPES, *extra)
    if canonical_dtype(name) not in valid:
        raise UsageError(f"{option} {name!r} is not a dtype", hint=f"use one of {', '.join(valid)}")


def check_attn_implementation(
    name: str | None, option: str = "--attn-implementation", device: str | None = None
) -> None:
    """A kernel transformers knows and that can load here, judged without loading a model.

    transformers checks the name and the kernel's package only when the model
    loads (for the trainer: after sampling). FlashAttention needs its package
    and a CUDA device; a hub kernel needs the ``kernels`` package. Nothing is
    downloaded to check.
    """
    if name is None:
        return
    base = name.removeprefix("paged|")
    if base in ATTN_IMPLEMENTATIONS:
        if base in FLASH_PACKAGES:
            _check_flash_attention(base, name, option, device)
        return
    if name == base and HUB_KERNEL.match(name):
        _check_hub_kernel(name, option)
        return
    raise UsageError(
        f"{option} {name!r} is not an attention implementation",
        hint=f"use one of {', '.join(ATTN_IMPLEMENTATIONS)} (or a hub kernel, org/repo)",
    )


def installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def _check_flash_attention(kernel: str, name: str, option: str, device: str | None) -> None:
    module, package = FLASH_PACKAGES[kernel]
    if not installed(module):
        raise UsageError(
            f"{option} {name}: the {package} package is not installed (no module {module})",
            hint=f"pip install {package} on a CUDA machine, or use sdpa",
        )
    import torch

    try:
        kind = None if device is None else torch.device(device).type
    except (RuntimeError, ValueError):  # a bad device name is reported by its own check
        kind = None
    if kind not in (None, "cuda"):
        raise UsageError(f"{option} {name}: FlashAttention does not run on {device}", hint="use sdpa (or eager)")
    if not torch.cuda.is_available():
        raise UsageError(
            f"{option} {name}: FlashAttention needs a CUDA device and none is visible", hint="use sdpa (or eager)"
        )


def _check_hub_kernel(name: str, option: str) -> None:
    if not installed("kernels"):
        raise UsageError(
            f"{option} {name!r} is a hub kernel, and loading one needs the kernels package, which is not installed",
            hint="pip install kernels (it downloads the kernel when the model loads), or use sdpa",
        )
    from transformers.utils.import_utils import is_kernels_available

    if not is_kernels_available():
        raise UsageError(
            f"{option} {name!r}: the installed kernels package is a version transformers cannot use",
            hint="install the kernels version your transformers asks for, or use sdpa",
        )


DEVICE_MAPS = ("auto", "balanced", "balanced_low_0", "sequential")


def check_device(name: str | None, option: str) -> None:
    """A torch device that exists here: ``cuda:3`` on a machine with one GPU would fail only when the model loads."""
    if name is None:
        return
    import torch

    try:
        dev = torch.device(name)
    except (RuntimeError, ValueError):
        raise UsageError(f"{option} {name!r} is not a torch device", hint="e.g. cpu, cuda, cuda:1") from None
    if dev.type == "cuda":
        count = torch.cuda.device_count()
        if count == 0:
            raise UsageError(
                f"{option} {name}: no CUDA device is visible", hint="use cpu, or check CUDA_VISIBLE_DEVICES"
            )
        if dev.index is not None and dev.index >= count:
            raise UsageError(
                f"{option} {name}: only {count} CUDA device(s) are visible", hint=f"use cuda:0 to cuda:{count - 1}"
            )


def check_trainer(cfg: TrainerConfig) -> None:
    check_dtype(cfg.dtype, "--trainer-dtype")
    check_device(cfg.device, "--trainer-device")
    if cfg.device_map is not None and cfg.device_map not in DEVICE_MAPS:
        check_device(cfg.device_map, "--device-map")
    check_attn_implementation(cfg.attn_implementation, device=cfg.device if cfg.device_map is None else None)
    if cfg.replay_weights and not cfg.replay_routes:
        raise UsageError(
            "--replay-weights replays the sampler's gate weights with its expert ids", hint="add --replay-routes"
        )
    if cfg.replay_routes and not cfg.record_routes:
        raise UsageError(
            "--replay-routes records the replayed routes; it cannot run with --no-routes", hint="leave out --no-routes"
        )
    if cfg.batch_tokens < 1:
        raise UsageError(f"--trainer-batch-tokens must be at least 1, got {cfg.batch_tokens}")
    if cfg.lm_head_chunk < 1:
        raise UsageError(f"the trainer's lm_head_chunk must be at least 1, got {cfg.lm_head_chunk}")


def shown_arg(value: Any) -> str:
    """An --engine-arg value as the user wrote it (JSON), cut short."""
    try:
        text = json.dumps(value)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def check_hf_engine_args(args: dict[str, Any], device: str | None = None) -> None:
    """``--engine-arg``s of the hf sampler: names it takes, values of the right type."""
    unknown = sorted(set(args) - set(HF_ENGINE_ARGS))
    if unknown:
        raise UsageError(
            f"the hf sampler does not take engine args {unknown}", hint=f"it takes {', '.join(HF_ENGINE_ARGS)}"
        )
    attn = args.get("attn_implementation")
    if attn is not None and not isinstance(attn, str):
        raise UsageError(
            f"--engine-arg attn_implementation={shown_arg(attn)} is not a name",
            hint=f"use one of {', '.join(ATTN_IMPLEMENTATIONS)}",
        )
    check_attn_implementation(attn, "--engine-arg attn_implementation", device)
    if "trust_remote_code" in args and not isinstance(args["trust_remote_code"], bool):
        raise UsageError(f"--engine-arg trust_remote_code={shown_arg(args['trust_remote_code'])} is not true or false")
    batch = args.get("batch_size")
    if batch is not None and (isinstance(batch, bool) or not isinstance(batch, int) or batch < 1):
        raise UsageError(
            f"--engine-arg batch_size={shown_arg(batch)} is not a positive integer",
            hint="rows per generate call, e.g. --engine-arg batch_size=16",
        )


def server_timeout(args: dict[str, Any]) -> float:
    """``--engine-arg timeout`` of the vllm-server sampler: seconds, positive and finite (default SERVER_TIMEOUT_S)."""
    value = args.get("timeout", SERVER_TIMEOUT_S)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise UsageError(
            f"--engine-arg timeout={shown_arg(value)} is not a number of seconds",
            hint=f"give a positive number, e.g. --engine-arg timeout=60 (default {SERVER_TIMEOUT_S:g})",
        )
    return float(value)


def check_server_engine_args(args: dict[str, Any]) -> None:
    """``timeout`` and ``model`` are the vllm-server sampler's own; every other key goes into the request body."""
    server_timeout(args)
    model = args.get("model")
    if "model" in args and (not isinstance(model, str) or not model):
        raise UsageError(
            f"--engine-arg model={shown_arg(model)} is not a served model's name",
            hint="write --engine-arg model=NAME as the server's GET /v1/models lists it",
        )


def check_sampler(cfg: SamplerConfig) -> None:
    from .samplers import SAMPLERS, capabilities_of

    if cfg.kind not in SAMPLERS:
        raise UsageError(f"--sampler {cfg.kind!r} is not a sampler", hint=f"use one of {', '.join(SAMPLERS)}")
    caps = capabilities_of(cfg.kind)
    check_dtype(cfg.dtype, "--sampler-dtype", () if caps.transformers else VLLM_ONLY_DTYPES)
    if caps.transformers:
        check_hf_engine_args(cfg.engine_args, cfg.device)
    # without vLLM, check_engine_installed says so
    if caps.package == "vllm" and not caps.remote and cfg.engine_args and installed("vllm"):
        check_vllm_engine_args(cfg.engine_args)
    if caps.remote:
        check_server_engine_args(cfg.engine_args)
        if not cfg.url:
            raise UsageError(f"--sampler {cfg.kind} needs --url http://HOST:PORT")
        try:
            parts = urllib.parse.urlsplit(cfg.url)
        except ValueError as e:  # "Invalid IPv6 URL": a '[' without its ']'
            raise UsageError(
                f"--url {redact_url(cfg.url)!r} is not a valid URL ({e})",
                hint="write --url http://HOST:PORT, an IPv6 host in brackets: http://[::1]:8000",
            ) from None
        try:
            parts.port  # noqa: B018 -- raises on a port that is not a number
        except ValueError:
            raise UsageError(f"--url {redact_url(cfg.url)!r} has a port that is not a number") from None
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise UsageError(
                f"--url {redact_url(cfg.url)!r} is not an http(s) URL", hint="write --url http://HOST:PORT"
            )
    if cfg.tensor_parallel_size < 1:
        raise UsageError(f"--tensor-parallel-size must be at least 1, got {cfg.tensor_parallel_size}")
    if cfg.max_num_seqs is not None and cfg.max_num_seqs < 1:
        raise UsageError(f"--max-num-seqs must be at least 1, got {cfg.max_num_seqs}")
    if cfg.gpu_memory_utilization is not None and not 0.0 < cfg.gpu_memory_utilization <= 1.0:
        raise UsageError(f"--gpu-memory-utilization must be in (0, 1], got {cfg.gpu_memory_utilization:g}")
    if cfg.max_model_len is not None and cfg.max_model_len < 1:
        raise UsageError(f"--max-model-len must be at least 1, got {cfg.max_model_len}")


def check_vllm_engine_args(engine_args: dict[str, Any]) -> None:
    """Names and value types of ``--engine-arg``s, read from vLLM's declarations without starting it.

    ``vllm.LLM`` refuses an unknown name (TypeError) or a bad value (pydantic's
    ValidationError) only while it starts, after the run directory exists and
    the weights are loading. The names are ``LLM.__init__``'s parameters and
    ``EngineArgs``' fields; each value is checked against the declared type
    with pydantic, as vLLM's own configs check it (lax: ``1`` passes for
    ``true``). A type pydantic cannot describe is left to vLLM.
    """
    declared = _declared_vllm_engine_args()
    if declared is None:  # vLLM's layout changed: the sampler's start turns its own refusal into one line
        return
    for name, value in engine_args.items():
        if name not in declared:
            import difflib

            import vllm

            close = difflib.get_close_matches(name, list(declared), n=1)
            raise UsageError(
                f"--engine-arg {name} is not an option of vllm.LLM (vLLM {vllm.__version__})",
                hint=f"did you mean {close[0]}?" if close else "see vLLM's EngineArgs for its options",
            )
        adapter = declared[name]
        if adapter is None:
            continue
        import pydantic

        try:
            adapter.validate_python(value)
        except pydantic.ValidationError as e:
            first = e.errors()[0] if e.errors() else {}
            raise UsageError(
                f"--engine-arg {name}={shown_arg(value)}: {first.get('msg', 'not a valid value')}"
            ) from None


@functools.lru_cache(maxsize=1)
def _declared_vllm_engine_args() -> dict[str, TypeAdapter[Any] | None] | None:
    """name -> pydantic TypeAdapter of its declared type (None: not checkable), or None if unreadable."""
    import dataclasses
    import inspect
    import sys

    try:
        import pydantic
        from vllm import LLM
        from vllm.engine.arg_utils import EngineArgs

        declared: dict[str, TypeAdapter[Any] | None] = {}
        fields = [(f.name, f.type) for f in dataclasses.fields(EngineArgs) if f.init]
        params = [
            (n, p.annotation)
            for n, p in inspect.signature(LLM.__init__).parameters.items()
            if n != "self" and p.kind is not inspect.Parameter.VAR_KEYWORD
        ]
    except Exception:
        return None
    for owner, items in ((EngineArgs, fields), (LLM.__init__, params)):  # LLM's own annotation wins (it converts)
        namespace = vars(sys.modules[owner.__module__])
        for name, hint in items:
            try:
                resolved = eval(hint, namespace) if isinstance(hint, str) else hint
                declared[name] = None if resolved is inspect.Parameter.empty else pydantic.TypeAdapter(resolved)
            except Exception:
                declared[name] = None
    return declared
