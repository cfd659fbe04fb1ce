"""What ``diagnose`` is asked to do, and every check that needs no engine.

:func:`check_options` judges the baseline and every variant with the probe's
own checks before the first engine starts, so diagnose refuses exactly what
probe would refuse; :func:`resolve_max_tokens` settles ``--max-tokens 0``
once, so every configuration asks for the same length.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from .. import rundir
from ..errors import MismatchscopeError, UsageError
from ..probe.types import SamplerConfig, SamplingConfig, TrainerConfig
from .effects import Bootstrap
from .locate.run import LocateOptions
from .routes import REPLAY_KEY
from .variants import Configuration, Variant, apply, check_names, directory_name


@dataclass(frozen=True)
class DiagnoseOptions:
    checkpoint: Path
    prompts: Path
    out: Path
    sampling: SamplingConfig
    sampler: SamplerConfig
    trainer: TrainerConfig
    variants: list[Variant]
    env: dict[str, str] = field(default_factory=dict)
    bootstrap: Bootstrap = field(default_factory=Bootstrap)
    determinism: bool = True
    reference_dtype: str | None = None
    """None: float64 where it fits."""
    plots: Path | None = None
    """the folder the CLI writes the Pareto picture into (checked here, with every other output)."""
    html: Path | None = None
    matrix: Path | None = None
    """the matrix file the variants came from: an input no output may replace."""
    locate: LocateOptions | None = None
    """``--locate``: localise the gap of every configuration, after everything else (:mod:`.locate`)."""


def check_options(opts: DiagnoseOptions):
    """Everything that can be checked without an engine, for the baseline and every variant; returns the
    checkpoint info. The probe's own checks judge each configuration, so diagnose refuses exactly what
    probe would refuse, before the first engine starts."""
    from ..probe.checkpoint import inspect_checkpoint
    from ..probe.options import check_sampling
    from ..probe.prompts import load_prompts

    check_sampling(opts.sampling)
    from ..probe.samplers import capabilities_of, kinds_with

    # diagnose starts its own sampler for every configuration: an engine in-process, or transformers' generate
    if not capabilities_of(opts.sampler.kind).starts_here:
        raise UsageError(
            f"diagnose starts its own samplers; --sampler {opts.sampler.kind} is not one of them",
            hint=f"use --sampler {' or --sampler '.join(kinds_with('starts_here'))}",
        )
    check_names(opts.variants)
    base = Configuration(opts.sampler, opts.trainer, dict(opts.env))
    if base.trainer.replay_routes:
        raise UsageError(
            "the baseline trainer cannot replay routes: the baseline records them",
            hint=f"vary it instead: --vary {REPLAY_KEY}=true",
        )
    configurations = [("baseline", base)] + [
        (v.name, apply(base, v)) for v in opts.variants if v.skip_reason is None
    ]  # a skipped entry is reported, never started
    _check_outputs(opts)
    for name, cfg in configurations:  # the options alone first: the cheapest checks
        _check_configuration(opts, cfg, name)
    load_prompts(opts.prompts)
    info = inspect_checkpoint(
        opts.checkpoint, allow_pickle=opts.trainer.allow_pickle, trust_remote_code=opts.trainer.trust_remote_code
    )
    for name, cfg in configurations:
        _check_configuration(opts, cfg, name, info)
    return info


def _check_configuration(opts: DiagnoseOptions, cfg: Configuration, name: str, info=None) -> None:
    """The probe's checks on one configuration: its options, or (``info`` given) what needs the checkpoint.
    A variant's refusal names the variant."""
    from ..probe.options import ProbeOptions, check_against_checkpoint, check_engine_installed
    from ..probe.options import check_options as check_probe_options

    out = opts.out / ("baseline" if name == "baseline" else f"variants/{directory_name(name)}")
    probe = ProbeOptions(
        checkpoint=opts.checkpoint,
        prompts=opts.prompts,
        out=out,
        sampling=opts.sampling,
        sampler=cfg.sampler,
        trainer=cfg.trainer,
    )
    try:
        if info is None:
            check_probe_options(probe)
            check_engine_installed(cfg.sampler)
            return
        check_against_checkpoint(probe, info)
        if cfg.trainer.replay_routes and not info.is_moe:
            raise UsageError(
                f"{REPLAY_KEY} needs a mixture-of-experts checkpoint, and {info.path} is dense",
                hint="drop the variant, or diagnose an MoE checkpoint",
            )
    except MismatchscopeError as e:
        if name == "baseline":
            raise
        raise type(e)(f"variant {name!r}: {Exception.__str__(e)}", hint=e.hint) from None


def _check_outputs(opts: DiagnoseOptions) -> None:
    """--out a new or empty folder outside any run; --html and --plots (and the picture's file) on no input."""
    from ..outputs import check_all, check_run_out

    inputs = [opts.checkpoint, opts.prompts, opts.matrix]
    if Path(opts.checkpoint).is_dir():  # a checkpoint's files are inputs too: --html CKPT/config.json would replace one
        inputs += sorted(Path(opts.checkpoint).iterdir())
    known = check_all(files=[(opts.html, "--html")], dirs=[(opts.plots, "--plots")], inputs=inputs)
    check_run_out(opts.out, "--out", known)
    check_empty_out(opts.out)
    if opts.plots is not None or opts.html is not None:
        from ..outputs import require_matplotlib
        from .cost import PARETO_NAME

        require_matplotlib()
        known.refuse(Path(opts.plots or opts.out) / f"{PARETO_NAME}.png", "--plots")


def check_empty_out(out: Path) -> None:
    if out.exists() and not rundir.is_empty_dir(out):
        raise UsageError(f"{out} exists and is not empty", hint="choose a new --out")


def resolve_max_tokens(opts: DiagnoseOptions, info) -> int:
    """``--max-tokens 0`` resolved once, as probe resolves it, so every configuration asks for the same length."""
    from ..probe.command import AUTO_MAX_TOKENS
    from ..probe.prompts import load_prompts
    from ..probe.tokenizer import load_tokenizer, tokenize_prompts

    if opts.sampling.max_tokens:
        return opts.sampling.max_tokens
    tokenizer = load_tokenizer(info.path, trust_remote_code=opts.trainer.trust_remote_code)
    max_len = opts.sampler.max_model_len or info.max_model_len
    ids = tokenize_prompts(tokenizer, [p.text for p in load_prompts(opts.prompts)], max_model_len=max_len, max_tokens=1)
    return min(AUTO_MAX_TOKENS, max_len - max(len(p) for p in ids))


def device() -> str:
    """cuda when torch sees a GPU, else cpu (torch is imported here only, when it is asked)."""
    try:
        import torch
    except ImportError:  # pragma: no cover - the probe extra is missing; check_options will say so
        return "cpu"
    return "cuda" if torch.cuda.is_available() else "cpu"
