"""Options shared by several commands, defined once."""

from __future__ import annotations

from typing import List, Optional

import typer

from ._output import OutputFormat

PathArg = typer.Argument(..., help="A token-pair Parquet file, a directory of shards (or a probe run directory), or a glob.", show_default=False)

ColumnOpt = typer.Option(
    None, "--column", "-c", metavar="CANONICAL=NAME",
    help="Map a column of your file to a mismatchscope column, e.g. sampler_logprob=rollout_log_probs. Repeatable.",
)
FormatOpt = typer.Option(OutputFormat.table, "--format", "-f", help="table (rich, for people) or json (for machines; data only on stdout).")
RuleOpt = typer.Option(
    None, "--rule", "-r", metavar="NAME[:K=V,...]",
    help="A rule, with optional parameters: icepop or icepop:alpha=0.2,beta=5. Repeatable; none means every rule at its defaults.",
)


def rule_help_epilog() -> str:
    """The rule list for --help, built from the registry (cheap: numpy only)."""
    from rich.markup import escape

    from ..rules import RULES

    from ..rules.readings import help_lines

    lines = ["Rules (NAME:PARAM=DEFAULT,...):", ""]
    for name in RULES:
        lines.append(f"  {escape(RULES[name].help_line())}")
    title = ("Readings (NAME@READING[:PARAM=VALUE,...]: the rule with that framework's defaults and conventions; "
             "docs/rules.md lists each one's source file):")
    lines += ["", title, ""]
    lines += [f"  {escape(line)}" for line in help_lines()]
    return "\n\n".join(["\b\n" + "\n".join(lines)])


Columns = Optional[List[str]]
Rules = Optional[List[str]]
