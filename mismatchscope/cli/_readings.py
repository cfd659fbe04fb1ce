"""``compare-masks --readings``: one rule under several framework readings, side by side."""

from __future__ import annotations

import typer

from ._output import OutputFormat, emit_json, stdout_console, warn

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
    payload = side_by_side(path, readings, parse_column_mapping(column))
    for w in payload["warnings"]:
        warn(w)
    if format is OutputFormat.json:
        emit_json(payload)
        return
    _table(payload)


def _table(p: dict) -> None:
    from rich.table import Table

    from ..analysis.side_by_side import CATEGORIES
    from ._render import num, pct

    console = stdout_console()
    console.print(f"{p['tokens']:,} tokens | {p['sequences']:,} sequences", highlight=False)
    verb = "rejected" if p["action"] == "reject" else "reweighted"
    t = Table(
        title=f"{p['rule']} under each reading ({p['level']} level); differences against {p['first']}",
        title_justify="left",
    )
    for col in (
        "reading",
        "advantage",
        f"tokens {verb}",
        "rate",
        f"only {p['first']}",
        "only this",
        *CATEGORIES,
        "parameters",
    ):
        t.add_column(col, justify="left" if col in ("reading", "advantage", "parameters") else "right")
    for r in p["readings"]:
        d = r.get("differs_from_first")
        params = ",".join(f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}" for k, v in r["params"].items())
        cells = [num(d[c]) for c in CATEGORIES] if d else ["-"] * len(CATEGORIES)
        hyp = "file" if r["hypothesis"] == "data" else r["hypothesis"]
        t.add_row(
            r["reading"],
            hyp,
            num(r["tokens_acted"]),
            pct(r["token_rate"]),
            num(r.get("first_only")),
            num(r.get("this_only")),
            *cells,
            params,
        )
    console.print(t)
    console.print(
        "Categories: each differing token in the first that holds. A = 0: its advantage is exactly 0; "
        "p or q = 1: a logprob of exactly 0 on either side; at threshold: its quantity equals a threshold "
        "of either reading; other: the rest (thresholds, k3's orientation). Sequence rules part whole "
        "sequences (A = 0 or other).",
        highlight=False,
    )
