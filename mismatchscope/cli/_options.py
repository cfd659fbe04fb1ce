"""Options shared by several commands, defined once."""

from __future__ import annotations

from typing import Any, Optional

import typer

from ..probe.engine_config import DEFAULT_SAMPLER_DTYPE
from ._help import HelpCommand

PathArg = typer.Argument(
    ...,
    help="A token-pair Parquet file, a directory of shards (or a probe run directory), or a glob.",
    show_default=False,
)

COLUMN_HELP = "Map a column of your file to a mismatchscope column, e.g. sampler_logprob=rollout_log_probs. Repeatable."
RULE_HELP = (
    "A rule, with optional parameters: icepop or icepop:alpha=0.2,beta=5. Repeatable; none means every rule at its "
    "defaults."
)


def column_option(help: str = COLUMN_HELP) -> Any:
    """``--column CANONICAL=NAME``; ``import`` names its own keys in ``help``."""
    return typer.Option(None, "--column", "-c", metavar="CANONICAL=NAME", help=help)


def rule_option(help: str = RULE_HELP) -> Any:
    """``--rule NAME[:K=V,...]``; ``help`` says what the command does with the rule."""
    return typer.Option(None, "--rule", "-r", metavar="NAME[:K=V,...]", help=help)


def sweep_option(help: str) -> Any:
    """``--sweep RULE.PARAM=V1,V2,...``: reject-rate curves (compare-masks prints them, report draws them)."""
    return typer.Option(None, "--sweep", "-s", metavar="RULE.PARAM=V1,V2,...", help=help)


def plots_option(help: str) -> Any:
    """``--plots DIR``; ``help`` names the pictures the command draws."""
    return typer.Option(None, "--plots", metavar="DIR", help=help)


def html_option(help: str) -> Any:
    """``--html FILE``: one self-contained page; ``help`` names what the command's page holds."""
    return typer.Option(None, "--html", metavar="FILE", help=help)


def out_option(help: str, *, required: bool = False) -> Any:
    """``--out``/``-o``: the run or output directory a command writes (``required`` where it has no default)."""
    return typer.Option(... if required else None, "--out", "-o", metavar="<path>", help=help)


def bootstrap_option(default: int | None, help: str) -> Any:
    """``--bootstrap N``: resamples over sequences (gate's default lives in its config, diagnose's here)."""
    return typer.Option(default, "--bootstrap", min=0, help=help)


def confidence_option(
    default: float | None, help: str | None = None, *, min: float | None = None, max: float | None = None
) -> Any:
    """``--confidence``: the two-sided confidence of the bootstrap intervals (gate checks its bounds in its config)."""
    return typer.Option(default, "--confidence", help=help, min=min, max=max)


def tokenizer_option(
    help: str = "The checkpoint whose tokenizer turns the token view's ids into text (a probe run's own checkpoint is found without it).",
) -> Any:
    """``--tokenizer CHECKPOINT``: the text of the token view (``view``, and the tokens tab of the HTML pages)."""
    return typer.Option(None, "--tokenizer", metavar="CHECKPOINT", help=help)


JunitXmlOpt = typer.Option(None, "--junit-xml", metavar="FILE", help="Write one JUnit test case per check.")


def markdown_option(what: str) -> Any:
    """``--markdown FILE``: the verdict as Markdown ``what``, also appended to the GitHub step summary."""
    return typer.Option(
        None,
        "--markdown",
        metavar="FILE",
        help=f"Write the verdict as {what} (also appended to $GITHUB_STEP_SUMMARY when set).",
    )


ColumnOpt = column_option()


def _choice_type():
    """The choice type typer gives an enum (its own where it vendors click, so errors stay click's usage
    errors and the metavar reads ``<table|json>``), else click's."""
    try:
        from typer._types import TyperChoice
    except ImportError:  # typer before it vendored click
        from click import Choice as TyperChoice
    return TyperChoice


_Choice: Any = _choice_type()


