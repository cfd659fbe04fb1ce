"""``probe`` and ``rescore``: parse typed options, run, then print the same
report and compare-masks tables the analysis commands print."""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from ..errors import UsageError
from ..probe.engine_config import EngineValues
from ..probe.engine_log import engine_output
from ._engine_options import (
    AllowPickleOpt,
    AttnImplementationOpt,
    DeviceMapOpt,
    EnforceEagerOpt,
    EngineArgOpt,
    Fp32HeadOpt,
    FullVocabOpt,
    GpuMemoryOpt,
    ImportedTemperatureOpt,
    LocateOpt,
    LocateSequencesOpt,
    LogprobsModeOpt,
    MaxModelLenOpt,
    MaxNumSeqsOpt,
    MaxTokensOpt,
    ProbeSamplerOpt,
    ProbeTrainerCheckpointOpt,
    PromptsOpt,
    ReplayRoutesOpt,
    ReplayWeightsOpt,
    RescoreTrainerCheckpointOpt,
    ResumeOpt,
    RoutesOpt,
    SamplerDtypeOpt,
    SamplerFp32HeadOpt,
    SamplesOpt,
    SeedOpt,
    TemperatureOpt,
    TensorParallelOpt,
    TopKLogprobsOpt,
    TopKOpt,
    TopPOpt,
    TrainerBatchTokensOpt,
    TrainerDeviceOpt,
    TrainerDtypeOpt,
    TrainerFp32HeadAliasOpt,
    TrainerFp32HeadOpt,
    TrustRemoteCodeOpt,
    VerboseOpt,
    engine_args,
)
from ._options import (
    DEFAULT_FORMAT,
    FormatOpt,
    ProbeOutOpt,
    RescoreOutOpt,
    RuleOpt,
)
from ._progress import Bars, engine_env
from ._streams import info, warn

if TYPE_CHECKING:
    from ..diagnose.locate.document import LocateResult
    from ..probe.options import ProbeOptions
    from ..probe.types import TrainerConfig


def _parsed_rules(rules: list[str] | None) -> list:
    """``--rule`` values read before any engine starts: a misspelt rule must not cost a whole probe first."""
    from ..rules import default_rules, parse_rule

    return [parse_rule(r) for r in rules] if rules else default_rules()


def _show(run_dir: Path, selected: list, format: str, located: LocateResult | None = None) -> None:
    """The report and compare-masks of the run written; ``located``: rescore --locate's localisation, which the
    document carries (its table after the report's, its file named on stderr)."""
    from ..probe.document import probe_document
    from ..render import seam

    doc = probe_document(run_dir, selected)
    for w in doc.analysis.warnings:
        warn(w)
    if located is None:
        seam.show(doc, format)
        return
    from ..diagnose.locate.document import with_localisation

    path = run_dir / "locate" / "locate.json"
    seam.show(with_localisation(doc, located, path), format)
    info(f"the localisation: {path}")


