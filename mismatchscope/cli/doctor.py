"""``doctor``: a thin command over ``mismatchscope.doctor.doctor``. Exit 0 numerics, 1 pipeline problem, 2 error."""

from __future__ import annotations

import typer

from ..analysis.parallel import keep_freed_memory
from ._options import DEFAULT_FORMAT, ColumnOpt, DoctorTokenizerOpt, FormatOpt, PathArg
from ._streams import info, warn


def doctor(
    path: PathArg,
    column: ColumnOpt = None,
    format: FormatOpt = DEFAULT_FORMAT,
    tokenizer: DoctorTokenizerOpt = None,
) -> None:
    """From the number to its cause, ranked by the share of the gap each explains: pipeline bugs (two sides that are not one program, re-tokenized turns, shifted logprobs, a temperature or truncation on one side, a log base, misjoined sequences, padding, the prompt boundary, rounded logprobs, a replay that did nothing or is invalid, a step that jumps, a program that differs in float32), policy lag, off-policy minibatches, a sharpening policy, or plain numerics; and how the number compares with published figures.

    PATH is anything report reads, or a diagnose output folder (its float32 configurations are read too).

    Exit code 0: numerics, expected (a cause the run declares) or inconclusive; 1: a pipeline problem is likely; 2: an error.

    Every detector's statistic, threshold and false-alarm rate, and the calibration corpus: docs/doctor.md.
    """
    keep_freed_memory()
    from dataclasses import replace

    from ..doctor import doctor as run_doctor
    from ..outputs import check_all
    from ..reader import parse_column_mapping
    from ..render import seam

    check_all(inputs=[path])
    doc = replace(run_doctor(path, parse_column_mapping(column), tokenizer=tokenizer), path=path)
    for w in doc.warnings:
        warn(w)
    for note in doc.notes:
        info(f"note: {note}")
    seam.show(doc, format)
    from ..doctor.document import VERDICT_EXIT

    if VERDICT_EXIT[doc.verdict]:  # pipeline: the one verdict that fails a CI job
        raise typer.Exit(1)