class _Formats(_Choice):
    """``--format``'s values: the stream formats the output seam holds when the line is parsed (a format
    registered after this module was imported is taken too), the default first."""

    def __init__(self) -> None:
        super().__init__([])

    @property
    def choices(self):  # type: ignore[override]
        from ..render.seam import stream_formats

        return tuple(stream_formats())

    @choices.setter
    def choices(self, value) -> None:  # click's own constructor sets them: the seam holds them instead
        pass


FormatOpt = typer.Option(
    "table",
    "--format",
    "-f",
    click_type=_Formats(),
    help="table (rich, for people) or json (for machines; data only on stdout).",
)
RuleOpt = rule_option()


def rule_help_epilog() -> str:
    """The rule list for --help, built from the registry (cheap: numpy only)."""
    from rich.markup import escape

    from ..rules import RULES
    from ..rules.readings import help_lines

    lines = ["Rules (NAME:PARAM=DEFAULT,...):", ""]
    for name in RULES:
        lines.append(f"  {escape(RULES[name].help_line())}")
    title = (
        "Readings (NAME@READING[:PARAM=VALUE,...]: the rule with that framework's defaults and conventions; "
        "docs/rules.md lists each one's source file):"
    )
    lines += ["", title, ""]
    lines += [f"  {escape(line)}" for line in help_lines()]
    return "\n\n".join(["\b\n" + "\n".join(lines)])


class RulesInHelp(HelpCommand):
    """A command whose ``--help`` ends with the list of rules (``rule_help_epilog``).

    The list is added when the help is shown, not when the command is built: it needs the rule
    registry and rich's markup escaping, which a run with ``--format json`` never uses otherwise.
    """

    def format_help(self, ctx, formatter) -> None:
        if not getattr(self, "_rules_listed", False):
            self.help = f"{self.help or ''}\n\n{rule_help_epilog()}"
            self._rules_listed = True
        super().format_help(ctx, formatter)


Columns = Optional[list[str]]  # noqa: UP045 - an alias typer reads as an option type
Rules = Optional[list[str]]  # noqa: UP045


# ------------------------------------------------------------ sampler, trainer and sampling options
# Declared once for probe, rescore and diagnose; their values are checked once, by probe.options.

PromptsOpt = typer.Option(
    None,
    "--prompts",
    "-p",
    help='JSONL, one {"prompt": ..., "answer": ...} per line. Default: the bundled sample prompts.',
)
SamplerDtypeOpt = typer.Option(
    DEFAULT_SAMPLER_DTYPE,
    "--sampler-dtype",
    help="Sampler dtype. The default float16 vs a float32 trainer is a CPU demo pairing that shows real "
    "mismatch; pass your serving dtype.",
)
TrainerDtypeOpt = typer.Option("float32", "--trainer-dtype", help="Trainer forward-pass dtype.")
TemperatureOpt = typer.Option(1.0, "--temperature", "-T", min=0.0)
TopPOpt = typer.Option(1.0, "--top-p", min=0.0, max=1.0)
TopKOpt = typer.Option(-1, "--top-k", help="-1: no top-k truncation.")
SamplesOpt = typer.Option(4, "-n", min=1, help="Samples per prompt (a GRPO group).")
MaxTokensOpt = typer.Option(
    0, "--max-tokens", min=0, help="Tokens per completion. 0: up to 256, within the context length."
)
TopKLogprobsOpt = typer.Option(5, "--top-k-logprobs", min=0, help="The sampler's top-k logprobs recorded per position.")
LogprobsModeOpt = typer.Option(
    "processed_logprobs",
    "--logprobs-mode",
    help="processed_logprobs (after T/top-p/top-k; trainer divides by T) or raw_logprobs (compared at T = 1).",
)
TensorParallelOpt = typer.Option(1, "--tensor-parallel-size", "--tp", min=1, help="Passed to vLLM unchanged.")
MaxNumSeqsOpt = typer.Option(None, "--max-num-seqs")
EnforceEagerOpt = typer.Option(
    True, "--enforce-eager/--no-enforce-eager", help="vLLM eager mode (no CUDA graphs / compile)."
)
GpuMemoryOpt = typer.Option(None, "--gpu-memory-utilization")
MaxModelLenOpt = typer.Option(None, "--max-model-len")
SamplerFp32HeadOpt = typer.Option(False, "--sampler-fp32-lm-head", help="vLLM hf_overrides head_dtype=float32.")
TrainerFp32HeadOpt = typer.Option(False, "--trainer-fp32-lm-head")
EngineArgOpt = typer.Option(
    None,
    "--engine-arg",
    metavar="KEY=VALUE",
    help="Any other vllm.LLM argument, passed unchanged (VALUE may be JSON). Repeatable. With --sampler vllm-"
    "server: added to every request body, except timeout=SECONDS (per HTTP request, default 600) and "
    "model=NAME (the served model). With --sampler hf: attn_implementation, batch_size, "
    "trust_remote_code.",
)
AttnImplementationOpt = typer.Option(
    None, "--attn-implementation", help="Trainer attention: eager, sdpa, flash_attention_2, ..."
)
TrainerBatchTokensOpt = typer.Option(8192, "--trainer-batch-tokens", min=1, help="Token budget of one scoring batch.")
TrustRemoteCodeOpt = typer.Option(
    False, "--trust-remote-code", help="Run the checkpoint's own Python code (off unless asked)."
)
AllowPickleOpt = typer.Option(False, "--allow-pickle", help="Load .bin/.pt (pickle) weights; refused by default.")
LocateOpt = typer.Option(
    False,
    "--locate",
    help="Where in the forward pass the sampler and the trainer part: per layer and op, each side against the "
    "float64 reference, on the run's worst sequences (docs/diagnose.md).",
)
LocateSequencesOpt = typer.Option(
    None,
    "--locate-sequences",
    min=1,
    help="--locate: the worst N sequences by the report's ranking (k3_sum). Default: 4.",
    show_default=False,
)