def probe(
    checkpoint: Path | None = typer.Argument(
        None,
        help="A local checkpoint folder (config.json, *.safetensors, tokenizer). Default: the bundled sample model.",
        show_default=False,
    ),
    prompts: PromptsOpt = None,
    out: ProbeOutOpt = None,
    sampler: ProbeSamplerOpt = EngineValues.sampler,
    url: str | None = typer.Option(
        None, "--url", help="Base URL of the server for --sampler vllm-server or trl-server."
    ),
    api_key_env: str = typer.Option(
        EngineValues.api_key_env,
        "--api-key-env",
        help="Environment variable holding the server's API key (the key is never written anywhere).",
    ),
    sampler_dtype: SamplerDtypeOpt = EngineValues.sampler_dtype,
    trainer_dtype: TrainerDtypeOpt = EngineValues.trainer_dtype,
    temperature: TemperatureOpt = EngineValues.temperature,
    top_p: TopPOpt = EngineValues.top_p,
    top_k: TopKOpt = EngineValues.top_k,
    n: SamplesOpt = EngineValues.n,
    max_tokens: MaxTokensOpt = EngineValues.max_tokens,
    top_k_logprobs: TopKLogprobsOpt = EngineValues.top_k_logprobs,
    seed: SeedOpt = EngineValues.seed,
    logprobs_mode: LogprobsModeOpt = EngineValues.logprobs_mode,
    tensor_parallel_size: TensorParallelOpt = EngineValues.tensor_parallel_size,
    max_num_seqs: MaxNumSeqsOpt = EngineValues.max_num_seqs,
    enforce_eager: EnforceEagerOpt = EngineValues.enforce_eager,
    gpu_memory_utilization: GpuMemoryOpt = EngineValues.gpu_memory_utilization,
    max_model_len: MaxModelLenOpt = EngineValues.max_model_len,
    fp32_lm_head: Fp32HeadOpt = EngineValues.fp32_lm_head,
    sampler_fp32_lm_head: SamplerFp32HeadOpt = EngineValues.sampler_fp32_lm_head,
    trainer_fp32_lm_head: TrainerFp32HeadOpt = EngineValues.trainer_fp32_lm_head,
    engine_arg: EngineArgOpt = None,
    attn_implementation: AttnImplementationOpt = EngineValues.attn_implementation,
    device_map: DeviceMapOpt = EngineValues.device_map,
    trainer_device: TrainerDeviceOpt = EngineValues.trainer_device,
    trainer_batch_tokens: TrainerBatchTokensOpt = EngineValues.trainer_batch_tokens,
    trust_remote_code: TrustRemoteCodeOpt = EngineValues.trust_remote_code,
    allow_pickle: AllowPickleOpt = EngineValues.allow_pickle,
    sampler_tokenizer: Path | None = typer.Option(
        None, "--sampler-tokenizer", help="A separate tokenizer the sampler uses; checked against the checkpoint's."
    ),
    trainer_checkpoint: ProbeTrainerCheckpointOpt = None,
    reward_fn: str | None = typer.Option(
        None,
        "--reward-fn",
        metavar="MODULE:FUNCTION",
        help="fn(prompt=, completion=, answer=) -> float. Default: exact match with the prompt's answer.",
    ),
    round_prompts: int = typer.Option(
        0, "--round-prompts", min=0, help="Prompts per sampling round (0: all in one batch)."
    ),
    replay_routes: ReplayRoutesOpt = EngineValues.replay_routes,
    replay_weights: ReplayWeightsOpt = EngineValues.replay_weights,
    routes: RoutesOpt = EngineValues.routes,
    resume: ResumeOpt = False,
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
    full_vocab: FullVocabOpt = False,
    turns: int = typer.Option(
        1,
        "--turns",
        metavar="N",
        help="Multi-turn conversations of N assistant turns: after each turn a tool message is appended through "
        "the checkpoint's chat template and the next turn is sampled from the whole conversation; the trainer "
        "scores the final conversation in one forward, tool spans masked (docs/multi-turn.md). Default: the "
        "bundled sample model with a chat template.",
    ),
    tool_response: str | None = typer.Option(
        None,
        "--tool-response",
        metavar="TEXT|FILE",
        help="With --turns: what the tool answers each turn (a file's text, or the text given). Default: a short "
        "bundled result.",
    ),
    turn_ids: str | None = typer.Option(
        None,
        "--turn-ids",
        metavar="tokens|messages",
        help="With --turns: tokens (the next prompt is the previous ids, the sampled ids and the tool span's ids; "
        "the default) or messages (decode, re-render and encode the conversation each turn; the trainer's ids are "
        "recorded where they differ from the sampler's).",
    ),
    verbose: VerboseOpt = False,
    rule: RuleOpt = None,
    format: FormatOpt = DEFAULT_FORMAT,
) -> None:
    """Sample with a real engine, teacher-force with a real trainer, record per-token logprob pairs, and print the report."""
    from ..probe.command import run_probe

    selected = _parsed_rules(rule)
    values = EngineValues(
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
        fp32_lm_head=fp32_lm_head,
        sampler_fp32_lm_head=sampler_fp32_lm_head,
        url=url,
        api_key_env=api_key_env,
        zero=zero,
        trainer_dtype=trainer_dtype,
        attn_implementation=attn_implementation,
        trainer_fp32_lm_head=trainer_fp32_lm_head,
        device_map=device_map,
        trainer_device=trainer_device,
        trainer_batch_tokens=trainer_batch_tokens,
        trust_remote_code=trust_remote_code,
        allow_pickle=allow_pickle,
        replay_routes=replay_routes,
        replay_weights=replay_weights,
        routes=routes,
    )
    opts = _probe_options(
        values,
        checkpoint=checkpoint,
        prompts=prompts,
        out=out,
        engine_arg=engine_arg,
        reward_fn=reward_fn,
        resume=resume,
        round_prompts=round_prompts,
        sampler_tokenizer=sampler_tokenizer,
        trainer_checkpoint=trainer_checkpoint,
        sampler_prefill=sampler_prefill,
        full_vocab=full_vocab,
        turns=turns,
        tool_response=tool_response,
        turn_ids=turn_ids,
    )
    with engine_output(opts.out, verbose=verbose, sampler_kind=opts.sampler.kind), Bars(enabled=True) as bars:
        run_dir = run_probe(opts, bars)
    _show(run_dir, selected, format)


