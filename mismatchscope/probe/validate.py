"""Probe options checked before anything is created or started.

A misspelt dtype or attention kernel would otherwise surface minutes later,
when vLLM or transformers first reads it, after the run directory exists and
an engine has loaded the weights. Everything that can be judged from the
options alone (and, for context length and vocabulary, from the checkpoint's
``config.json``) is judged here, so a bad call costs nothing and leaves no
half-made run directory behind.
"""

from __future__ import annotations

import os
import urllib.parse
from typing import TYPE_CHECKING

from ..errors import UsageError
from ..outputs import check_output_dir
from ..redact import redact_url
from .hf_model import DTYPES
from .types import SamplerConfig, SamplingConfig, TrainerConfig

if TYPE_CHECKING:
    from .checkpoint import CheckpointInfo
    from .run import ProbeOptions

SAMPLER_KINDS = ("vllm", "vllm-server", "hf")
"""the names of ``samplers.SAMPLERS`` (kept here so checking a name imports no sampler module)."""
DTYPE_ALIASES = {"fp32": "float32", "float": "float32", "fp16": "float16", "half": "float16", "bf16": "bfloat16"}
VLLM_ONLY_DTYPES = ("auto",)
"""vLLM takes ``auto``; the transformers side refuses it (it picks a different dtype per machine)."""
ATTN_IMPLEMENTATIONS = ("eager", "sdpa", "flash_attention_2", "flash_attention_3", "flash_attention_4", "flex_attention")
"""transformers' built-in kernels; ``paged|NAME`` and hub kernels (``org/repo``) are also accepted."""
LOGPROBS_MODES = ("processed_logprobs", "raw_logprobs")


def check_dtype(name: str, option: str, extra: tuple[str, ...] = ()) -> None:
    valid = (*DTYPES, *extra)
    if DTYPE_ALIASES.get(name, name) not in valid:
        raise UsageError(f"{option} {name!r} is not a dtype", hint=f"use one of {', '.join(valid)}")


def check_attn_implementation(name: str | None, option: str = "--attn-implementation") -> None:
    if name is None or name in ATTN_IMPLEMENTATIONS or name.startswith("paged|") or "/" in name:
        return
    raise UsageError(f"{option} {name!r} is not an attention implementation",
                     hint=f"use one of {', '.join(ATTN_IMPLEMENTATIONS)} (or a hub kernel, org/repo)")


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
            raise UsageError(f"{option} {name}: no CUDA device is visible", hint="use cpu, or check CUDA_VISIBLE_DEVICES")
        if dev.index is not None and dev.index >= count:
            raise UsageError(f"{option} {name}: only {count} CUDA device(s) are visible", hint=f"use cuda:0 to cuda:{count - 1}")


def check_trainer(cfg: TrainerConfig) -> None:
    check_dtype(cfg.dtype, "--trainer-dtype")
    check_attn_implementation(cfg.attn_implementation)
    check_device(cfg.device, "--trainer-device")
    if cfg.device_map is not None and cfg.device_map not in DEVICE_MAPS:
        check_device(cfg.device_map, "--device-map")


def check_sampler(cfg: SamplerConfig) -> None:
    if cfg.kind not in SAMPLER_KINDS:
        raise UsageError(f"--sampler {cfg.kind!r} is not a sampler", hint=f"use one of {', '.join(SAMPLER_KINDS)}")
    check_dtype(cfg.dtype, "--sampler-dtype", VLLM_ONLY_DTYPES if cfg.kind != "hf" else ())
    if cfg.kind == "vllm-server":
        if not cfg.url:
            raise UsageError("--sampler vllm-server needs --url http://HOST:PORT")
        parts = urllib.parse.urlsplit(cfg.url)
        try:
            parts.port  # noqa: B018 -- raises on a port that is not a number
        except ValueError:
            raise UsageError(f"--url {redact_url(cfg.url)!r} has a port that is not a number") from None
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise UsageError(f"--url {redact_url(cfg.url)!r} is not an http(s) URL", hint="write --url http://HOST:PORT")
    if cfg.max_num_seqs is not None and cfg.max_num_seqs < 1:
        raise UsageError(f"--max-num-seqs must be at least 1, got {cfg.max_num_seqs}")
    if cfg.gpu_memory_utilization is not None and not 0.0 < cfg.gpu_memory_utilization <= 1.0:
        raise UsageError(f"--gpu-memory-utilization must be in (0, 1], got {cfg.gpu_memory_utilization:g}")
    if cfg.max_model_len is not None and cfg.max_model_len < 1:
        raise UsageError(f"--max-model-len must be at least 1, got {cfg.max_model_len}")


def check_sampling(s: SamplingConfig) -> None:
    if s.logprobs_mode not in LOGPROBS_MODES:
        raise UsageError(f"--logprobs-mode {s.logprobs_mode!r}", hint=f"use {' or '.join(LOGPROBS_MODES)}")
    if s.n < 1 or s.max_tokens < 0:
        raise UsageError("-n must be at least 1 and --max-tokens at least 0 (0: automatic)")
    if s.top_k < -1:
        raise UsageError(f"--top-k must be -1 (off) or at least 0, got {s.top_k}")
    if s.top_k_logprobs < 0:
        raise UsageError(f"--top-k-logprobs must be at least 0, got {s.top_k_logprobs}")
    if not 0.0 < s.top_p <= 1.0:
        raise UsageError(f"--top-p must be in (0, 1], got {s.top_p:g}", hint="1 keeps the whole distribution")
    if not s.temperature >= 0.0:  # also refuses NaN
        raise UsageError(f"--temperature must be at least 0, got {s.temperature:g}")


def check_options(opts: "ProbeOptions") -> None:
    """What the options alone decide: names, ranges, the run directory's path."""
    check_sampling(opts.sampling)
    check_sampler(opts.sampler)
    check_trainer(opts.trainer)
    check_output_dir(opts.out, "--out")


def check_against_checkpoint(opts: "ProbeOptions", info: "CheckpointInfo") -> None:
    """What needs the checkpoint's config: context length and vocabulary."""
    s = opts.sampler
    if s.max_model_len is not None and s.max_model_len > info.max_model_len:
        raise UsageError(f"--max-model-len {s.max_model_len} is beyond the model's context of {info.max_model_len} tokens",
                         hint=f"pass at most --max-model-len {info.max_model_len}, or leave it out")
    if opts.sampling.top_k_logprobs > info.vocab_size:
        raise UsageError(f"--top-k-logprobs {opts.sampling.top_k_logprobs} is more than the model's {info.vocab_size} tokens",
                         hint=f"pass at most --top-k-logprobs {info.vocab_size}")
    if opts.sampling.top_k > info.vocab_size:
        raise UsageError(f"--top-k {opts.sampling.top_k} is more than the model's {info.vocab_size} tokens",
                         hint="pass -1 for no top-k truncation")


def check_rescore_out(run: "os.PathLike[str] | str", out: "os.PathLike[str] | str") -> None:
    """The new run directory: writable, and not the run being rescored (its samples would be replaced)."""
    check_output_dir(out, "--out")
    if os.path.realpath(out) == os.path.realpath(run):
        raise UsageError(f"--out {out} is the run being rescored", hint="give the rescored run a new directory")
