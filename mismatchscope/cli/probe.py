"""``probe`` and ``rescore``: parse typed options, run, then print the same
report and compare-masks tables the analysis commands print."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import TYPE_CHECKING, Literal, cast

import typer

from ..bundled import sample_dir
from ..errors import NoTokensError, UsageError
from ..probe.engine_log import engine_output
from ._options import (
    DEFAULT_SAMPLER_DTYPE,
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
    RuleOpt,
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
    out_option,
)
from ._progress import Bars, engine_env
from ._streams import OutputFormat, emit_json, info, stdout_console, warn

TrainerCheckpointOpt = typer.Option(
    None,
    "--trainer-checkpoint",
    metavar="PATH",
    help="Score with other weights of the same model (a later checkpoint: policy lag). Checked first: same "
    "architecture, vocabulary and tokenizer as the sampler's checkpoint. Default: the sampler's checkpoint. "
    "A --resume keeps the recorded one.",
)


ReplayRoutesOpt = typer.Option(
    False,
    "--replay-routes",
    help="MoE: score the trainer with its expert ids forced to the sampler's recorded ones (gate weights from "
    "the trainer's own router at those ids).",
)
ReplayWeightsOpt = typer.Option(
    False, "--replay-weights", help="With --replay-routes: also use the sampler's recorded gate weights."
)
RoutesOpt = typer.Option(True, "--routes/--no-routes", help="MoE: record both sides' expert routes in routes/.")
VerboseOpt = typer.Option(
    False,
    "--verbose",
    help="Show the engines' own output (vLLM, torch, transformers) live. Default: it goes to engine.log in the run "
    "directory, and the probe says where.",
)

if TYPE_CHECKING:
    from ..probe.run import Progress
    from ..probe.types import LogprobsMode


def _summarise(run_dir: Path, rules: list[str] | None, format: OutputFormat) -> None:
    from ..analysis.engine import AnalysisRequest, analyse
    from ..rules import default_rules, parse_rule

    selected = [parse_rule(r) for r in rules] if rules else default_rules()
    try:
        result = analyse(str(run_dir), AnalysisRequest(report=True, masks=True, rules=selected, examples=5))
    except NoTokensError:
        raise NoTokensError(
            f"the run in {run_dir} holds no generated token with finite logprobs: every completion "
            "was empty (the model ended each one at once) or dropped",
            hint="check the prompts, --max-tokens and the stop settings; the run's samples/ folder "
            "holds what was sampled",
        ) from None
    for w in result.warnings:
        warn(w)
    if format is OutputFormat.json:
        from ..documents import document
        from ..probe.document import ProbeDocument

        manifest = json.loads((run_dir / "manifest.json").read_text())
        assert result.report is not None and result.masks is not None  # report=True, masks=True
        from dataclasses import replace

        report = replace(result.report, worst=None)  # as report prints it without --worst
        emit_json(document(ProbeDocument(str(run_dir), manifest, report, result.masks)))
        return
    from ..render.tables import header, masks_tables, report_tables

    console = stdout_console()
    header(console, result)
    report_tables(console, result)
    masks_tables(console, result, 5)
    console.print(
        f"\nrun directory: {run_dir}  (mismatchscope report {run_dir}; compare-masks {run_dir})", highlight=False
    )


def probe(
    checkpoint: Path | None = typer.Argument(
        None,
        help="A local checkpoint folder (config.json, *.safetensors, tokenizer). Default: the bundled sample model.",
        show_default=False,
    ),
    prompts: Path | None = PromptsOpt,
    out: str | None = out_option("Run directory. Default: runs/probe-<time>."),
    sampler: str | None = typer.Option(
        None,
        "--sampler",
        help="vllm (offline engine, in-process; the default), vllm-server (a running OpenAI-compatible server, --url), "
        "trl-server (a running trl vllm-serve, --url), or hf (transformers generate; the default with --zero).",
        show_default=False,
    ),
    url: str | None = typer.Option(
        None, "--url", help="Base URL of the server for --sampler vllm-server or trl-server."
    ),
    api_key_env: str = typer.Option(
        "MISMATCHSCOPE_API_KEY",
        "--api-key-env",
        help="Environment variable holding the server's API key (the key is never written anywhere).",
    ),
    sampler_dtype: str = SamplerDtypeOpt,
    trainer_dtype: str = TrainerDtypeOpt,
    temperature: float = TemperatureOpt,
    top_p: float = TopPOpt,
    top_k: int = TopKOpt,
    n: int = SamplesOpt,
    max_tokens: int = MaxTokensOpt,
    top_k_logprobs: int = TopKLogprobsOpt,
    seed: int = typer.Option(0, "--seed"),
    logprobs_mode: str = LogprobsModeOpt,
    tensor_parallel_size: int = TensorParallelOpt,
    max_num_seqs: int | None = MaxNumSeqsOpt,
    enforce_eager: bool = EnforceEagerOpt,
    gpu_memory_utilization: float | None = GpuMemoryOpt,
    max_model_len: int | None = MaxModelLenOpt,
    fp32_lm_head: bool = typer.Option(
        False, "--fp32-lm-head", help="fp32 lm_head on BOTH sides (one side only makes mismatch worse)."
    ),
    sampler_fp32_lm_head: bool = SamplerFp32HeadOpt,
    trainer_fp32_lm_head: bool = TrainerFp32HeadOpt,
    engine_arg: list[str] | None = EngineArgOpt,
    attn_implementation: str | None = AttnImplementationOpt,
    device_map: str | None = typer.Option(None, "--device-map", help="auto: shard a model larger than one GPU."),
    trainer_device: str | None = typer.Option(None, "--trainer-device"),
    trainer_batch_tokens: int = TrainerBatchTokensOpt,
    trust_remote_code: bool = TrustRemoteCodeOpt,
    allow_pickle: bool = AllowPickleOpt,
    sampler_tokenizer: Path | None = typer.Option(
        None, "--sampler-tokenizer", help="A separate tokenizer the sampler uses; checked against the checkpoint's."
    ),
    trainer_checkpoint: Path | None = TrainerCheckpointOpt,
    reward_fn: str | None = typer.Option(
        None,
        "--reward-fn",
        metavar="MODULE:FUNCTION",
        help="fn(prompt=, completion=, answer=) -> float. Default: exact match with the prompt's answer.",
    ),
    round_prompts: int = typer.Option(
        0, "--round-prompts", min=0, help="Prompts per sampling round (0: all in one batch)."
    ),
    replay_routes: bool = ReplayRoutesOpt,
    replay_weights: bool = ReplayWeightsOpt,
    routes: bool = RoutesOpt,
    resume: bool = typer.Option(False, "--resume", help="Continue a run directory that was interrupted."),
    sampler_prefill: bool = typer.Option(
        False,
        "--sampler-prefill",
        help="Also record the sampler's logprobs from a prefill of prompt + completion (column sampler_prefill_logprob; "
        "raw logprobs: needs --logprobs-mode raw_logprobs or T=1 without top-p/top-k). certify pairs it with both sides.",
    ),
    zero: bool = typer.Option(
        False,
        "--zero",
        help="The zero-mismatch profile: the transformers sampler decodes by recomputing each step with the trainer's "
        "own forward and log-softmax (one sequence, fixed width, no KV cache), in the trainer's dtype "
        "(--trainer-dtype), with its prefill recorded. certify should pass all three pairings.",
    ),
    full_vocab: bool = typer.Option(
        False,
        "--full-vocab",
        help="Also record, per position, a digest of each side's whole log-prob row (float32 bytes) and the largest "
        "difference and its id (--sampler hf): certify --full-vocab compares whole distributions.",
    ),
    verbose: bool = VerboseOpt,
    rule: list[str] | None = RuleOpt,
    format: OutputFormat = FormatOpt,
) -> None:
    """Sample with a real engine, teacher-force with a real trainer, record per-token logprob pairs, and print the report."""
    from ..probe.options import ProbeOptions, check_options
    from ..probe.run import run_probe
    from ..probe.types import SamplerConfig, SamplingConfig, TrainerConfig

    if logprobs_mode not in ("processed_logprobs", "raw_logprobs"):
        raise UsageError(f"--logprobs-mode {logprobs_mode!r}", hint="use processed_logprobs or raw_logprobs")
    sampler = sampler or ("hf" if zero else "vllm")
    if zero and sampler_dtype == DEFAULT_SAMPLER_DTYPE:
        sampler_dtype = trainer_dtype  # the profile runs one dtype on both sides; an explicit other one is refused
    if sampler in ("vllm-server", "trl-server") and not url:
        raise UsageError(f"--sampler {sampler} needs --url http://HOST:PORT")
    bundled = checkpoint is None
    if bundled:
        checkpoint = sample_dir() / "tiny-qwen3"
    if prompts is None:
        prompts = sample_dir() / "prompts.jsonl"
    engine_env()
    opts = ProbeOptions(
        checkpoint=checkpoint,
        prompts=prompts,
        out=_out_dir(out, "probe"),
        sampling=SamplingConfig(
            temperature=temperature,
            top_p=top_p,
            top_k=top_k,
            n=n,
            max_tokens=max_tokens,
            top_k_logprobs=top_k_logprobs,
            seed=seed,
            logprobs_mode=cast("LogprobsMode", logprobs_mode),
        ),  # type: ignore[arg-type]
        sampler=SamplerConfig(
            kind=cast(Literal["vllm", "vllm-server", "trl-server", "hf"], sampler),  # check_options checks it
            dtype=sampler_dtype,
            tensor_parallel_size=tensor_parallel_size,  # type: ignore[arg-type]
            max_num_seqs=max_num_seqs,
            enforce_eager=enforce_eager,
            gpu_memory_utilization=gpu_memory_utilization,
            max_model_len=max_model_len,
            fp32_lm_head=fp32_lm_head or sampler_fp32_lm_head,
            engine_args=engine_args(engine_arg),
            url=url,
            api_key_env=api_key_env,
            zero=zero,
        ),
        trainer=TrainerConfig(
            dtype=trainer_dtype,
            attn_implementation=attn_implementation,
            fp32_lm_head=fp32_lm_head or trainer_fp32_lm_head,
            device_map=device_map,
            device=trainer_device,
            batch_tokens=trainer_batch_tokens,
            trust_remote_code=trust_remote_code,
            allow_pickle=allow_pickle,
            replay_routes=replay_routes,
            replay_weights=replay_weights,
            record_routes=routes,
            zero=zero,
        ),
        reward_fn=reward_fn,
        resume=resume,
        round_prompts=round_prompts,
        sampler_tokenizer=sampler_tokenizer,
        trainer_checkpoint=trainer_checkpoint,
        sampler_prefill=sampler_prefill or zero,
        full_vocab=full_vocab,
    )
    check_options(opts)  # run_probe checks again; here so that a bad option is reported before the note below
    if bundled:
        if not checkpoint.is_dir():
            raise UsageError("no CHECKPOINT given and no bundled sample model found", hint="pass a checkpoint folder")
        info("no CHECKPOINT given: probing the bundled sample model (tiny Qwen3 trained on addition)")
    with engine_output(opts.out, verbose=verbose, sampler_kind=sampler), Bars(enabled=True) as bars:
        run_dir = run_probe(opts, cast("Progress", bars))  # Bars has Progress's methods
    _summarise(run_dir, rule, format)


def _out_dir(out: str | None, command: str) -> Path:
    """``--out`` as a path. Taken as text first: ``Path("")`` would silently be the current directory."""
    if out is None:
        return Path("runs") / time.strftime(f"{command}-%Y%m%d-%H%M%S")
    if not out.strip():
        from ..outputs import check_run_out

        check_run_out(out, "--out")  # the one message for an empty run directory, as import gives it
    return Path(out)


def rescore(
    run: Path = typer.Argument(
        ..., help="A probe run directory, or an import with --routes (docs/import.md).", show_default=False
    ),
    out: str = out_option("New run directory for the rescored pairs.", required=True),
    trainer_dtype: str = TrainerDtypeOpt,
    attn_implementation: str | None = AttnImplementationOpt,
    trainer_fp32_lm_head: bool = typer.Option(False, "--trainer-fp32-lm-head", "--fp32-lm-head"),
    device_map: str | None = typer.Option(None, "--device-map"),
    trainer_device: str | None = typer.Option(None, "--trainer-device"),
    trainer_batch_tokens: int = TrainerBatchTokensOpt,
    trust_remote_code: bool = TrustRemoteCodeOpt,
    allow_pickle: bool = AllowPickleOpt,
    trainer_checkpoint: Path | None = typer.Option(
        None,
        "--trainer-checkpoint",
        metavar="PATH",
        help="Score with other weights of the same model (policy lag), checked against the recorded checkpoint. "
        "An imported run: the checkpoint to score it with (required; its vocabulary, context and router must fit "
        "the imported tokens and routes).",
    ),
    temperature: float | None = typer.Option(
        None,
        "--temperature",
        help="An imported run: the temperature its sampler ran at (required: no stack's dump records it; the "
        "trainer divides its logits by it). A probe run keeps its own.",
        show_default=False,
    ),
    replay_routes: bool = ReplayRoutesOpt,
    replay_weights: bool = ReplayWeightsOpt,
    routes: bool = RoutesOpt,
    resume: bool = typer.Option(False, "--resume"),
    verbose: bool = VerboseOpt,
    rule: list[str] | None = RuleOpt,
    locate: bool = LocateOpt,
    locate_sequences: int | None = LocateSequencesOpt,
    format: OutputFormat = FormatOpt,
) -> None:
    """Re-score a run's samples with other trainer settings, or score an imported run with a checkpoint."""
    from ..probe.run import rescore as do_rescore
    from ..probe.types import TrainerConfig

    cfg = TrainerConfig(
        dtype=trainer_dtype,
        attn_implementation=attn_implementation,
        fp32_lm_head=trainer_fp32_lm_head,
        device_map=device_map,
        device=trainer_device,
        batch_tokens=trainer_batch_tokens,
        trust_remote_code=trust_remote_code,
        allow_pickle=allow_pickle,
        replay_routes=replay_routes,
        replay_weights=replay_weights,
        record_routes=routes,
    )
    out_dir = _out_dir(out, "rescore")
    from ..diagnose.locate.run import locate_options

    located, entry, locate_opts = None, None, locate_options(locate, locate_sequences)
    if locate_opts is not None:  # refused before any rescoring when the run's sampler cannot start again here
        from ..diagnose.locate.rescore import check_locatable

        located = check_locatable(run)
    with engine_output(out_dir, verbose=verbose), Bars(enabled=True) as bars:
        run_dir = do_rescore(
            run,
            out_dir,
            cfg,
            resume=resume,
            progress=cast("Progress", bars),
            trainer_checkpoint=trainer_checkpoint,
            temperature=temperature,
        )
    if located is not None and locate_opts is not None:  # after the rescore, which it changes in nothing
        from ..diagnose.locate.rescore import locate_rescored

        with Bars(enabled=True) as bars:
            entry = locate_rescored(run, run_dir, cfg, trainer_checkpoint, locate_opts, located, bars)
    _summarise(run_dir, rule, format)
    if entry is not None and format is OutputFormat.json:  # stdout holds the one JSON document
        info(f"the localisation: {run_dir / 'locate' / 'locate.json'}")
    elif entry is not None:
        from ..render.locate_tables import render_locate

        render_locate(stdout_console(), entry, title="locate")
