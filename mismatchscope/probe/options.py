"""The probe's options (:class:`ProbeOptions`) and their checks, made before anything is created or started.

The run (:mod:`.run`), the samplers, ``rescore`` and ``diagnose`` all read
these; this module imports none of them, so each can import it.

A misspelt dtype or attention kernel would otherwise surface minutes later,
when vLLM or transformers first reads it, after the run directory exists and
an engine has loaded the weights. Everything that can be judged from the
options alone (and, for context length and vocabulary, from the checkpoint's
``config.json``) is judged here, so a bad call costs nothing and leaves no
half-made run directory behind.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import math
import os
import re
import urllib.parse
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .. import rundir
from ..errors import UsageError
from ..outputs import check_output_dir
from ..outputs import check_run_out as check_new_run
from ..redact import redact_url
from .hf_model import DTYPES, canonical_dtype
from .token_scoring import GREEDY_EPS
from .types import SamplerConfig, SamplingConfig, TrainerConfig

if TYPE_CHECKING:
    from .checkpoint import CheckpointInfo

SAMPLER_KINDS = ("vllm", "vllm-server", "trl-server", "hf")
SERVER_KINDS = ("vllm-server", "trl-server")
"""the samplers that are a running server at ``--url``."""
"""the names of ``samplers.SAMPLERS`` (kept here so checking a name imports no sampler module)."""
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
LOGPROBS_MODES = ("processed_logprobs", "raw_logprobs")
HF_ENGINE_ARGS = ("attn_implementation", "trust_remote_code", "batch_size")
"""what ``--engine-arg`` may set for ``--sampler hf``."""
SERVER_TIMEOUT_S = 600.0
"""seconds one HTTP request to a ``vllm-server`` may take (``--engine-arg timeout=...``): a big batch of long completions is slow."""


@dataclass(frozen=True)
class ProbeOptions:
    checkpoint: Path
    prompts: Path
    out: Path
    sampling: SamplingConfig
    sampler: SamplerConfig
    trainer: TrainerConfig
    reward_fn: str | None = None
    resume: bool = False
    round_prompts: int = 0
    """prompts per sampling round; 0 submits all prompts as one batch."""
    sampler_tokenizer: Path | None = None
    """a separate tokenizer the sampler side uses, checked against the trainer's."""
    trainer_checkpoint: Path | None = None
    """other weights of the same model for the trainer (policy lag); None: the sampler's checkpoint."""
    sampler_prefill: bool = False
    """also record the sampler's logprobs from a prefill of prompt + completion (:mod:`.sampler_prefill`)."""
    full_vocab: bool = False
    """also record each side's whole log-prob row as a digest and the largest difference (:mod:`.full_rows`)."""


def check_dtype(name: str, option: str, extra: tuple[str, ...] = ()) -> None:
    valid = (*DTYPES, *extra)
    if canonical_dtype(name) not in valid:
        raise UsageError(f"{option} {name!r} is not a dtype", hint=f"use one of {', '.join(valid)}")


def canonical_options(opts: ProbeOptions) -> ProbeOptions:
    """The options with dtype aliases (``bf16``, ``fp32``) spelled out: engines get, and the manifest
    records, the names vLLM and torch take (vLLM refuses ``bf16`` only once it has started)."""
    return replace(
        opts,
        sampler=replace(opts.sampler, dtype=canonical_dtype(opts.sampler.dtype)),
        trainer=canonical_trainer(opts.trainer),
    )


def canonical_trainer(cfg: TrainerConfig) -> TrainerConfig:
    return replace(cfg, dtype=canonical_dtype(cfg.dtype))


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


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def _check_flash_attention(kernel: str, name: str, option: str, device: str | None) -> None:
    module, package = FLASH_PACKAGES[kernel]
    if not _installed(module):
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
    if not _installed("kernels"):
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
    if cfg.kind not in SAMPLER_KINDS:
        raise UsageError(f"--sampler {cfg.kind!r} is not a sampler", hint=f"use one of {', '.join(SAMPLER_KINDS)}")
    check_dtype(cfg.dtype, "--sampler-dtype", VLLM_ONLY_DTYPES if cfg.kind != "hf" else ())
    if cfg.kind == "hf":
        check_hf_engine_args(cfg.engine_args, cfg.device)
    if cfg.kind == "vllm" and cfg.engine_args and _installed("vllm"):  # without vLLM, check_engine_installed says so
        check_vllm_engine_args(cfg.engine_args)
    if cfg.kind in SERVER_KINDS:
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
    check_temperature(s.temperature, greedy=True)
    if s.seed is not None and not 0 <= s.seed <= MAX_SEED:
        raise UsageError(
            f"--seed must be in 0..{MAX_SEED} (2^63 - 1), got {s.seed}",
            hint="the engines and torch take a signed 64-bit seed",
        )


