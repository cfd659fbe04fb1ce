"""``timeline``: a thin command over ``mismatchscope.timeline.timeline``."""

from __future__ import annotations

import typer

from ..analysis.parallel import keep_freed_memory
from ._options import DEFAULT_FORMAT, ColumnOpt, FormatOpt, TimelinePlotsOpt, TimelineRuleOpt
from ._streams import info, warn

RunsArg = typer.Argument(
    ...,
    help="A token-pair Parquet file, a directory of shards (or a run directory), or a glob; two or more runs "
    "are compared side by side.",
    show_default=False,
)


def timeline(
    paths: list[str] = RunsArg,
    by: str | None = typer.Option(
        None,
        "--by",
        metavar="COLUMN",
        help="Split the lines by a categorical column (strings or integers), e.g. env or rank; "
        "any column of the file, mismatchscope's or not; or entropy: the trainer's entropy in report's buckets "
        "(a gap that grows while each bucket's stays flat is the policy sharpening).",
    ),
    rule: TimelineRuleOpt = None,
    column: ColumnOpt = None,
    format: FormatOpt = DEFAULT_FORMAT,
    plots: TimelinePlotsOpt = None,
    x: str | None = typer.Option(
        None,
        "--x",
        metavar="step|wall",
        help="Compare the runs against training steps or wall-clock hours (the Recorder's wall_time): reward and "
        "mismatch per run, and the slower run's cost per step. Default with two or more runs: step.",
    ),
) -> None:
    """Headline mismatch metrics per training step (needs a step column), and the steps where a series spikes, shifts or drifts."""
    keep_freed_memory()
    from ..outputs import check_all

    inputs = check_all(dirs=[(plots, "--plots")], inputs=list(paths))
    if len(paths) > 1 or x is not None:
        _refuse_one_run_options(by=by, rule=rule, column=column)
        _compare(paths, x or "step", format, plots, inputs)
    else:
        _one_run(paths[0], rule, by, column, format, plots, inputs)


def _refuse_one_run_options(**given_options) -> None:
    """--by, --rule and --column shape one run's timeline; a comparison refuses them rather than ignore them."""
    given = [f"--{name}" for name, v in given_options.items() if v]
    if given:
        from ..errors import UsageError

        raise UsageError(
            f"{', '.join(given)} appl{'ies' if len(given) == 1 else 'y'} to one run's timeline, not to a comparison",
            hint="compare the runs without it, or run timeline on one run",
        )


def _one_run(path: str, rule, by, column, format: str, plots: str | None, inputs) -> None:
    from ..reader import parse_column_mapping
    from ..render import seam
    from ..rules import parse_rule
    from ..timeline import timeline as run_timeline

    rules = [parse_rule(r) for r in rule] if rule else None
    result = run_timeline(path, rules, by, parse_column_mapping(column))
    for w in result.series.warnings:
        warn(w)
    png = None
    if plots is not None:
        from ..render.timeline_pictures import plot_timeline

        png = plot_timeline(result, plots, inputs)
        info(f"wrote {png}")
    seam.show(result.document(str(png) if png else None), format)


def _compare(paths: list[str], x: str, format: str, plots: str | None, inputs) -> None:
    from ..render import seam
    from ..timeline.compare import compare

    if x not in ("step", "wall"):
        from ..errors import UsageError

        raise UsageError(f"--x {x!r}", hint="use --x step or --x wall")
    result = compare(paths, x)  # type: ignore[arg-type]  # checked above
    for line in result.runs:
        for w in line.skipped_lines():
            warn(w)
    if plots is not None:
        from ..render.timeline_pictures import write_compare

        info(f"wrote {write_compare(result, plots, inputs)}")
    seam.show(result, format)


timeline.__doc__ = "\n\n".join(
    [
        timeline.__doc__ or "",
        "Per step: mean tv_token, mean k3, mean and p99 of |log p - log q|, the share of ratios outside [0.5, 2], "
        "and the reject (or reweight) rates of the selected rules. Spikes: Iglewicz-Hoaglin modified z-score > 3.5 "
        "against both the 3 steps before and the 3 after. Shifts: binary segmentation (ruptures Binseg, change in mean) "
        "with the MBIC penalty 3 sigma^2 ln(n). Drifts: consecutive shifts one way.",
    ]
)
