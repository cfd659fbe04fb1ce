"""``diagnose``: the baseline (probe's sampler, trainer and sampling options), its variants, one library call.

Exit codes: 0 every variant ran; 3 the diagnose finished but at least one
variant failed (its engine did not start, or its process died: the reason is
in the output) or timed out (the others' results stand); 2 a usage or input error, before any engine starts.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, cast

import typer

from ._options import (
    AllowPickleOpt,
    AttnImplementationOpt,
    EnforceEagerOpt,
    EngineArgOpt,
    FormatOpt,
    GpuMemoryOpt,
    LocateOpt,
    LocateSequencesOpt,
    LogprobsModeOpt,
    MaxModelLenOpt,
    MaxNumSeqsOpt,
    MaxTokensOpt,
    PromptsOpt,
    SamplerDtypeOpt,
    SamplerFp32HeadOpt,
    SamplesOpt,
    TemperatureOpt,
    TensorParallelOpt,
    TopKLogprobsOpt,
    TopKOpt,
    TopPOpt,
    TrainerBatchTokensOpt,
    TrainerDtypeOpt,
    TrainerFp32HeadOpt,
    TrustRemoteCodeOpt,
    bootstrap_option,
    confidence_option,
    engine_args,
    html_option,
    out_option,
    plots_option,
    sampler_option,
    seed_option,
)

if TYPE_CHECKING:
    from ..diagnose.document import DiagnoseDocument
    from ..progress import Progress

EXIT_VARIANT_FAILED = 3


DIAGNOSE_NOT_TAKEN = frozenset(
    {"url", "api_key_env", "zero", "fp32_lm_head", "device_map", "trainer_device", "routes", "replay_routes"}
    | {"replay_weights"}
)
"""The engine options diagnose has no parameter for: it starts its own samplers (no server), records routes in
every run, and varies the zero profile, the heads and route replay as variants (``--vary``)."""


def diagnose(
    ctx: typer.Context,
    checkpoint: Path | None = typer.Argument(
        None, help="A local checkpoint folder. Default: the bundled sample model.", show_default=False
    ),
    prompts: Path | None = PromptsOpt,
    out: Path | None = out_option("Output directory. Default: runs/diagnose-<time>."),
    vary: list[str] | None = typer.Option(
        None,
        "--vary",
        metavar="KEY=VALUE",
        help="One variant changing one thing from the baseline: sampler.FIELD, sampler.engine.NAME, "
        "sampler.env.NAME or trainer.FIELD (trainer.replay_routes=true: score under the sampler's MoE routes). Repeatable.",
    ),
    matrix: Path | None = typer.Option(
        None, "--matrix", help="TOML file of named variants ([variant.NAME] tables of KEY = VALUE)."
    ),
    sampler: str = sampler_option(
        "vllm",
        "vllm (an offline engine per configuration) or hf (transformers generate; its MoE routes are recorded "
        "on any machine).",
    ),
    sampler_dtype: str = SamplerDtypeOpt,
    trainer_dtype: str = TrainerDtypeOpt,
    temperature: float = TemperatureOpt,
    top_p: float = TopPOpt,
    top_k: int = TopKOpt,
    n: int = SamplesOpt,
    max_tokens: int = MaxTokensOpt,
    top_k_logprobs: int = TopKLogprobsOpt,
    seed: int = seed_option("Sampling seed (and the bootstrap's)."),
    logprobs_mode: str = LogprobsModeOpt,
    tensor_parallel_size: int = TensorParallelOpt,
    max_num_seqs: int | None = MaxNumSeqsOpt,
    enforce_eager: bool = EnforceEagerOpt,
    gpu_memory_utilization: float | None = GpuMemoryOpt,
    max_model_len: int | None = MaxModelLenOpt,
    sampler_fp32_lm_head: bool = SamplerFp32HeadOpt,
    trainer_fp32_lm_head: bool = TrainerFp32HeadOpt,
    engine_arg: list[str] | None = EngineArgOpt,
    attn_implementation: str | None = AttnImplementationOpt,
    trainer_batch_tokens: int = TrainerBatchTokensOpt,
    trust_remote_code: bool = TrustRemoteCodeOpt,
    allow_pickle: bool = AllowPickleOpt,
    bootstrap: int = bootstrap_option(1000, "Bootstrap resamples over sequences."),
    confidence: float = confidence_option(0.95, min=0.5, max=0.9999),
    determinism: bool = typer.Option(True, "--determinism/--no-determinism", help="Repeat/alone/shuffled checks."),
    plots: Path | None = plots_option("Write the mismatch-vs-throughput picture (PNG) here."),
    html: Path | None = html_option("Write a self-contained HTML summary here."),
    locate: bool = LocateOpt,
    locate_sequences: int | None = LocateSequencesOpt,
    format: str = FormatOpt,
) -> None:
    """Where the mismatch comes from (decomposition against a float64 reference), what each change does to it
    (variants with bootstrap intervals), whether the numbers are repeatable, and what each configuration costs."""
    from ..diagnose.bytecode import shared_bytecode
    from ..diagnose.effects import Bootstrap
    from ..diagnose.locate.run import locate_options
    from ..diagnose.options import DiagnoseOptions, check_options, device
    from ..diagnose.run import run_diagnose
    from ..diagnose.variants import Configuration, default_matrix, given_variants
    from ..probe.engine_config import EngineValues
    from ..probe.engine_log import engine_output
    from ..probe.options import bundled_checkpoint, bundled_prompts
    from ._progress import Bars, engine_env

    variants = given_variants(vary or [], matrix)
    engine = EngineValues.of(
        ctx.params, engine_args(engine_arg), not_taken=DIAGNOSE_NOT_TAKEN
    )  # the configs as probe builds them
    sampler_cfg, trainer = engine.sampler_config(), engine.trainer_config()
    out_dir = out or Path("runs") / time.strftime("diagnose-%Y%m%d-%H%M%S")
    # torch's import notices, transformers' loading bars: into OUT/engine.log, as probe does (the samplers'
    # own processes write theirs beside their runs)
    with engine_output(out_dir, sampler_kind=sampler, any_dir=True):
        if not variants:
            variants = default_matrix(device(), Configuration(sampler_cfg, trainer))
        checkpoint = checkpoint or bundled_checkpoint(None)
        opts = DiagnoseOptions(
            checkpoint=checkpoint,
            prompts=prompts or bundled_prompts(),
            out=out_dir,
            sampling=engine.sampling_config(),
            sampler=sampler_cfg,
            trainer=trainer,
            variants=variants,
            bootstrap=Bootstrap(resamples=bootstrap, confidence=confidence, seed=seed),
            determinism=determinism,
            plots=plots,
            html=html,
            matrix=matrix,
            locate=locate_options(locate, locate_sequences),
        )
        with shared_bytecode():  # from the checks' first import of vLLM on, compiled once for every process
            check_options(opts)  # run_diagnose checks again; here so a bad option is reported before the bars
            engine_env()
            with Bars(enabled=True) as bars:
                doc = run_diagnose(opts, cast("Progress", bars))  # Bars has Progress's methods
    from ..render import seam
    from ..render.diagnose_pictures import write_pictures

    write_pictures(doc, plots, html, opts.out, (checkpoint, opts.prompts, matrix))
    seam.show(doc, format)
    _interrupted(doc)
    if doc.failed():
        raise typer.Exit(EXIT_VARIANT_FAILED)


def _interrupted(doc: DiagnoseDocument) -> None:
    """A Ctrl-C during the localisations (they run last): everything measured before stays, and is printed;
    the command says what was not localised and exits as an interrupted command does."""
    from ._streams import info

    left = doc.interrupted()
    if left:
        info(
            f"interrupted: the localisation of {', '.join(left)} did not finish; every other number above is "
            f"complete and kept in {doc.out}"
        )
        raise typer.Exit(130)
