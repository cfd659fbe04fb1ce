"""``certify``: are the run's logprob pairs byte-equal? Exit 0 certified, 1 not certified, 2 error."""

from __future__ import annotations

import time

import typer

from ._ci_reports import CiReports
from ._options import DEFAULT_FORMAT, CertifyMarkdownOpt, ColumnOpt, FormatOpt, JunitXmlOpt
from ._streams import warn


def certify(
    run: str = typer.Argument(
        ...,
        metavar="RUN",
        show_default=False,
        help="A probe run directory, an imported run, a Recorder run, or token shards.",
    ),
    pairing: list[str] | None = typer.Option(
        None,
        "--pairing",
        "-p",
        metavar="NAME",
        help="Certify only this pairing: trainer_vs_sampler_decode, trainer_vs_sampler_prefill, prefill_vs_decode, "
        "trainer_vs_training_forward, sampler_vs_training_forward (the last two need trainer_forward_logprob, the "
        "loss's own forward). Repeatable; default every pairing the run holds.",
    ),
    show: int = typer.Option(10, "--show", min=0, help="How many differing tokens (and route flips) to list."),
    column: ColumnOpt = None,
    format: FormatOpt = DEFAULT_FORMAT,
    junit_xml: JunitXmlOpt = None,
    markdown: CertifyMarkdownOpt = None,
    full_vocab: bool = typer.Option(
        False,
        "--full-vocab",
        help="Also compare every position's whole log-prob row (the digests probe --full-vocab records) and name "
        "the first position and vocabulary id where rows part.",
    ),
) -> None:
    """Certify a zero-mismatch stack: every selected-token logprob pair byte-equal in the width both sides recorded
    (float32 for the engines here), every value finite, MoE routes equal (or replayed), one policy version; or show
    where the pairs first part. No threshold: a gap of one ULP fails.

    Exit code 0: certified; 1: not certified; 2: a usage or input error.
    """
    from ..outputs import check_all
    from ..render import seam

    reports = CiReports.asked(junit_xml, markdown)
    inputs = check_all(files=reports.outputs(), inputs=[run])
    doc = _run(run, column, pairing, show, full_vocab)
    reports.write(inputs, doc)
    seam.show(doc, format)
    if not doc.certified:
        raise typer.Exit(1)


def _run(run: str, column: list[str] | None, pairing: list[str] | None, show: int, full_vocab: bool):
    """The verdict, and with ``--full-vocab`` the whole rows' too, timed together (the JUnit report's seconds)."""
    from ..certify import certify_run
    from ..certify.document import CertifyDocument
    from ..reader import parse_column_mapping

    t0 = time.perf_counter()
    verdict = certify_run(run, parse_column_mapping(column), pairing, show)
    rows = None
    if full_vocab:
        from ..certify.rows import full_vocab_check

        rows = full_vocab_check(run)
    seconds = time.perf_counter() - t0
    for w in verdict.warnings:
        warn(w)
    return CertifyDocument.of(verdict, rows, seconds)
