"""The engine options of ``probe``, ``rescore`` and ``diagnose`` (sampler, trainer and sampling), each declared
once as an ``Annotated`` alias, as ``_options`` declares the others.

Their defaults are ``EngineValues``' fields, which take them from the config classes: a command writes
``top_p: TopPOpt = EngineValues.top_p``. Their values are checked once, by ``probe.options``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from ..documents import json_edge
from ..probe.engine_config import DEFAULT_SAMPLER_DTYPE

# Optional[...] below, not ``X | None``: the aliases are evaluated when this module is imported.
# ruff: noqa: UP045

DIAGNOSE_SAMPLER = "vllm"
"""``diagnose --sampler``: an offline vLLM engine per configuration."""

PromptsOpt = Annotated[
    Optional[Path],
    typer.Option(
        "--prompts",
        "-p",
        help='JSONL, one {"prompt": ..., "answer": ...} per line. Default: the bundled sample prompts.',
    ),
]
SamplerDtypeOpt = Annotated[
    str,
    typer.Option(
        "--sampler-dtype",
        help=f"Sampler dtype. The default {DEFAULT_SAMPLER_DTYPE} vs a float32 trainer is a CPU demo pairing that "
        "shows real mismatch; pass your serving dtype.",
    ),
]
TrainerDtypeOpt = Annotated[str, typer.Option("--trainer-dtype", help="Trainer forward-pass dtype.")]
TemperatureOpt = Annotated[float, typer.Option("--temperature", "-T", min=0.0)]
ImportedTemperatureOpt = Annotated[
    Optional[float],
    typer.Option(
        "--temperature",
        help="An imported run: the temperature its sampler ran at (required: no stack's dump records it; the "
        "trainer divides its logits by it). A probe run keeps its own.",
        show_default=False,
    ),
]
"""rescore's --temperature: only an imported run takes one (probe and diagnose: TemperatureOpt)."""
TopPOpt = Annotated[float, typer.Option("--top-p", min=0.0, max=1.0)]
TopKOpt = Annotated[int, typer.Option("--top-k", help="-1: no top-k truncation.")]
SamplesOpt = Annotated[int, typer.Option("-n", min=1, help="Samples per prompt (a GRPO group).")]
MaxTokensOpt = Annotated[
    int, typer.Option("--max-tokens", min=0, help="Tokens per completion. 0: up to 256, within the context length.")
]
TopKLogprobsOpt = Annotated[
    int, typer.Option("--top-k-logprobs", min=0, help="The sampler's top-k logprobs recorded per position.")
]
SeedOpt = Annotated[int, typer.Option("--seed")]
DiagnoseSeedOpt = Annotated[int, typer.Option("--seed", help="Sampling seed (and the bootstrap's).")]
LogprobsModeOpt = Annotated[
    str,
    typer.Option(
        "--logprobs-mode",
        help="processed_logprobs (after T/top-p/top-k; trainer divides by T) or raw_logprobs (compared at T = 1).",
    ),
]
TensorParallelOpt = Annotated[
    int, typer.Option("--tensor-parallel-size", "--tp", min=1, help="Passed to vLLM unchanged.")
]
MaxNumSeqsOpt = Annotated[Optional[int], typer.Option("--max-num-seqs")]
EnforceEagerOpt = Annotated[
    bool, typer.Option("--enforce-eager/--no-enforce-eager", help="vLLM eager mode (no CUDA graphs / compile).")
]
GpuMemoryOpt = Annotated[Optional[float], typer.Option("--gpu-memory-utilization")]
MaxModelLenOpt = Annotated[Optional[int], typer.Option("--max-model-len")]
Fp32HeadOpt = Annotated[
    bool, typer.Option("--fp32-lm-head", help="fp32 lm_head on BOTH sides (one side only makes mismatch worse).")
]
SamplerFp32HeadOpt = Annotated[
    bool, typer.Option("--sampler-fp32-lm-head", help="vLLM hf_overrides head_dtype=float32.")
]
TrainerFp32HeadOpt = Annotated[bool, typer.Option("--trainer-fp32-lm-head")]
TrainerFp32HeadAliasOpt = Annotated[bool, typer.Option("--trainer-fp32-lm-head", "--fp32-lm-head")]
"""rescore's: it has only a trainer, so both spellings set the trainer's head."""
EngineArgOpt = Annotated[
    Optional[list[str]],
    typer.Option(
        "--engine-arg",
        metavar="KEY=VALUE",
        help="Any other vllm.LLM argument, passed unchanged (VALUE may be JSON). Repeatable. With --sampler vllm-"
        "server: added to every request body, except timeout=SECONDS (per HTTP request, default 600) and "
        "model=NAME (the served model). With --sampler hf: attn_implementation, batch_size, "
        "trust_remote_code.",
    ),
]
AttnImplementationOpt = Annotated[
    Optional[str],
    typer.Option("--attn-implementation", help="Trainer attention: eager, sdpa, flash_attention_2, ..."),
]
TrainerBatchTokensOpt = Annotated[
    int, typer.Option("--trainer-batch-tokens", min=1, help="Token budget of one scoring batch.")
]
TrustRemoteCodeOpt = Annotated[
    bool, typer.Option("--trust-remote-code", help="Run the checkpoint's own Python code (off unless asked).")
]
AllowPickleOpt = Annotated[
    bool, typer.Option("--allow-pickle", help="Load .bin/.pt (pickle) weights; refused by default.")
]
DeviceMapOpt = Annotated[Optional[str], typer.Option("--device-map", help="auto: shard a model larger than one GPU.")]
"""The trainer's accelerate device map."""
TrainerDeviceOpt = Annotated[Optional[str], typer.Option("--trainer-device")]
ReplayRoutesOpt = Annotated[
    bool,
    typer.Option(
        "--replay-routes",
        help="MoE: score the trainer with its expert ids forced to the sampler's recorded ones (gate weights from "
        "the trainer's own router at those ids).",
    ),
]
ReplayWeightsOpt = Annotated[
    bool, typer.Option("--replay-weights", help="With --replay-routes: also use the sampler's recorded gate weights.")
]
RoutesOpt = Annotated[
    bool, typer.Option("--routes/--no-routes", help="MoE: record both sides' expert routes in routes/.")
]


