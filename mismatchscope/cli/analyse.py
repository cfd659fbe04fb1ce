"""``compare-masks`` and ``report``: thin commands over ``analysis.analyse``."""

from __future__ import annotations

import enum
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from ..analysis.parallel import keep_freed_memory
from ..errors import UsageError
from ..metrics import ABS_LOGPROB_DIFF_MEAN, K3_MEAN
from ._options import (
    ColumnOpt,
    FormatOpt,
    PathArg,
    RuleOpt,
    html_option,
    plots_option,
    rule_option,
    sweep_option,
    tokenizer_option,
)
from ._readings import ReadingsOpt, WriteOpt, analyse_writing, run_side_by_side
from ._streams import OutputFormat, emit_json, info, stdout_console, warn

if TYPE_CHECKING:
    from ..analysis.results import WorstSequence


def _drawn_by_default() -> list[str]:
    from ..rules import RULES

    return [n for n, s in RULES.items() if s.drawn_by_default]


def _request_rules(rules: list[str] | None, sweeps: list[str] | None):
    from ..rules import default_rules, parse_rule, parse_sweep

    selected = [parse_rule(r) for r in rules] if rules else default_rules()
    by_name = {r.name: r for r in selected}
    return selected, [parse_sweep(s, by_name) for s in sweeps or []]


def masks_payload(result) -> dict:
    from ..documents import document

    return document(result.masks)


class MasksBy(str, enum.Enum):
    """``compare-masks --by``: what each rule's counts are split by."""

    turn = "turn"


class WorstBy(str, enum.Enum):
    """``--worst-by``: the names of ``analysis.worst.RANKINGS`` (kept here so ``--help`` imports no numpy)."""

    k3_sum = "k3_sum"
    k3_mean = K3_MEAN.name
    abs_logprob_diff_sum = "abs_logprob_diff_sum"
    abs_logprob_diff_mean = ABS_LOGPROB_DIFF_MEAN.name
    tv_max = "tv_max"
    log_ratio_sum = "log_ratio_sum"


def report_payload(result, worst: list[WorstSequence] | None = None) -> dict:
    from dataclasses import replace

    from ..documents import document

    return document(replace(result.report, worst=worst))


def compare_masks(
    path: str = PathArg,
    rule: list[str] | None = RuleOpt,
    sweep: list[str] | None = sweep_option(
        "Reject rate against threshold for one parameter, e.g. icepop.beta=1.5,2,3,5,8. Repeatable."
    ),
    examples: int = typer.Option(
        0,
        "--examples",
        "-e",
        min=0,
        help="Print the N tokens the rules disagree on most (sequence, position, token, p, q).",
    ),
    column: list[str] | None = ColumnOpt,
    format: OutputFormat = FormatOpt,
    plots: str | None = plots_option(
        "Write PNG pictures into DIR: which tail each rule cuts (needs the plot extra: matplotlib)."
    ),
    readings: str | None = ReadingsOpt,
    write: str | None = WriteOpt,
    html: str | None = html_option(
        "Write one self-contained HTML page: the rules' table and agreement (with --plots, the pictures), and the "
        "run's worst sequences token by token in a tokens tab."
    ),
    tokenizer: str | None = tokenizer_option(),
    by: MasksBy | None = typer.Option(
        None,
        "--by",
        help="turn: each rule's rejected and reweighted tokens in each turn of a multi-turn run "
        "(they sum to the whole run's counts).",
    ),
) -> None:
    """How many tokens and sequences each masking rule would reject or reweight, side by side, how much they overlap, and which tail (sampler probability, sign of p - q) each one cuts."""
    keep_freed_memory()
    if readings is not None:
        if by is not None:
            raise UsageError("--by turn and --readings are two views; ask for one at a time")
        return run_side_by_side(
            path,
            readings,
            rules=rule,
            sweeps=sweep,
            examples=examples,
            plots=plots,
            column=column,
            format=format,
            write=write,
            html=html,
        )
    from ..analysis.engine import AnalysisRequest
    from ..reader import parse_column_mapping

    inputs = _check_plots(path, plots, write, html)
    given = _token_view_tokenizer(tokenizer, html)
    rules, sweeps = _request_rules(rule, sweep)
    request = AnalysisRequest(
        report=False, masks=True, rules=rules, sweeps=sweeps, examples=examples, by_turn=by is MasksBy.turn
    )
    result = analyse_writing(path, request, parse_column_mapping(column), write)
    for w in result.warnings:
        warn(w)
    figures = None
    if plots is not None:
        from ..render.plots import masks_figures

        figures = masks_figures(result)
        _write_pngs(figures, plots, inputs)
    if html is not None:
        from ..render.masks_page import masks_page

        _write_page(html, masks_page(result, figures, _token_view(path, result, rules, given)), inputs)
    if format is OutputFormat.json:
        emit_json(masks_payload(result))
        return
    from ..render.masks import masks_tables
    from ..render.tables import header

    console = stdout_console()
    header(console, result)
    masks_tables(console, result, examples)