def _probe_options(
    values: EngineValues,
    *,
    checkpoint: Path | None,
    prompts: Path | None,
    out: str | None,
    engine_arg: list[str] | None,
    reward_fn: str | None,
    resume: bool,
    round_prompts: int,
    sampler_tokenizer: Path | None,
    trainer_checkpoint: Path | None,
    sampler_prefill: bool,
    full_vocab: bool,
    turns: int,
    tool_response: str | None,
    turn_ids: str | None,
) -> ProbeOptions:
    """The probe's typed options, checked: the bundled model and prompts where none are given, the zero profile's
    sampler and dtype. Each check in the order a user meets it, before any engine starts."""
    from ..probe import options
    from ..probe.samplers import capabilities_of

    if values.logprobs_mode not in ("processed_logprobs", "raw_logprobs"):
        raise UsageError(f"--logprobs-mode {values.logprobs_mode!r}", hint="use processed_logprobs or raw_logprobs")
    values = values.profiled()
    if capabilities_of(values.sampler_kind).remote and not values.url:
        raise UsageError(f"--sampler {values.sampler_kind} needs --url http://HOST:PORT")
    from ..probe.turns import turns_config

    conversation = turns_config(turns, tool_response, turn_ids)
    bundled = checkpoint is None
    checkpoint = options.bundled_checkpoint(conversation) if checkpoint is None else checkpoint
    prompts = prompts if prompts is not None else options.bundled_prompts()
    engine_env()
    out_dir = _out_dir(out, "probe")
    values = replace(values, engine_args=engine_args(engine_arg))
    sampler = values.sampler_config()
    opts = options.ProbeOptions(
        checkpoint=checkpoint,
        prompts=prompts,
        out=out_dir,
        sampling=values.sampling_config(),
        sampler=sampler,
        trainer=values.trainer_config(),
        reward_fn=reward_fn,
        resume=resume,
        round_prompts=round_prompts,
        sampler_tokenizer=sampler_tokenizer,
        trainer_checkpoint=trainer_checkpoint,
        sampler_prefill=options.records_prefill(sampler_prefill, sampler),
        full_vocab=full_vocab,
        turns=conversation,
    )
    options.check_options(opts)  # run_probe checks again; here so that a bad option is reported before the note below
    if bundled:
        if not checkpoint.is_dir():
            raise UsageError("no CHECKPOINT given and no bundled sample model found", hint="pass a checkpoint folder")
        chat = "" if conversation is None else ", with a chat template"
        info(f"no CHECKPOINT given: probing the bundled sample model (tiny Qwen3 trained on addition{chat})")
    return opts


def _out_dir(out: str | None, command: str) -> Path:
    """``--out`` as a path. Taken as text first: ``Path("")`` would silently be the current directory."""
    if out is None:
        return Path("runs") / time.strftime(f"{command}-%Y%m%d-%H%M%S")
    if not out.strip():
        from ..outputs import check_run_out

        check_run_out(out, "--out")  # the one message for an empty run directory, as import gives it
    return Path(out)


