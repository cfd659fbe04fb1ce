"""``probe`` and ``rescore``: parse typed options, run, then print the same
report and compare-masks tables the analysis commands print."""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from ..errors import UsageError
from ..probe.engine_log import engine_output
from ._options import (
    AllowPickleOpt,
    AttnImplementationOpt,
    EnforceEagerOpt,
    EngineArgOpt,
    FormatOpt,
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
    PromptsOpt,
    ReplayRoutesOpt,
    ReplayWeightsOpt,
    RoutesOpt,
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
    TrainerDeviceOpt,
    TrainerDtypeOpt,
    TrainerFp32HeadAliasOpt,
    TrainerFp32HeadOpt,
    TrustRemoteCodeOpt,
    VerboseOpt,
    device_map_option,
    engine_args,
    out_option,
    resume_option,
    sampler_option,
    seed_option,
    trainer_checkpoint_option,
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
    ctx: typer.Context,
    checkpoint: Path | None = typer.Argument(
        None,
        help="A local checkpoint folder (config.json, *.safetensors, tokenizer). Default: the bundled sample model.",
        show_default=False,
    ),
    prompts: Path | None = PromptsOpt,
    out: str | None = out_option("Run directory. Default: runs/probe-<time>."),
    sampler: str | None = sampler_option(
        None,
        "vllm (offline engine, in-process; the default), vllm-server (a running OpenAI-compatible server, --url), "
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
    seed: int = seed_option(),
    logprobs_mode: str = LogprobsModeOpt,
    tensor_parallel_size: int = TensorParallelOpt,
    max_num_seqs: int | None = MaxNumSeqsOpt,
    enforce_eager: bool = EnforceEagerOpt,
    gpu_memory_utilization: float | None = GpuMemoryOpt,
    max_model_len: int | None = MaxModelLenOpt,
    fp32_lm_head: bool = Fp32HeadOpt,
    sampler_fp32_lm_head: bool = SamplerFp32HeadOpt,
    trainer_fp32_lm_head: bool = TrainerFp32HeadOpt,
    engine_arg: list[str] | None = EngineArgOpt,
    attn_implementation: str | None = AttnImplementationOpt,
    device_map: str | None = device_map_option("auto: shard a model larger than one GPU."),
    trainer_device: str | None = TrainerDeviceOpt,
    trainer_batch_tokens: int = TrainerBatchTokensOpt,
    trust_remote_code: bool = TrustRemoteCodeOpt,
    allow_pickle: bool = AllowPickleOpt,
    sampler_tokenizer: Path | None = typer.Option(
        None, "--sampler-tokenizer", help="A separate tokenizer the sampler uses; checked against the checkpoint's."
    ),
    trainer_checkpoint: Path | None = trainer_checkpoint_option(
        "Score with other weights of the same model (a later checkpoint: policy lag). Checked first: same "
        "architecture, vocabulary and tokenizer as the sampler's checkpoint. Default: the sampler's checkpoint. "
        "A --resume keeps the recorded one."
    ),
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
    resume: bool = resume_option("Continue a run directory that was interrupted."),
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
    full_vocab: bool = FullVocabOpt,
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
    verbose: bool = VerboseOpt,
    rule: list[str] | None = RuleOpt,
    format: str = FormatOpt,
) -> None:
    """Sample with a real engine, teacher-force with a real trainer, record per-token logprob pairs, and print the report."""
    from ..probe.command import run_probe

    selected = _parsed_rules(rule)
    paths = dict(checkpoint=checkpoint, prompts=prompts, sampler_tokenizer=sampler_tokenizer)
    opts = _probe_options({**ctx.params, **paths, "trainer_checkpoint": trainer_checkpoint})
    with engine_output(opts.out, verbose=verbose, sampler_kind=opts.sampler.kind), Bars(enabled=True) as bars:
        run_dir = run_probe(opts, bars)
    _show(run_dir, selected, format)


def _probe_options(params: dict[str, Any]) -> ProbeOptions:
    """The probe's typed options, checked: the bundled model and prompts where none are given, the zero profile's
    sampler and dtype. Each check in the order a user meets it, before any engine starts.

    ``params``: the command's parameters as click parsed them (``ctx.params``: numbers, flags and text), with its
    paths as typer converted them."""
    from ..probe import options
    from ..probe.engine_config import EngineValues
    from ..probe.samplers import capabilities_of

    if params["logprobs_mode"] not in ("processed_logprobs", "raw_logprobs"):
        raise UsageError(f"--logprobs-mode {params['logprobs_mode']!r}", hint="use processed_logprobs or raw_logprobs")
    values = EngineValues.of(params).profiled()
    if capabilities_of(values.sampler_kind).remote and not values.url:
        raise UsageError(f"--sampler {values.sampler_kind} needs --url http://HOST:PORT")
    from ..probe.turns import turns_config

    turns = turns_config(params["turns"], params["tool_response"], params["turn_ids"])
    bundled = params["checkpoint"] is None
    checkpoint = options.bundled_checkpoint(turns) if bundled else params["checkpoint"]
    prompts = params["prompts"] if params["prompts"] is not None else options.bundled_prompts()
    engine_env()
    out = _out_dir(params["out"], "probe")
    values = replace(values, engine_args=engine_args(params["engine_arg"]))
    sampler = values.sampler_config()
    opts = options.ProbeOptions(
        checkpoint=checkpoint,
        prompts=prompts,
        out=out,
        sampling=values.sampling_config(),
        sampler=sampler,
        trainer=values.trainer_config(),
        reward_fn=params["reward_fn"],
        resume=params["resume"],
        round_prompts=params["round_prompts"],
        sampler_tokenizer=params["sampler_tokenizer"],
        trainer_checkpoint=params["trainer_checkpoint"],
        sampler_prefill=options.records_prefill(params["sampler_prefill"], sampler),
        full_vocab=params["full_vocab"],
        turns=turns,
    )
    options.check_options(opts)  # run_probe checks again; here so that a bad option is reported before the note below
    if bundled:
        if not checkpoint.is_dir():
            raise UsageError("no CHECKPOINT given and no bundled sample model found", hint="pass a checkpoint folder")
        chat = "" if turns is None else ", with a chat template"
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


RESCORE_NOT_TAKEN = frozenset(
    {
        *("sampler", "sampler_dtype", "sampler_fp32_lm_head", "fp32_lm_head", "zero", "url", "api_key_env"),
        *("tensor_parallel_size", "max_num_seqs", "enforce_eager", "gpu_memory_utilization", "max_model_len"),
        *("n", "max_tokens", "top_p", "top_k", "top_k_logprobs", "seed", "logprobs_mode"),
    }
)
"""The engine options rescore has no parameter for: it scores samples already drawn, with the trainer alone."""


def rescore(
    ctx: typer.Context,
    run: Path = typer.Argument(
        ..., help="A probe run directory, or an import with --routes (docs/import.md).", show_default=False
    ),
    out: str = out_option("New run directory for the rescored pairs.", required=True),
    trainer_dtype: str = TrainerDtypeOpt,
    attn_implementation: str | None = AttnImplementationOpt,
    trainer_fp32_lm_head: bool = TrainerFp32HeadAliasOpt,
    device_map: str | None = device_map_option(),
    trainer_device: str | None = TrainerDeviceOpt,
    trainer_batch_tokens: int = TrainerBatchTokensOpt,
    trust_remote_code: bool = TrustRemoteCodeOpt,
    allow_pickle: bool = AllowPickleOpt,
    trainer_checkpoint: Path | None = trainer_checkpoint_option(
        "Score with other weights of the same model (policy lag), checked against the recorded checkpoint. "
        "An imported run: the checkpoint to score it with (required; its vocabulary, context and router must fit "
        "the imported tokens and routes)."
    ),
    temperature: float | None = ImportedTemperatureOpt,
    checkpoint: Path | None = typer.Option(
        None,
        "--checkpoint",
        metavar="PATH",
        help="Where the checkpoint the run was sampled from is now, when not at the path the run recorded (a "
        "relative path is also looked for under the run's own folders). Its sha256 is checked against the run's.",
    ),
    replay_routes: bool = ReplayRoutesOpt,
    replay_weights: bool = ReplayWeightsOpt,
    routes: bool = RoutesOpt,
    resume: bool = resume_option(),
    verbose: bool = VerboseOpt,
    rule: list[str] | None = RuleOpt,
    locate: bool = LocateOpt,
    locate_sequences: int | None = LocateSequencesOpt,
    format: str = FormatOpt,
) -> None:
    """Re-score a run's samples with other trainer settings, or score an imported run with a checkpoint."""
    from ..probe.engine_config import EngineValues
    from ..probe.rescore import rescore as do_rescore

    selected = _parsed_rules(rule)
    cfg = EngineValues.of(ctx.params, not_taken=RESCORE_NOT_TAKEN).trainer_config()
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
