"""``compare-masks --readings``: one rule under several framework readings, side by side."""

from __future__ import annotations

import typer

from ._streams import OutputFormat, emit_json, info, stdout_console, warn

ReadingsOpt = typer.Option(
    None,
    "--readings",
    metavar="RULE[@R1,R2,...]",
    help="One rule under mismatchscope's defaults and every framework reading that has it (or the readings named, "
    "the first the baseline; 'mismatchscope' is the defaults): the counts, and the tokens on which each differs "
    "from the first, by category (A = 0, p or q exactly 1, at a threshold, other). E.g. dppo-kl or "
    "dppo-kl@reference,skyrl. The readings are listed below.",
)


WriteOpt = typer.Option(
    None,
    "--write",
    metavar="DIR",
    help="Also write the per-token audit into DIR: tokens.parquet (each token rule's decision on every token, its "
    "weight, the statistic it thresholds; joinable with the run on sequence_id, position) and sequences.parquet "
    "(the sequence rules'). docs/format.md.",
)


def analyse_writing(path: str, request, mapping: dict[str, str], write: str | None, **kwargs):
    """The pass (``analysis.engine.analyse``, or ``run`` given a function of the sink), writing the audit into
    ``write`` when given; the audit is taken back if the pass fails."""
    from ..analysis.engine import analyse

    run = kwargs.pop("run", None) or (lambda sink: analyse(path, request, mapping, sink=sink))
    if write is None:
        return run(None)
    from ..audit import audit_writer

    with audit_writer(write) as sink:
        result = run(sink)
    for p in sink.written:
        info(f"wrote {p}")
    return result


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
    write: str | None = None,
    html: str | None = None,
) -> None:
    """The whole ``--readings`` path of compare-masks (the other selections do not combine with it)."""
    from ..analysis.side_by_side import side_by_side
    from ..errors import UsageError
    from ..outputs import check_all
    from ..reader import parse_column_mapping

    given = [
        flag
        for flag, v in (
            ("--rule", rules),
            ("--sweep", sweeps),
            ("--examples", examples),
            ("--plots", plots),
            ("--html", html),
        )
        if v
    ]
    if given:
        raise UsageError(
            f"--readings shows one rule's readings side by side; it does not combine with {', '.join(given)}",
            hint="run compare-masks twice, or name the readings as rules: --rule dppo-kl@skyrl --rule dppo-kl",
        )
    check_all(dirs=[(write, "--write")], inputs=[path])
    if write is not None:
        from ..audit.writer import refuse_among_shards

        refuse_among_shards(write, path)
    from ..documents import document, to_json

    mapping = parse_column_mapping(column)
    result = analyse_writing(
        path, None, mapping, write, run=lambda sink: side_by_side(path, readings, mapping, sink=sink)
    )
    for w in result.warnings:
        warn(w)
    if format is OutputFormat.json:
        emit_json(document(result))
        return
    from ..render.readings_table import readings_table

    readings_table(stdout_console(), to_json(result))
