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

from ..probe.engine_config import EngineValues
from ._engine_options import (
    DIAGNOSE_SAMPLER,
    AllowPickleOpt,
    AttnImplementationOpt,
    DiagnoseSamplerOpt,
    DiagnoseSeedOpt,
    EnforceEagerOpt,
    EngineArgOpt,
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
    engine_args,
)
from ._options import (
    DEFAULT_FORMAT,
    DIAGNOSE_BOOTSTRAP,
    DIAGNOSE_CONFIDENCE,
    DiagnoseBootstrapOpt,
    DiagnoseConfidenceOpt,
    DiagnoseHtmlOpt,
    DiagnoseOutOpt,
    DiagnosePlotsOpt,
    FormatOpt,
)

if TYPE_CHECKING:
    from ..diagnose.document import DiagnoseDocument
    from ..progress import Progress

EXIT_VARIANT_FAILED = 3


def diagnose(
    checkpoint: Path | None = typer.Argument(
        None, help="A local checkpoint folder. Default: the bundled sample model.", show_default=False
    ),
    prompts: PromptsOpt = None,
    out: DiagnoseOutOpt = None,
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
    sampler: DiagnoseSamplerOpt = DIAGNOSE_SAMPLER,
    sampler_dtype: SamplerDtypeOpt = EngineValues.sampler_dtype,
    trainer_dtype: TrainerDtypeOpt = EngineValues.trainer_dtype,
    temperature: TemperatureOpt = EngineValues.temperature,
    top_p: TopPOpt = EngineValues.top_p,
    top_k: TopKOpt = EngineValues.top_k,
    n: SamplesOpt = EngineValues.n,
    max_tokens: MaxTokensOpt = EngineValues.max_tokens,
    top_k_logprobs: TopKLogprobsOpt = EngineValues.top_k_logprobs,
    seed: DiagnoseSeedOpt = EngineValues.seed,
    logprobs_mode: LogprobsModeOpt = EngineValues.logprobs_mode,
    tensor_parallel_size: TensorParallelOpt = EngineValues.tensor_parallel_size,
    max_num_seqs: MaxNumSeqsOpt = EngineValues.max_num_seqs,
    enforce_eager: EnforceEagerOpt = EngineValues.enforce_eager,
    gpu_memory_utilization: GpuMemoryOpt = EngineValues.gpu_memory_utilization,
    max_model_len: MaxModelLenOpt = EngineValues.max_model_len,
    sampler_fp32_lm_head: SamplerFp32HeadOpt = EngineValues.sampler_fp32_lm_head,
    trainer_fp32_lm_head: TrainerFp32HeadOpt = EngineValues.trainer_fp32_lm_head,
    engine_arg: EngineArgOpt = None,
    attn_implementation: AttnImplementationOpt = EngineValues.attn_implementation,
    trainer_batch_tokens: TrainerBatchTokensOpt = EngineValues.trainer_batch_tokens,
    trust_remote_code: TrustRemoteCodeOpt = EngineValues.trust_remote_code,
    allow_pickle: AllowPickleOpt = EngineValues.allow_pickle,
    bootstrap: DiagnoseBootstrapOpt = DIAGNOSE_BOOTSTRAP,
    confidence: DiagnoseConfidenceOpt = DIAGNOSE_CONFIDENCE,
    determinism: bool = typer.Option(True, "--determinism/--no-determinism", help="Repeat/alone/shuffled checks."),
    plots: DiagnosePlotsOpt = None,
    html: DiagnoseHtmlOpt = None,
    locate: LocateOpt = False,
    locate_sequences: LocateSequencesOpt = None,
    format: FormatOpt = DEFAULT_FORMAT,
) -> None:
    """Where the mismatch comes from (decomposition against a float64 reference), what each change does to it
    (variants with bootstrap intervals), whether the numbers are repeatable, and what each configuration costs."""
    from ..diagnose.bytecode import shared_bytecode
    from ..diagnose.effects import Bootstrap
    from ..diagnose.locate.run import locate_options
    from ..diagnose.options import DiagnoseOptions, check_options, device
    from ..diagnose.run import run_diagnose
    from ..diagnose.variants import Configuration, default_matrix, given_variants
    from ..probe.engine_log import engine_output
    from ..probe.options import bundled_checkpoint, bundled_prompts
    from ._progress import Bars, engine_env

    variants = given_variants(vary or [], matrix)
    # The configs as probe builds them. diagnose starts its own samplers (no server), records routes in every run,
    # and varies the zero profile, the heads and route replay as variants (--vary): those keep their defaults.
    engine = EngineValues(
        temperature=temperature,
        top_p=top_p,
        top_k=top_k,
        n=n,
        max_tokens=max_tokens,
        top_k_logprobs=top_k_logprobs,
        seed=seed,
        logprobs_mode=logprobs_mode,
        sampler=sampler,
        sampler_dtype=sampler_dtype,
        tensor_parallel_size=tensor_parallel_size,
        max_num_seqs=max_num_seqs,
        enforce_eager=enforce_eager,
        gpu_memory_utilization=gpu_memory_utilization,
        max_model_len=max_model_len,
        sampler_fp32_lm_head=sampler_fp32_lm_head,
        engine_args=engine_args(engine_arg),
        trainer_dtype=trainer_dtype,
        attn_implementation=attn_implementation,
        trainer_fp32_lm_head=trainer_fp32_lm_head,
        trainer_batch_tokens=trainer_batch_tokens,
        trust_remote_code=trust_remote_code,
        allow_pickle=allow_pickle,
    )
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
    from ..diagnose.run import write_document
    from ..render import seam
    from ..render.diagnose_pictures import write_pictures

    pictured = write_pictures(doc, plots, html, opts.out, (checkpoint, opts.prompts, matrix))
    if pictured is not doc:  # diagnose.json names the pictures, as the printed document does
        write_document(opts.out, pictured)
    doc = pictured
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
