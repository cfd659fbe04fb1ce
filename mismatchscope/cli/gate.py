"""``gate``: did the mismatch of a candidate serving stack get worse? Exit 0 pass, 1 fail, 2 error."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from ..analysis.parallel import keep_freed_memory
from ..errors import UsageError
from ._ci_reports import CiReports
from ._options import (
    DEFAULT_FORMAT,
    ColumnOpt,
    FormatOpt,
    GateBootstrapOpt,
    GateConfidenceOpt,
    GateHtmlOpt,
    GateMarkdownOpt,
    GatePlotsOpt,
    GateRuleOpt,
    GateSeedOpt,
    JunitXmlOpt,
    TokenizerOpt,
)
from ._output import save, save_pictures
from ._streams import info, warn

if TYPE_CHECKING:
    from ..gate.config import GateConfig
    from ..gate.document import GateDocument
    from ..outputs import Inputs


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
    rule: GateRuleOpt = None,
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
    bootstrap: GateBootstrapOpt = None,
    confidence: GateConfidenceOpt = None,
    seed: GateSeedOpt = None,
    column: ColumnOpt = None,
    format: FormatOpt = DEFAULT_FORMAT,
    junit_xml: JunitXmlOpt = None,
    markdown: GateMarkdownOpt = None,
    plots: GatePlotsOpt = None,
    html: GateHtmlOpt = None,
    tokenizer: TokenizerOpt = None,
    force: bool = typer.Option(False, "--force", help="With --init: overwrite an existing file."),
) -> None:
    """Gate a serving-stack change on the train-inference mismatch: absolute limits, and regression limits against a
    baseline, judged with bootstrap intervals over sequences.

    Exit code 0: every limit holds; 1: a limit failed; 2: a usage or input error (incomparable runs included).
    """
    keep_freed_memory()
    from ..render import seam

    if init:
        return _write_starter(candidate if candidate is not None else "gate.toml", force)
    if candidate is None:
        raise UsageError(
            "missing CANDIDATE",
            hint="mismatchscope gate CANDIDATE --baseline BASELINE (or gate --init to write a gate.toml)",
        )
    cfg = _config(
        config,
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
    base = None if absolute_only else cfg.baseline
    reports = CiReports.asked(junit_xml, markdown)
    inputs = _check_paths(candidate, base, config, cfg, reports, plots, html)
    given = _page_tokenizer(tokenizer, html)
    doc = _run(candidate, base, cfg, column, plots=plots is not None, page=html is not None, tokenizer=given)
    _write_outputs(doc, reports, plots, html, inputs)
    seam.show(doc, format)
    if doc.verdict == "fail":
        raise typer.Exit(1)


def _config(
    config: str | None,
    *,
    limits: list[str] | None,
    increases: list[str] | None,
    rules: list[str] | None,
    allow_different: list[str] | None,
    bootstrap: int | None,
    confidence: float | None,
    seed: int | None,
    baseline: str | None,
    absolute_only: bool,
) -> GateConfig:
    """The limits file (or ./gate.toml, or the defaults) with the command line's flags over it."""
    from ..gate.config import load_config, with_overrides

    if config is not None and not config.strip():
        raise UsageError(
            "--config is an empty path", hint="give a gate.toml, or write one with mismatchscope gate --init"
        )
    return with_overrides(
        load_config(Path(config) if config is not None else None),
        limits=limits,
        increases=increases,
        rules=rules,
        allow_different=allow_different,
        bootstrap=bootstrap,
        confidence=confidence,
        seed=seed,
        baseline=baseline,
        absolute_only=absolute_only,
    )


def _check_paths(
    candidate: str, baseline: str | None, config: str | None, cfg: GateConfig, reports: CiReports, plots, html
) -> Inputs:
    """Every refusal that needs no token read: a baseline that is the candidate, then each output path (none may
    replace an input: the runs or the limits file), then matplotlib when pictures are asked for."""
    from ..outputs import check_all

    if baseline:
        from ..gate.run import refuse_self_baseline

        refuse_self_baseline(candidate, baseline)
    limits_file = config or (Path(cfg.source) if Path(cfg.source).is_file() else None)  # ./gate.toml when it was read
    inputs = check_all(
        files=reports.outputs((html, "--html")), dirs=[(plots, "--plots")], inputs=[candidate, baseline, limits_file]
    )
    if plots is not None or html is not None:
        from ..outputs import require_matplotlib

        require_matplotlib()
    return inputs


def _run(
    candidate: str,
    baseline: str | None,
    cfg: GateConfig,
    column: list[str] | None,
    *,
    plots: bool,
    page: bool,
    tokenizer,
) -> GateDocument:
    """The gate's one library call, timed (the JUnit report carries the seconds), its warnings and notes said;
    with a page (``--html``), the candidate's token view, read with ``tokenizer``'s text."""
    from ..gate.document import GateDocument, candidate_tokens
    from ..gate.run import run_gate
    from ..reader import parse_column_mapping

    pictures = plots or page
    t0 = time.perf_counter()
    sweeps = _plot_sweeps(cfg) if pictures else None
    result = run_gate(
        candidate,
        baseline,
        cfg,
        parse_column_mapping(column),
        plots=pictures,
        sweeps=sweeps,
        progress=info if sys.stderr.isatty() else None,
    )  # progress for a person; in a log the error line stays the last
    seconds = time.perf_counter() - t0
    for w in result.warnings:
        warn(w)
    for n in result.notes:
        info(n)
    return GateDocument.of(result, seconds, candidate_tokens(result, tokenizer) if page else None)


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


def _page_tokenizer(tokenizer: str | None, html: str | None):
    """``--tokenizer`` for the page's tokens tab, loaded before any work; without ``--html`` it has nothing to do."""
    if tokenizer is not None and html is None:
        raise UsageError("--tokenizer gives the text of the HTML page's tokens tab", hint="add --html FILE")
    from ..view import given_tokenizer

    return given_tokenizer(tokenizer)


def _write_outputs(doc: GateDocument, reports: CiReports, plots: str | None, html: str | None, inputs) -> None:
    reports.write(inputs, doc)
    if plots:
        from ..render.gate_pictures import pictures

        save_pictures(pictures(doc), plots, inputs)
    if html:
        save(doc, "html", html, "--html", inputs)