def rescore(
    run: Annotated[
        Path,
        typer.Argument(help="A probe run directory, or an import with --routes (docs/import.md).", show_default=False),
    ],
    out: RescoreOutOpt,
    trainer_dtype: TrainerDtypeOpt = EngineValues.trainer_dtype,
    attn_implementation: AttnImplementationOpt = EngineValues.attn_implementation,
    trainer_fp32_lm_head: TrainerFp32HeadAliasOpt = EngineValues.trainer_fp32_lm_head,
    device_map: DeviceMapOpt = EngineValues.device_map,
    trainer_device: TrainerDeviceOpt = EngineValues.trainer_device,
    trainer_batch_tokens: TrainerBatchTokensOpt = EngineValues.trainer_batch_tokens,
    trust_remote_code: TrustRemoteCodeOpt = EngineValues.trust_remote_code,
    allow_pickle: AllowPickleOpt = EngineValues.allow_pickle,
    trainer_checkpoint: RescoreTrainerCheckpointOpt = None,
    temperature: ImportedTemperatureOpt = None,
    checkpoint: Path | None = typer.Option(
        None,
        "--checkpoint",
        metavar="PATH",
        help="Where the checkpoint the run was sampled from is now, when not at the path the run recorded (a "
        "relative path is also looked for under the run's own folders). Its sha256 is checked against the run's.",
    ),
    replay_routes: ReplayRoutesOpt = EngineValues.replay_routes,
    replay_weights: ReplayWeightsOpt = EngineValues.replay_weights,
    routes: RoutesOpt = EngineValues.routes,
    resume: ResumeOpt = False,
    verbose: VerboseOpt = False,
    rule: RuleOpt = None,
    locate: LocateOpt = False,
    locate_sequences: LocateSequencesOpt = None,
    format: FormatOpt = DEFAULT_FORMAT,
) -> None:
    """Re-score a run's samples with other trainer settings, or score an imported run with a checkpoint."""
    from ..probe.rescore import rescore as do_rescore

    selected = _parsed_rules(rule)
    cfg = EngineValues(  # the trainer's options alone: rescore scores samples already drawn
        trainer_dtype=trainer_dtype,
        attn_implementation=attn_implementation,
        trainer_fp32_lm_head=trainer_fp32_lm_head,
        device_map=device_map,
        trainer_device=trainer_device,
        trainer_batch_tokens=trainer_batch_tokens,
        trust_remote_code=trust_remote_code,
        allow_pickle=allow_pickle,
        replay_routes=replay_routes,
        replay_weights=replay_weights,
        routes=routes,
    ).trainer_config()
    out_dir = _out_dir(out, "rescore")
    located, locate_opts = _locatable(run, locate, locate_sequences, checkpoint)
    with engine_output(out_dir, verbose=verbose), Bars(enabled=True) as bars:
        run_dir = do_rescore(
            run,
            out_dir,
            cfg,
            resume=resume,
            progress=bars,
            trainer_checkpoint=trainer_checkpoint,
            temperature=temperature,
            checkpoint=checkpoint,
        )
    entry = _locate(run, run_dir, cfg, trainer_checkpoint, located, locate_opts, verbose)
    _show(run_dir, selected, format, entry)


def _locatable(run: Path, locate: bool, locate_sequences: int | None, checkpoint: Path | None):
    """``--locate``'s options and the run's sampler, refused before any rescoring when it cannot start again here."""
    from ..diagnose.locate.run import locate_options

    located, locate_opts = None, locate_options(locate, locate_sequences)
    if locate_opts is not None:
        from ..diagnose.locate.rescore import check_locatable

        located = check_locatable(run, checkpoint)
    return located, locate_opts


def _locate(
    run: Path,
    run_dir: Path,
    cfg: TrainerConfig,
    trainer_checkpoint: Path | None,
    located: Any,
    locate_opts: Any,
    verbose: bool,
) -> Any:
    """``--locate`` after the rescore, which it changes in nothing: the localisation's entry (None without it).
    The models it loads write their output to the run's engine.log, as the rescore's did."""
    if located is None or locate_opts is None:
        return None
    from ..diagnose.locate.rescore import locate_rescored

    with engine_output(run_dir, verbose=verbose), Bars(enabled=True) as bars:
        return locate_rescored(run, run_dir, cfg, trainer_checkpoint, locate_opts, located, bars)
