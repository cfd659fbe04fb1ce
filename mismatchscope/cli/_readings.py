"""``compare-masks --readings``: one rule under several framework readings, side by side."""

from __future__ import annotations

import typer

from ._streams import OutputFormat, emit_json, stdout_console, warn

ReadingsOpt = typer.Option(
    None,
    "--readings",
    metavar="RULE[@R1,R2,...]",
    help="One rule under mismatchscope's defaults and every framework reading that has it (or the readings named, "
    "the first the baseline; 'mismatchscope' is the defaults): the counts, and the tokens on which each differs "
    "from the first, by category (A = 0, p or q exactly 1, at a threshold, other). E.g. dppo-kl or "
    "dppo-kl@reference,skyrl. The readings are listed below.",
)


def run_side_by_side(
    path: str,
    readings: str,
    *,
    rules: list[str] | None,
    sweeps: list[str] | None,
    examples: int,
    plots: str | None,
    column: list[str] | None,
    format: OutputFormat,
) -> None:
    """The whole ``--readings`` path of compare-masks (the other selections do not combine with it)."""
    from ..analysis.side_by_side import side_by_side
    from ..errors import UsageError
    from ..outputs import check_all
    from ..reader import parse_column_mapping

    given = [
        flag for flag, v in (("--rule", rules), ("--sweep", sweeps), ("--examples", examples), ("--plots", plots)) if v
    ]
    if given:
        raise UsageError(
            f"--readings shows one rule's readings side by side; it does not combine with {', '.join(given)}",
            hint="run compare-masks twice, or name the readings as rules: --rule dppo-kl@skyrl --rule dppo-kl",
        )
    check_all(inputs=[path])
    from ..documents import document, to_json

    result = side_by_side(path, readings, parse_column_mapping(column))
    for w in result.warnings:
        warn(w)
    if format is OutputFormat.json:
        emit_json(document(result))
        return
    from ..render.readings_table import readings_table

    readings_table(stdout_console(), to_json(result))