def engine_args(items: list[str] | None) -> dict:
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


# ------------------------------------------------------------ engine options of probe, rescore and diagnose
# The flags these commands share, declared once. Where one flag's help differs between the commands (it means
# a little more for one of them), the declaration takes that help as its argument.

TrainerDeviceOpt = typer.Option(None, "--trainer-device")
Fp32HeadOpt = typer.Option(
    False, "--fp32-lm-head", help="fp32 lm_head on BOTH sides (one side only makes mismatch worse)."
)
TrainerFp32HeadAliasOpt = typer.Option(False, "--trainer-fp32-lm-head", "--fp32-lm-head")
"""rescore's: it has only a trainer, so both spellings set the trainer's head."""
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
FullVocabOpt = typer.Option(
    False,
    "--full-vocab",
    help="Also record, per position, a digest of each side's whole log-prob row (float32 bytes) and the largest "
    "difference and its id (--sampler hf): certify --full-vocab compares whole distributions.",
)
ImportedTemperatureOpt = typer.Option(
    None,
    "--temperature",
    help="An imported run: the temperature its sampler ran at (required: no stack's dump records it; the "
    "trainer divides its logits by it). A probe run keeps its own.",
    show_default=False,
)
"""rescore's --temperature: only an imported run takes one (probe and diagnose: TemperatureOpt)."""


def sampler_option(default: str | None, help: str, *, show_default: bool = True) -> Any:
    """``--sampler``: the engines a command can start (probe reaches servers too; diagnose starts its own)."""
    return typer.Option(default, "--sampler", help=help, show_default=show_default)


def seed_option(help: str | None = None) -> Any:
    """``--seed`` of the sampling (diagnose: and of its bootstrap)."""
    return typer.Option(0, "--seed", help=help)


def device_map_option(help: str | None = None) -> Any:
    """``--device-map``: the trainer's accelerate device map."""
    return typer.Option(None, "--device-map", help=help)


def resume_option(help: str | None = None) -> Any:
    """``--resume``: continue a run directory that was interrupted."""
    return typer.Option(False, "--resume", help=help)


def trainer_checkpoint_option(help: str) -> Any:
    """``--trainer-checkpoint``: other weights of the same model for the trainer (policy lag)."""
    return typer.Option(None, "--trainer-checkpoint", metavar="PATH", help=help)