def _sampler(help: str, *, show_default: bool = True) -> Any:
    """``--sampler``: the engines a command can start (probe reaches servers too; diagnose starts its own)."""
    return typer.Option("--sampler", help=help, show_default=show_default)


ProbeSamplerOpt = Annotated[
    Optional[str],
    _sampler(
        "vllm (offline engine, in-process; the default), vllm-server (a running OpenAI-compatible server, --url), "
        "trl-server (a running trl vllm-serve, --url), or hf (transformers generate; the default with --zero).",
        show_default=False,
    ),
]
DiagnoseSamplerOpt = Annotated[
    str,
    _sampler(
        "vllm (an offline engine per configuration) or hf (transformers generate; its MoE routes are recorded "
        "on any machine)."
    ),
]


def _trainer_checkpoint(help: str) -> Any:
    """``--trainer-checkpoint``: other weights of the same model for the trainer (policy lag)."""
    return typer.Option("--trainer-checkpoint", metavar="PATH", help=help)


ProbeTrainerCheckpointOpt = Annotated[
    Optional[Path],
    _trainer_checkpoint(
        "Score with other weights of the same model (a later checkpoint: policy lag). Checked first: same "
        "architecture, vocabulary and tokenizer as the sampler's checkpoint. Default: the sampler's checkpoint. "
        "A --resume keeps the recorded one."
    ),
]
RescoreTrainerCheckpointOpt = Annotated[
    Optional[Path],
    _trainer_checkpoint(
        "Score with other weights of the same model (policy lag), checked against the recorded checkpoint. "
        "An imported run: the checkpoint to score it with (required; its vocabulary, context and router must fit "
        "the imported tokens and routes)."
    ),
]
ResumeOpt = Annotated[bool, typer.Option("--resume", help="Continue a run directory that was interrupted.")]
VerboseOpt = Annotated[
    bool,
    typer.Option(
        "--verbose",
        help="Show the engines' own output (vLLM, torch, transformers) live. Default: it goes to engine.log in the "
        "run directory, and the probe says where.",
    ),
]
FullVocabOpt = Annotated[
    bool,
    typer.Option(
        "--full-vocab",
        help="Also record, per position, a digest of each side's whole log-prob row (float32 bytes) and the largest "
        "difference and its id (--sampler hf): certify --full-vocab compares whole distributions.",
    ),
]
LocateOpt = Annotated[
    bool,
    typer.Option(
        "--locate",
        help="Where in the forward pass the sampler and the trainer part: per layer and op, each side against the "
        "float64 reference, on the run's worst sequences (docs/diagnose.md).",
    ),
]
LocateSequencesOpt = Annotated[
    Optional[int],
    typer.Option(
        "--locate-sequences",
        min=1,
        help="--locate: the worst N sequences by the report's ranking (k3_sum). Default: 4.",
        show_default=False,
    ),
]


@json_edge
def engine_args(items: list[str] | None) -> dict[str, Any]:
    """``--engine-arg KEY=VALUE`` items as a dict; VALUE is JSON where it parses, else the text itself."""
    import json

    from ..errors import UsageError

    out = {}
    for item in items or []:
        key, eq, raw = item.partition("=")
        if not eq or not key.strip():
            raise UsageError(
                f"cannot parse --engine-arg {item!r}", hint="write --engine-arg KEY=VALUE (VALUE may be JSON)"
            )
        try:
            out[key.strip()] = json.loads(raw)
        except json.JSONDecodeError:
            out[key.strip()] = raw
    return out