def _check_plots(path: str, plots: str | None, write: str | None = None, html: str | None = None):
    """``--plots``, ``--write`` and ``--html`` (not an input, not a file), then matplotlib when pictures are asked:
    before any work."""
    from ..outputs import check_all

    inputs = check_all(files=[(html, "--html")], dirs=[(plots, "--plots"), (write, "--write")], inputs=[path])
    if write is not None:
        from ..audit.writer import refuse_among_shards

        refuse_among_shards(write, path)
    if plots is not None:
        from ..outputs import require_matplotlib

        require_matplotlib()
    return inputs


def _token_view_tokenizer(tokenizer: str | None, html: str | None):
    """``--tokenizer`` for the page's tokens tab, loaded before any work; without ``--html`` it has nothing to do."""
    if tokenizer is not None and html is None:
        raise UsageError("--tokenizer gives the text of the HTML page's tokens tab", hint="add --html FILE")
    from ..view import given_tokenizer

    return given_tokenizer(tokenizer)


def _token_view(path: str, result, rules, given):
    """The run's worst sequences token by token, for a page's tokens tab (the view's defaults)."""
    from ..view import ViewOptions, token_view

    return token_view(path, result, rules, ViewOptions(), given)


def _write_page(html: str, page: str, inputs) -> None:
    from ..outputs import write_text

    write_text(html, page, "--html", inputs=inputs)
    info(f"wrote {html}")


def _write_pngs(figures, plots: str, inputs) -> None:
    from ..render.plots import write_pngs

    for p in write_pngs(figures, Path(plots), inputs):
        info(f"wrote {p}")


def report(
    path: str = PathArg,
    column: list[str] | None = ColumnOpt,
    format: OutputFormat = FormatOpt,
    plots: str | None = plots_option("Write PNG pictures into DIR (needs the plot extra: matplotlib)."),
    html: str | None = html_option("Write one self-contained HTML page: pictures inline, tables, run metadata."),
    rule: list[str] | None = rule_option(
        "With --plots/--html: a rule whose thresholds the pictures draw. Repeatable; default "
        + ", ".join(_drawn_by_default())
        + "."
    ),
    sweep: list[str] | None = sweep_option(
        "With --plots/--html: the reject-rate curves to draw. Default: a grid for each drawn rule."
    ),
    worst: int = typer.Option(
        0,
        "--worst",
        "-w",
        min=0,
        metavar="N",
        help="List the N sequences with the largest mismatch; with --plots/--html, draw each one's trace.",
    ),
    worst_by: WorstBy = typer.Option(
        WorstBy.k3_sum, "--worst-by", help="What --worst ranks by (log_ratio_sum ranks by |S|)."
    ),
    worst_traces: bool = typer.Option(
        False, "--worst-traces", help="With --worst and --format json: add each sequence's full trace."
    ),
    tokenizer: str | None = tokenizer_option(),
) -> None:
    """TV distance, KL estimators, ratio tails, and where the mismatch sits (by probability, position, entropy)."""
    keep_freed_memory()
    from ..analysis.engine import run_plan
    from ..outputs import check_all
    from ..reader import parse_column_mapping

    inputs = check_all(files=[(html, "--html")], dirs=[(plots, "--plots")], inputs=[path])
    pictures = plots is not None or html is not None
    _check_report_flags(rule, sweep, pictures, worst, worst_by, worst_traces)
    given = _token_view_tokenizer(tokenizer, html)
    request, hist, rules = _report_request(rule, sweep, pictures)
    mapping = parse_column_mapping(column)
    # doctor's top finding: the table's last line, and the page's header (report's JSON stays as it was)
    plan, collector = _plan(path, mapping, request, format is not OutputFormat.json or html is not None)
    result = run_plan(plan, on_terms=_each(hist.add if hist else None, collector))
    doctor = _doctor_text(result, collector, path) if collector is not None else None
    for w in result.warnings:
        warn(w)
    _notes(result)
    worst_rows, traces = None, {}
    if worst:
        from ..analysis.worst import worst_report

        worst_rows, traces = worst_report(result, worst, worst_by.value, with_traces=worst_traces)
    if pictures:
        tokens = _token_view(path, result, rules, given) if html else None
        _write_pictures(result, hist, rules, plots, html, inputs, worst_rows, traces, (path, doctor), tokens)
    if format is OutputFormat.json:
        emit_json(report_payload(result, worst_rows))
    else:
        _print_report(result, worst_rows, doctor, path)


