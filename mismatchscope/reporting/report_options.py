"""What ``report`` and ``compare-masks`` are asked, typed, and the checks of a selection that needs something else.

A command line builds these in one step from its options; the tokenizer of a page's tokens tab arrives loaded
(``view.given_tokenizer``), so a wrong folder is an error before the pass.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..errors import UsageError

DEFAULT_WORST_BY = "k3_sum"


@dataclass(frozen=True)
class ReportOptions:
    path: str
    mapping: dict[str, str] = field(default_factory=dict)
    """``--column``: the file's columns by mismatchscope's names."""
    pictures: bool = False
    """``--plots`` or ``--html``: the pass gathers what the pictures draw."""
    rules: tuple[str, ...] = ()
    """``--rule``: the rules whose thresholds the pictures draw (default: those drawn by default)."""
    sweeps: tuple[str, ...] = ()
    """``--sweep``: the reject-rate curves the pictures draw (default: a grid for each drawn rule)."""
    worst: int = 0
    worst_by: str = DEFAULT_WORST_BY
    worst_traces: bool = False
    doctor_line: bool = True
    """gather doctor's sample in the same pass, for its top finding (what the table and the page end with)."""
    page: bool = False
    """``--html``: the run's worst sequences token by token, for the page's tokens tab."""
    tokenizer: Any = None
    """the tokenizer ``--tokenizer`` named, loaded (``view.given_tokenizer``), for that tab's text."""


@dataclass(frozen=True)
class MasksOptions:
    path: str
    mapping: dict[str, str] = field(default_factory=dict)
    rules: tuple[str, ...] = ()
    """``--rule``: the rules to compare (default: every rule at its defaults)."""
    sweeps: tuple[str, ...] = ()
    examples: int = 0
    by_turn: bool = False
    write: str | None = None
    """``--write DIR``: the per-token audit is written there during the pass."""
    page: bool = False
    tokenizer: Any = None


def check_report_flags(
    rules: list[str] | None, sweeps: list[str] | None, pictures: bool, worst: int, worst_by: str, worst_traces: bool
) -> None:
    """Options that choose what something else shows, given without it."""
    if (rules or sweeps) and not pictures:
        raise UsageError(
            "--rule and --sweep on report choose what the pictures draw",
            hint="add --plots DIR or --html FILE (compare-masks prints the rules' numbers)",
        )
    if not worst and (worst_by != DEFAULT_WORST_BY or worst_traces):
        raise UsageError(
            "--worst-by and --worst-traces describe the --worst sequences", hint="add --worst N, e.g. --worst 5"
        )


def page_tokenizer(tokenizer: str | None, html: str | None) -> Any:
    """``--tokenizer`` for a page's tokens tab, loaded before any work; without ``--html`` it has nothing to do."""
    if tokenizer is not None and html is None:
        raise UsageError("--tokenizer gives the text of the HTML page's tokens tab", hint="add --html FILE")
    from ..view import given_tokenizer

    return given_tokenizer(tokenizer)


def selected_rules(rules: tuple[str, ...] | list[str], sweeps: tuple[str, ...] | list[str]):
    """``--rule`` (else every rule at its defaults) and ``--sweep`` over them, parsed: a misspelt rule is an error
    before the pass."""
    from ..rules import default_rules, parse_rule, parse_sweep

    selected = [parse_rule(r) for r in rules] if rules else default_rules()
    by_name = {r.name: r for r in selected}
    return selected, [parse_sweep(s, by_name) for s in sweeps]