def check_temperature(t: float, *, greedy: bool) -> None:
    """The one temperature check of probe, diagnose and rescore: a finite T, 0 (greedy, where ``greedy``) or at
    least :data:`GREEDY_EPS`.

    Why these bounds: the trainer divides its logits by T, so an infinite T scores every token as uniform and a
    NaN scores nothing, and either would be reported as mismatch. Below 1e-5 vLLM does not divide at all: it
    samples greedily and ignores T (its ``_SAMPLING_EPS``), so 1e-30 would silently mean greedy while the
    trainer scored logits / 1e-30. There is no upper bound short of infinity: a large finite T is a flat but
    well-defined distribution on both sides.
    """
    shown = f"--temperature {t:g}"
    if not math.isfinite(t):
        raise UsageError(
            f"{shown} is not a temperature the trainer can divide its logits by",
            hint="pass the finite temperature the sampler ran at (1 for plain sampling)",
        )
    if t < 0:
        raise UsageError(f"{shown} is negative", hint="a temperature is 0 (greedy) or positive")
    if t == 0 and not greedy:
        raise UsageError(
            f"{shown}: a rescore scores logits / T, which greedy sampling (T = 0) does not define",
            hint="pass the positive temperature the sampler ran at",
        )
    if 0 < t < GREEDY_EPS:
        raise UsageError(
            f"{shown} is below {GREEDY_EPS:g}, where vLLM ignores the temperature and samples greedily",
            hint=("pass 0 for greedy sampling, or " if greedy else "pass ")
            + f"a temperature of at least {GREEDY_EPS:g}",
        )


MAX_SEED = (1 << 63) - 1
"""torch, numpy and vLLM all take the seed as a signed 64-bit integer."""


def check_options(opts: ProbeOptions) -> None:
    """What the options alone decide: names, ranges, the run directory's path."""
    check_sampling(opts.sampling)
    check_sampler(opts.sampler)
    forced = opts.sampler.engine_args.get("logprobs_mode", opts.sampling.logprobs_mode)
    if opts.sampler.kind == "vllm" and forced != opts.sampling.logprobs_mode:
        raise UsageError(
            f"--engine-arg logprobs_mode={shown_arg(forced)} but the probe asks for {opts.sampling.logprobs_mode!r}",
            hint="set the mode once, with --logprobs-mode",
        )
    check_trainer(opts.trainer)
    from .zero import check_zero

    check_zero(opts.sampler, opts.trainer)
    if opts.full_vocab and opts.sampler.kind != "hf":
        raise UsageError(
            f"--full-vocab is not available with --sampler {opts.sampler.kind}",
            hint="vLLM gives whole rows only as logprobs=-1 lists of (id, logprob) objects, not wired here; "
            "use --sampler hf",
        )
    if opts.full_vocab and opts.resume:
        raise UsageError("--full-vocab cannot resume a run: the rows are held in memory, never written")
    check_run_out(opts.out, opts.resume)


def check_engine_installed(cfg: SamplerConfig) -> None:
    """The in-process engine can be imported: checked last before the run directory, so that
    an option error is still reported first on a machine without vLLM."""
    if cfg.kind == "vllm" and not _installed("vllm"):
        raise UsageError(
            "--sampler vllm needs vLLM, which is not installed",
            hint="install the vllm extra (or cpu on a machine without a GPU), or use --sampler hf",
        )


def check_run_out(out: os.PathLike[str] | str, resume: bool, option: str = "--out") -> None:
    """The run directory, judged before anything is written into it (not even its lock file).

    It must be a new or empty folder, or a probe run: never a folder holding
    other files (a checkpoint, notes), where the run's files would land among
    them. A run is continued only with ``--resume``, unless it never sampled a
    round (then it is replaced). The lock and :meth:`RunDir.open` check again
    once the directory is held.
    """
    check_new_run(out, option)  # a non-empty name, a folder that can be written, not inside another run
    path = Path(out)
    if not path.is_dir():
        return
    if (path / rundir.MANIFEST).is_file():
        from .writer import unstarted_run

        if not resume and not unstarted_run(path):  # an unstarted one is replaced (RunDir.open)
            raise UsageError(
                f"{path} already holds a probe run", hint=f"pass --resume to continue it, or choose another {option}"
            )
        return
    if not rundir.is_empty_dir(path):
        raise UsageError(f"{path} exists and is not a probe run directory", hint=f"choose an empty or new {option}")


def check_against_checkpoint(opts: ProbeOptions, info: CheckpointInfo) -> None:
    """What needs the checkpoint's config: context length and vocabulary."""
    s = opts.sampler
    if s.max_model_len is not None and s.max_model_len > info.max_model_len:
        raise UsageError(
            f"--max-model-len {s.max_model_len} is beyond the model's context of {info.max_model_len} tokens",
            hint=f"pass at most --max-model-len {info.max_model_len}, or leave it out",
        )
    if opts.sampling.top_k_logprobs > info.vocab_size:
        raise UsageError(
            f"--top-k-logprobs {opts.sampling.top_k_logprobs} is more than the model's {info.vocab_size} tokens",
            hint=f"pass at most --top-k-logprobs {info.vocab_size}",
        )
    if opts.sampling.top_k > info.vocab_size:
        raise UsageError(
            f"--top-k {opts.sampling.top_k} is more than the model's {info.vocab_size} tokens",
            hint="pass -1 for no top-k truncation",
        )


def check_rescore_out(run: os.PathLike[str] | str, out: os.PathLike[str] | str, resume: bool = False) -> None:
    """The new run directory: writable, and not the run being rescored (its samples would be replaced)."""
    check_output_dir(out, "--out")
    if str(out) and os.path.realpath(out) == os.path.realpath(run):
        raise UsageError(f"--out {out} is the run being rescored", hint="give the rescored run a new directory")
    check_run_out(out, resume)


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
def _declared_vllm_engine_args() -> dict[str, Any] | None:
    """name -> pydantic TypeAdapter of its declared type (None: not checkable), or None if unreadable."""
    import dataclasses
    import inspect
    import sys

    try:
        import pydantic
        from vllm import LLM
        from vllm.engine.arg_utils import EngineArgs

        declared: dict[str, Any] = {}
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
