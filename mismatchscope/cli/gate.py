"""``gate``: did the mismatch of a candidate serving stack get worse? Exit 0 pass, 1 fail, 2 error."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import typer

from ..analysis.parallel import keep_freed_memory
from ..errors import UsageError
from ._options import ColumnOpt, FormatOpt
from ._streams import OutputFormat, emit_json, info, stdout_console, warn


def gate(
    candidate: str | None = typer.Argument(
        None,
        metavar="CANDIDATE",
        show_default=False,
        help="The run sampled by the new serving stack (file, shard directory, probe run directory or glob). "
        "With --init: the file to write (default gate.toml).",
    ),
    baseline: str | None = typer.Option(
        None,
        "--baseline",
        "-b",
        metavar="PATH",
        help="The run sampled by the current serving stack. Needed by regression limits.",
    ),
    config: str | None = typer.Option(
        None,
        "--config",
        help="Limits file. Default: ./gate.toml when it exists, else the built-in defaults (see --init).",
    ),
    init: bool = typer.Option(
        False, "--init", help="Write a commented starter gate.toml (or CANDIDATE as the file name) and exit."
    ),
    limit: list[str] | None = typer.Option(
        None,
        "--limit",
        "-l",
        metavar="METRIC<=VALUE",
        help="Absolute limit on the candidate, e.g. tv_token_mean<=0.005 or ess>=0.9. Repeatable; replaces the file's limit on that metric.",
    ),
    max_increase: list[str] | None = typer.Option(
        None,
        "--max-increase",
        "-i",
        metavar="METRIC=PCT",
        help="Regression limit against the baseline, e.g. k3_mean=25%. Repeatable; replaces the file's limit on that metric.",
    ),
    rule: list[str] | None = typer.Option(
        None,
        "--rule",
        "-r",
        metavar="NAME[:K=V,...]",
        help="Parameters of a rule the limits name, e.g. icepop:alpha=0.2,beta=5.",
    ),
    allow_different: list[str] | None = typer.Option(
        None,
        "--allow-different",
        metavar="KEY",
        help="Compare although KEY differs: checkpoint, prompts, sampling[.KEY], n, seed, trainer[.KEY] "
        "(trainer.checkpoint: the trainer scored with other weights than the sampler, --trainer-checkpoint). Repeatable.",
    ),
    absolute_only: bool = typer.Option(
        False, "--absolute-only", help="Check the absolute limits alone (no baseline needed)."
    ),
    bootstrap: int | None = typer.Option(
        None, "--bootstrap", min=0, help="Bootstrap resamples (default 1000, at most 100,000; 0: point estimates only)."
    ),
    confidence: float | None = typer.Option(
        None, "--confidence", help="Two-sided confidence of the intervals (default 0.95)."
    ),
    seed: int | None = typer.Option(
        None, "--seed", min=0, help="Bootstrap seed (default 0): same files, same verdict."
    ),
    column: list[str] | None = ColumnOpt,
    format: OutputFormat = FormatOpt,
    junit_xml: str | None = typer.Option(
        None, "--junit-xml", metavar="FILE", help="Write one JUnit test case per check."
    ),
    markdown: str | None = typer.Option(
        None,
        "--markdown",
        metavar="FILE",
        help="Write the verdict as a Markdown table (also appended to $GITHUB_STEP_SUMMARY when set).",
    ),
    plots: str | None = typer.Option(
        None,
        "--plots",
        metavar="DIR",
        help="Write PNGs: the checks with their intervals, baseline and candidate overlaid (needs the plot extra).",
    ),
    html: str | None = typer.Option(
        None, "--html", metavar="FILE", help="Write one self-contained HTML page: checks, pictures, run metadata."
    ),
    force: bool = typer.Option(False, "--force", help="With --init: overwrite an existing file."),
) -> None:
    """Gate a serving-stack change on the train-inference mismatch: absolute limits, and regression limits against a
    baseline, judged with bootstrap intervals over sequences.

    Exit code 0: every limit holds; 1: a limit failed; 2: a usage or input error (incomparable runs included).
    """
    keep_freed_memory()
    if init:
        _write_starter(candidate if candidate is not None else "gate.toml", force)
        return
    if candidate is None:
        raise UsageError(
            "missing CANDIDATE",
            hint="mismatchscope gate CANDIDATE --baseline BASELINE (or gate --init to write a gate.toml)",
        )
    from ..gate.config import load_config, with_overrides
    from ..gate.run import run_gate
    from ..outputs import check_all
    from ..reader import parse_column_mapping

    if config is not None and not config.strip():
        raise UsageError(
            "--config is an empty path", hint="give a gate.toml, or write one with mismatchscope gate --init"
        )
    cfg = with_overrides(
        load_config(Path(config) if config is not None else None),
        limits=limit,
        increases=max_increase,
        rules=rule,
        allow_different=allow_different,
        bootstrap=bootstrap,
        confidence=confidence,
        seed=seed,
        baseline=baseline,
        absolute_only=absolute_only,
    )
    if not absolute_only and cfg.baseline:
        from ..gate.run import refuse_self_baseline

        refuse_self_baseline(candidate, cfg.baseline)
    summary = os.environ.get("GITHUB_STEP_SUMMARY") or None
    limits_file = config or (Path(cfg.source) if Path(cfg.source).is_file() else None)  # ./gate.toml when it was read
    inputs = check_all(
        files=[
            (junit_xml, "--junit-xml"),
            (markdown, "--markdown"),
            (html, "--html"),
            (summary, "GITHUB_STEP_SUMMARY"),
        ],
        dirs=[(plots, "--plots")],
        inputs=[candidate, None if absolute_only else cfg.baseline, limits_file],
    )
    want_pictures = plots is not None or html is not None
    if want_pictures:
        from ..outputs import require_matplotlib

        require_matplotlib()
    t0 = time.perf_counter()
    sweeps = _plot_sweeps(cfg) if want_pictures else None
    result = run_gate(
        candidate,
        None if absolute_only else cfg.baseline,
        cfg,
        parse_column_mapping(column),
        plots=want_pictures,
        sweeps=sweeps,
        progress=info if sys.stderr.isatty() else None,
    )  # progress for a person; in a log the error line stays the last
    seconds = time.perf_counter() - t0
    for w in result.warnings:
        warn(w)
    for n in result.notes:
        info(n)
    _write_outputs(result, seconds, junit_xml, markdown, plots, html, inputs)
    if format is OutputFormat.json:
        from ..render.gate_tables import gate_payload

        emit_json(gate_payload(result))
    else:
        from ..render.gate_tables import gate_tables

        gate_tables(stdout_console(), result)
    if not result.passed:
        raise typer.Exit(1)


def _write_starter(name: str, force: bool) -> None:
    from ..gate.config import STARTER_TOML
    from ..outputs import check_output_file, write_text

    path = check_output_file(name, "gate --init")  # an empty name first: Path("") would be the current folder
    assert path is not None  # None only for a None name
    if path.exists() and not force:
        raise UsageError(
            f"{path} already exists", hint="pass --force to overwrite it, or give another file name: gate --init FILE"
        )
    write_text(path, STARTER_TOML, "gate --init")
    info(f"wrote {path}: edit the limits, then run mismatchscope gate CANDIDATE --baseline BASELINE")


def _plot_sweeps(cfg):
    from ..rules.drawn import default_sweeps

    return default_sweeps(cfg.rule_instances())


def _write_outputs(
    result, seconds: float, junit_xml: str | None, markdown: str | None, plots: str | None, html: str | None, inputs
) -> None:
    if junit_xml:
        from ..render.gate_junit import junit_xml as render

        _write(junit_xml, render(result, seconds), "--junit-xml", inputs)
    md = None
    if markdown or os.environ.get("GITHUB_STEP_SUMMARY"):
        from ..render.gate_markdown import markdown as render_md

        md = render_md(result)
    if markdown and md:
        _write(markdown, md, "--markdown", inputs)
    summary = os.environ.get("GITHUB_STEP_SUMMARY")
    if summary and md:
        from ..outputs import write_text

        write_text(summary, md + "\n", "GITHUB_STEP_SUMMARY", append=True, inputs=inputs)
    if plots or html:
        from ..render.plots import gate_figures, write_pngs

        figures = gate_figures(result)
        if plots:
            for p in write_pngs(figures, Path(plots), inputs):
                info(f"wrote {p}")
        if html:
            from ..render.plots.html import gate_page

            _write(html, gate_page(result, figures), "--html", inputs)


def _write(path: str | os.PathLike[str], text: str, option: str, inputs) -> None:
    from ..outputs import write_text

    write_text(path, text, option, inputs=inputs)
    info(f"wrote {path}")
