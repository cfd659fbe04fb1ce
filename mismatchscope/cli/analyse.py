"""``compare-masks`` and ``report``: thin commands over ``analysis.analyse``."""

from __future__ import annotations

import enum

import typer

from ..analysis.parallel import keep_freed_memory
from ..errors import UsageError
from ..metrics import ABS_LOGPROB_DIFF_MEAN, K3_MEAN
from ._options import (
    DEFAULT_FORMAT,
    ColumnOpt,
    FormatOpt,
    MasksHtmlOpt,
    MasksPlotsOpt,
    MasksSweepOpt,
    PathArg,
    ReportHtmlOpt,
    ReportPlotsOpt,
    ReportRuleOpt,
    ReportSweepOpt,
    RuleOpt,
    TokenizerOpt,
)
from ._output import save, save_pictures
from ._streams import info, warn

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


def compare_masks(
    path: PathArg,
    rule: RuleOpt = None,
    sweep: MasksSweepOpt = None,
    examples: int = typer.Option(
        0,
        "--examples",
        "-e",
        min=0,
        help="Print the N tokens the rules disagree on most (sequence, position, token, p, q).",
    ),
    column: ColumnOpt = None,
    format: FormatOpt = DEFAULT_FORMAT,
    plots: MasksPlotsOpt = None,
    readings: str | None = ReadingsOpt,
    write: str | None = WriteOpt,
    html: MasksHtmlOpt = None,
    tokenizer: TokenizerOpt = None,
    by: MasksBy | None = typer.Option(
        None,
        "--by",
        help="turn: each rule's rejected and reweighted tokens in each turn of a multi-turn run "
        "(they sum to the whole run's counts).",
    ),
) -> None:
    """How many tokens and sequences each masking rule would reject or reweight, side by side, how much they overlap, and which tail (sampler probability, sign of p - q) each one cuts."""
    keep_freed_memory()
    from ..reader import parse_column_mapping
    from ..render import seam
    from ..reporting import MasksOptions, masks_document, readings_document
    from ..reporting.report_options import page_tokenizer

    if readings is not None:
        if by is not None:
            raise UsageError("--by turn and --readings are two views; ask for one at a time")
        _refuse_with_readings(rule=rule, sweep=sweep, examples=examples, plots=plots, html=html)
    inputs = _check_outputs(path, plots, write, html)
    if readings is not None:
        doc = readings_document(path, readings, parse_column_mapping(column), write)
        _said(doc.written, doc.warnings)
        seam.show(doc, format)
        return
    opts = MasksOptions(
        path,
        parse_column_mapping(column),
        rules=tuple(rule or ()),
        sweeps=tuple(sweep or ()),
        examples=examples,
        by_turn=by is MasksBy.turn,
        write=write,
        page=html is not None,
        tokenizer=page_tokenizer(tokenizer, html),
    )
    doc = masks_document(opts, pictures=plots is not None)
    _said(doc.written, doc.analysis.warnings)
    if plots is not None:
        from ..render.masks_pictures import pictures

        save_pictures(pictures(doc), plots, inputs)
    if html is not None:
        save(doc, "html", html, "--html", inputs)
    seam.show(doc, format)


def _refuse_with_readings(**given_options) -> None:
    """``--readings`` shows one rule's readings side by side; the other selections do not combine with it."""
    given = [f"--{name}" for name, v in given_options.items() if v]
    if given:
        raise UsageError(
            f"--readings shows one rule's readings side by side; it does not combine with {', '.join(given)}",
            hint="run compare-masks twice, or name the readings as rules: --rule dppo-kl@skyrl --rule dppo-kl",
        )


def _said(written: list[str], warnings: list[str]) -> None:
    """The audit's files (``--write``), then what the pass warns of."""
    for p in written:
        info(f"wrote {p}")
    for w in warnings:
        warn(w)


def _check_outputs(path: str, plots: str | None, write: str | None = None, html: str | None = None):
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


def report(
    path: PathArg,
    column: ColumnOpt = None,
    format: FormatOpt = DEFAULT_FORMAT,
    plots: ReportPlotsOpt = None,
    html: ReportHtmlOpt = None,
    rule: ReportRuleOpt = None,
    sweep: ReportSweepOpt = None,
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
    tokenizer: TokenizerOpt = None,
) -> None:
    """TV distance, KL estimators, ratio tails, and where the mismatch sits (by probability, position, entropy)."""
    keep_freed_memory()
    from ..outputs import check_all
    from ..reader import parse_column_mapping
    from ..render import seam
    from ..reporting import ReportDocument, ReportOptions, report_document
    from ..reporting.report_options import check_report_flags, page_tokenizer

    inputs = check_all(files=[(html, "--html")], dirs=[(plots, "--plots")], inputs=[path])
    pictures = plots is not None or html is not None
    check_report_flags(rule, sweep, pictures, worst, worst_by.value, worst_traces)
    opts = ReportOptions(
        path,
        parse_column_mapping(column),
        pictures=pictures,
        rules=tuple(rule or ()),
        sweeps=tuple(sweep or ()),
        worst=worst,
        worst_by=worst_by.value,
        worst_traces=worst_traces,
        doctor_line=html is not None or seam.renders_extras(ReportDocument, format),
        page=html is not None,
        tokenizer=page_tokenizer(tokenizer, html),
    )
    doc = report_document(opts)
    for w in doc.analysis.warnings:
        warn(w)
    for note in doc.analysis.notes:  # said on the terminal only: a run read more slowly than it could be
        info(f"note: {note}")
    if plots is not None:
        from ..render.report_pictures import pictures as drawn

        save_pictures(drawn(doc), plots, inputs)
    if html is not None:
        save(doc, "html", html, "--html", inputs)
    seam.show(doc, format)
