"""Options shared by several commands, each declared once as an ``Annotated`` alias.

A command takes a shared option by naming its alias as the parameter's type, and its default by naming the constant
it is declared with: ``def report(path: PathArg, column: ColumnOpt = None, format: FormatOpt = DEFAULT_FORMAT)``.
The flag, its metavar, its bounds and its help are then the same wherever it appears, and the default is the
library's own where the value is a domain default (the engine options' defaults are ``EngineValues``' fields).

Where a flag means a little more for one command than for the others (``--plots`` names the pictures each command
draws, ``--rule`` what the command does with the rules), it is a small family: one builder that holds the flag and
its metavar, and one alias per reading, named after the command (``ReportPlotsOpt``). ``tests/cli/test_options.py``
fails if a command declares one of these flags by hand.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Optional

import typer
from typer.models import OptionInfo

from ..probe.engine_config import DEFAULT_SAMPLER_DTYPE
from ._help import HelpCommand

# Optional[...] below, not ``X | None``: the aliases are evaluated when this module is imported.
# ruff: noqa: UP045

Columns = Optional[list[str]]
Rules = Optional[list[str]]

DEFAULT_FORMAT = "table"
"""``--format`` when none is given: the tables, for people."""
DIAGNOSE_BOOTSTRAP = 1000
"""``diagnose --bootstrap``: resamples over sequences (gate's default lives in its config)."""
DIAGNOSE_CONFIDENCE = 0.95
"""``diagnose --confidence``: the two-sided confidence of its intervals (gate's default lives in its config)."""
DIAGNOSE_SAMPLER = "vllm"
"""``diagnose --sampler``: an offline vLLM engine per configuration."""

PATH_HELP = "A token-pair Parquet file, a directory of shards (or a probe run directory), or a glob."
PathArg = Annotated[str, typer.Argument(help=PATH_HELP, show_default=False)]


def _column(help: str) -> Any:
    """``--column CANONICAL=NAME``."""
    return typer.Option("--column", "-c", metavar="CANONICAL=NAME", help=help)


ColumnOpt = Annotated[
    Columns,
    _column("Map a column of your file to a mismatchscope column, e.g. sampler_logprob=rollout_log_probs. Repeatable."),
]
ImportColumnOpt = Annotated[
    Columns,
    _column(
        "Generic formats: map your list columns, e.g. sampler_logprob=rollout_log_probs, mask=response_mask. Repeatable."
    ),
]
"""``import``'s: it also maps keys that are no column of a run (``mask``)."""


def _rule(help: str) -> Any:
    """``--rule NAME[:K=V,...]``; the help says what the command does with the rule."""
    return typer.Option("--rule", "-r", metavar="NAME[:K=V,...]", help=help)


RuleOpt = Annotated[
    Rules,
    _rule(
        "A rule, with optional parameters: icepop or icepop:alpha=0.2,beta=5. Repeatable; none means every rule at "
        "its defaults."
    ),
]
REPORT_DRAWN_RULES = ("icepop", "ipo", "kpop", "tis", "token-mask")
"""The rules report draws when none is named: those the registry marks ``drawn_by_default`` (a test holds the two
equal; the registry is not read here, which would import numpy before the command line is parsed)."""
ReportRuleOpt = Annotated[
    Rules,
    _rule(
        "With --plots/--html: a rule whose thresholds the pictures draw. Repeatable; default "
        + ", ".join(REPORT_DRAWN_RULES)
        + "."
    ),
]
TimelineRuleOpt = Annotated[
    Rules,
    _rule(
        "A rule whose reject (or reweight) rate to follow per step: icepop or icepop:alpha=0.2,beta=5. "
        "Repeatable; none means icepop and ipo at their defaults (the two that need no advantage)."
    ),
]
GateRuleOpt = Annotated[Rules, _rule("Parameters of a rule the limits name, e.g. icepop:alpha=0.2,beta=5.")]
ViewRuleOpt = Annotated[
    Rules,
    _rule(
        "A rule whose decisions the page marks, with optional parameters. Repeatable; none means every rule at its "
        "defaults."
    ),
]


def _sweep(help: str) -> Any:
    """``--sweep RULE.PARAM=V1,V2,...``: reject-rate curves (compare-masks prints them, report draws them)."""
    return typer.Option("--sweep", "-s", metavar="RULE.PARAM=V1,V2,...", help=help)


MasksSweepOpt = Annotated[
    Optional[list[str]],
    _sweep("Reject rate against threshold for one parameter, e.g. icepop.beta=1.5,2,3,5,8. Repeatable."),
]
ReportSweepOpt = Annotated[
    Optional[list[str]],
    _sweep("With --plots/--html: the reject-rate curves to draw. Default: a grid for each drawn rule."),
]


def _plots(help: str) -> Any:
    """``--plots DIR``; the help names the pictures the command draws."""
    return typer.Option("--plots", metavar="DIR", help=help)


MasksPlotsOpt = Annotated[
    Optional[str],
    _plots("Write PNG pictures into DIR: which tail each rule cuts (needs the plot extra: matplotlib)."),
]
ReportPlotsOpt = Annotated[Optional[str], _plots("Write PNG pictures into DIR (needs the plot extra: matplotlib).")]
TimelinePlotsOpt = Annotated[
    Optional[str],
    _plots(
        "Also write DIR/timeline.png: one panel per metric, flagged steps marked "
        "(with two or more runs or --x: DIR/timeline_compare.png)."
    ),
]
GatePlotsOpt = Annotated[
    Optional[str],
    _plots("Write PNGs: the checks with their intervals, baseline and candidate overlaid (needs the plot extra)."),
]
DiagnosePlotsOpt = Annotated[Optional[Path], _plots("Write the mismatch-vs-throughput picture (PNG) here.")]


def _html(help: str) -> Any:
    """``--html FILE``: one self-contained page; the help names what the command's page holds."""
    return typer.Option("--html", metavar="FILE", help=help)


MasksHtmlOpt = Annotated[
    Optional[str],
    _html(
        "Write one self-contained HTML page: the rules' table and agreement (with --plots, the pictures), and the "
        "run's worst sequences token by token in a tokens tab."
    ),
]
ReportHtmlOpt = Annotated[
    Optional[str], _html("Write one self-contained HTML page: pictures inline, tables, run metadata.")
]
GateHtmlOpt = Annotated[
    Optional[str],
    _html(
        "Write one self-contained HTML page: checks, pictures, run metadata, and the candidate's worst sequences "
        "token by token in a tokens tab."
    ),
]
DiagnoseHtmlOpt = Annotated[Optional[Path], _html("Write a self-contained HTML summary here.")]
ViewHtmlOpt = Annotated[Optional[str], _html("The page to write: one self-contained HTML file that opens offline.")]


def _out(help: str) -> Any:
    """``--out``/``-o``: the run or output directory a command writes."""
    return typer.Option("--out", "-o", metavar="<path>", help=help)


ProbeOutOpt = Annotated[Optional[str], _out("Run directory. Default: runs/probe-<time>.")]
RescoreOutOpt = Annotated[str, _out("New run directory for the rescored pairs.")]
ImportOutOpt = Annotated[str, _out("Output directory (token shards under OUT/tokens, OUT/manifest.json).")]
DiagnoseOutOpt = Annotated[Optional[Path], _out("Output directory. Default: runs/diagnose-<time>.")]


def _tokenizer(help: str) -> Any:
    """``--tokenizer CHECKPOINT``."""
    return typer.Option("--tokenizer", metavar="CHECKPOINT", help=help)


TokenizerOpt = Annotated[
    Optional[str],
    _tokenizer(
        "The checkpoint whose tokenizer turns the token view's ids into text (a probe run's own checkpoint is "
        "found without it)."
    ),
]
"""The text of the token view (``view``, and the tokens tab of the HTML pages)."""
DoctorTokenizerOpt = Annotated[
    Optional[str],
    _tokenizer(
        "A multi-turn run: re-encode each turn's sampled ids with this checkpoint's tokenizer and chat template, to "
        "see re-tokenization (default: a probe run's own checkpoint, where it is still there)."
    ),
]

JunitXmlOpt = Annotated[
    Optional[str], typer.Option("--junit-xml", metavar="FILE", help="Write one JUnit test case per check.")
]


def _markdown(help: str) -> Any:
    """``--markdown FILE``."""
    return typer.Option("--markdown", metavar="FILE", help=help)


_STEP_SUMMARY = "(also appended to $GITHUB_STEP_SUMMARY when set)."
GateMarkdownOpt = Annotated[Optional[str], _markdown(f"Write the verdict as a Markdown table {_STEP_SUMMARY}")]
CertifyMarkdownOpt = Annotated[Optional[str], _markdown(f"Write the verdict as Markdown {_STEP_SUMMARY}")]
ProvenanceMarkdownOpt = Annotated[
    Optional[str], _markdown("Also write the comparison as Markdown (a pull-request comment).")
]

GateBootstrapOpt = Annotated[
    Optional[int],
    typer.Option(
        "--bootstrap", min=0, help="Bootstrap resamples (default 1000, at most 100,000; 0: point estimates only)."
    ),
]
"""gate's default is its config's (a gate.toml may set it), so the flag's is None."""
DiagnoseBootstrapOpt = Annotated[int, typer.Option("--bootstrap", min=0, help="Bootstrap resamples over sequences.")]
GateConfidenceOpt = Annotated[
    Optional[float], typer.Option("--confidence", help="Two-sided confidence of the intervals (default 0.95).")
]
"""gate checks the bounds in its config."""
DiagnoseConfidenceOpt = Annotated[float, typer.Option("--confidence", min=0.5, max=0.9999)]
GateSeedOpt = Annotated[
    Optional[int], typer.Option("--seed", min=0, help="Bootstrap seed (default 0): same files, same verdict.")
]


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


FormatOpt = Annotated[
    str,
    typer.Option(
        "--format",
        "-f",
        click_type=_Formats(),
        help="table (rich, for people) or json (for machines; data only on stdout).",
    ),
]


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


# ------------------------------------------------------------ sampler, trainer and sampling options
# Declared once for probe, rescore and diagnose; their values are checked once, by probe.options. Their defaults
# are ``EngineValues``' fields, which take them from the config classes.

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


def shared_options() -> dict[str, OptionInfo]:
    """Every option declared here, by alias name (what ``tests/cli/test_options.py`` holds the commands to)."""
    return {
        name: meta
        for name, alias in globals().items()
        for meta in getattr(alias, "__metadata__", ())
        if isinstance(meta, OptionInfo)
    }


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
