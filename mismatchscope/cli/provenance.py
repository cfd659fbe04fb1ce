"""``provenance``: what each side of a run ran, or what changed between two runs. Exit 0, or 2 on an error."""

from __future__ import annotations

import typer

from ._options import DEFAULT_FORMAT, FormatOpt, ProvenanceMarkdownOpt


def provenance(
    run: str = typer.Argument(
        ...,
        metavar="RUN",
        show_default=False,
        help="A run directory (probe, rescore, diagnose's, an import or a Recorder run), its tokens/ or a shard.",
    ),
    run_b: str | None = typer.Argument(
        None,
        metavar="[RUN_B]",
        show_default=False,
        help="A second run: RUN is then the baseline, RUN_B the candidate, each side against its own.",
    ),
    format: FormatOpt = DEFAULT_FORMAT,
    markdown: ProvenanceMarkdownOpt = None,
) -> None:
    """What ran on each side of a run: the identities (weights, tokenizer, chat template, generation config, sampling
    parameters), the software, the numerics asked for and used, the environment, the engine's fallbacks and the
    deployment. One run: its sampler against its trainer; two runs: baseline against candidate. Changed fields first;
    a field a run did not record reads "not recorded".

    What is recorded, and from where: docs/provenance.md.
    """
    from ..execution.document import provenance_document
    from ..outputs import check_all
    from ..render import seam
    from ._output import save

    inputs = check_all(files=[(markdown, "--markdown")], inputs=[p for p in (run, run_b) if p is not None])
    _check_runs(run, run_b)
    doc = provenance_document(run, run_b)
    if markdown:
        save(doc, "markdown", markdown, "--markdown", inputs)
    seam.show(doc, format)


def _check_runs(*paths: str | None) -> None:
    """Each path is a run directory, or lies in one: anything else is a one-line error, not an empty table."""
    from pathlib import Path

    from ..errors import InputError
    from ..execution.read import run_root

    for p in paths:
        if p is None:
            continue
        if not Path(p).exists():
            raise InputError(f"{p}: no such file or directory")
        if run_root(p) is None:
            raise InputError(
                f"{p} is not a run directory (no manifest.json or tokens/ folder)",
                hint="give a run written by probe, rescore, import, diagnose or the Recorder",
            )
