"""Options shared by several commands, each declared once as an ``Annotated`` alias.

A command takes a shared option by naming its alias as the parameter's type, and its default by naming the constant
it is declared with: ``def report(path: PathArg, column: ColumnOpt = None, format: FormatOpt = DEFAULT_FORMAT)``.
The flag, its metavar, its bounds and its help are then the same wherever it appears, and the default is the
library's own where the value is a domain default (the engine options' defaults are ``EngineValues``' fields).

Where a flag means a little more for one command than for the others (``--plots`` names the pictures each command
draws, ``--rule`` what the command does with the rules), it is a small family: one builder that holds the flag and
its metavar, and one alias per reading, named after the command (``ReportPlotsOpt``). ``tests/cli/test_options.py``
fails if a command declares one of these flags by hand. The engine options of probe, rescore and diagnose are
declared the same way in ``_engine_options``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Optional

import typer
from typer.models import OptionInfo

from ._help import HelpCommand

# Optional[...] below, not ``X | None``: the aliases are evaluated when this module is imported.
# ruff: noqa: UP045

Columns = Optional[list[str]]
Rules = Optional[list[str]]

DEFAULT_FORMAT = "table"
"""``--format`` when none is given: the tables, for people."""
DIAGNOSE_BOOTSTRAP = 1000
"""``diagnose --bootstrap``: resamples over sequences (gate's default lives in its config). The value is
``diagnose.effects.Bootstrap``'s, which imports numpy; a test holds the two equal."""
DIAGNOSE_CONFIDENCE = 0.95
"""``diagnose --confidence``: the two-sided confidence of its intervals, ``Bootstrap``'s too."""

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


def shared_options() -> dict[str, OptionInfo]:
    """Every option declared here and in ``_engine_options``, by alias name (what ``tests/cli/test_options.py``
    holds the commands to)."""
    from . import _engine_options

    return {
        name: meta
        for module in (globals(), vars(_engine_options))
        for name, alias in module.items()
        for meta in getattr(alias, "__metadata__", ())
        if isinstance(meta, OptionInfo)
    }