def _check_report_flags(rule, sweep, pictures: bool, worst: int, worst_by: WorstBy, worst_traces: bool) -> None:
    """Options that choose what something else shows, given without it."""
    if (rule or sweep) and not pictures:
        raise UsageError(
            "--rule and --sweep on report choose what the pictures draw",
            hint="add --plots DIR or --html FILE (compare-masks prints the rules' numbers)",
        )
    if not worst and (worst_by is not WorstBy.k3_sum or worst_traces):
        raise UsageError(
            "--worst-by and --worst-traces describe the --worst sequences", hint="add --worst N, e.g. --worst 5"
        )


def _report_request(rule: list[str] | None, sweep: list[str] | None, pictures: bool):
    """The analysis report asks for; with pictures, the drawn rules, their sweeps and the histograms too."""
    from ..analysis.engine import AnalysisRequest

    if not pictures:
        return AnalysisRequest(report=True, masks=False), None, []
    from ..analysis.histograms import PlotAccumulator
    from ..outputs import require_matplotlib
    from ..rules.drawn import default_sweeps, plot_rules

    require_matplotlib()
    rules = plot_rules(_request_rules(rule, None)[0] if rule else None)
    sweeps = _request_rules([r.label for r in rules], sweep)[1] if sweep else default_sweeps(rules)
    return AnalysisRequest(report=True, masks=True, rules=rules, sweeps=sweeps), PlotAccumulator(), rules


def _print_report(result, worst_rows, doctor: str | None, path: str) -> None:
    from rich.markup import escape

    from ..render.report import report_tables, worst_table
    from ..render.tables import header

    console = stdout_console()
    header(console, result)
    report_tables(console, result)
    if worst_rows is not None:
        worst_table(console, worst_rows)
    if doctor is not None:
        console.print(escape(f"{doctor} (evidence: mismatchscope doctor {path})"), highlight=False, overflow="fold")


def _plan(path: str, mapping: dict[str, str], request, doctor_line: bool):
    """report's pass, and with doctor's line its sample, gathered in the same pass (a small one: the line costs
    a fraction of a second)."""
    if not doctor_line:
        from ..analysis.engine import make_plan

        return make_plan(path, request, mapping), None
    from ..doctor.run import sampled_pass
    from ..doctor.sample import REPORT_SAMPLE_ROWS

    return sampled_pass(path, request, mapping, REPORT_SAMPLE_ROWS)


def _notes(result) -> None:
    """What the pass says on the terminal only (a run read more slowly than it could be)."""
    for note in result.notes:
        info(f"note: {note}")


def _each(hist_add, collector):
    """One ``on_terms`` for the pictures' histograms and doctor's sample, either or both."""
    if collector is None:
        return hist_add
    if hist_add is None:
        return collector.add

    def both(terms, batch) -> None:
        hist_add(terms, batch)
        collector.add(terms, batch)

    return both


def _doctor_text(result, collector, path: str) -> str:
    """The top finding of ``doctor`` in one line (the run's provenance read as doctor reads it)."""
    from ..doctor.run import examine_result, run_provenance
    from ..render.doctor import top_line

    return top_line(examine_result(result, collector.finish(), provenance=run_provenance(path)))


def _write_pictures(
    result,
    hist,
    rules,
    plots: str | None,
    html: str | None,
    inputs,
    worst_rows: list[WorstSequence] | None = None,
    traces: dict | None = None,
    page: tuple[str, str | None] = ("", None),
    tokens=None,
) -> None:
    """``--plots`` and ``--html``; ``page``: the run as given and doctor's top finding, for the page's header;
    ``tokens``: the run's token view, the page's tokens tab."""
    from ..render.plots import report_figures, worst_figures

    figures = report_figures(result, hist, rules) + (
        worst_figures(worst_rows, traces if traces is not None else {}) if worst_rows else []
    )
    if plots:
        _write_pngs(figures, plots, inputs)
    if html:
        from ..render.report_page import report_page

        _write_page(html, report_page(result, figures, worst_rows, *page, tokens=tokens), inputs)
