"""``view``: a thin command over ``view.view_run``; the page is ``render/token_view_html.py``'s."""

from __future__ import annotations

import typer

from ..analysis.parallel import keep_freed_memory
from ..errors import UsageError
from ._options import DEFAULT_FORMAT, ColumnOpt, FormatOpt, PathArg, TokenizerOpt, ViewHtmlOpt, ViewRuleOpt
from ._streams import warn

DEFAULT_WORST = 20


def view(
    path: PathArg,
    html: ViewHtmlOpt = None,
    worst: int | None = typer.Option(
        None,
        "--worst",
        "-w",
        min=1,
        metavar="N",
        help=f"Show the N worst sequences (default {DEFAULT_WORST}).",
        show_default=False,
    ),
    by: str = typer.Option(
        "k3",
        "--by",
        metavar="RANKING",
        help="What --worst ranks by: k3 (the sequence's sum of k3), max-gap (its largest |log p - log q|) or a rule's "
        "name (the tokens it rejects or reweights in the sequence).",
    ),
    sequences: list[str] | None = typer.Option(
        None,
        "--sequences",
        metavar="ID[,ID...]",
        help="Show these sequences, in this order, instead of the worst. Repeatable.",
    ),
    rule: ViewRuleOpt = None,
    tokenizer: TokenizerOpt = None,
    token_cap: int = typer.Option(
        10_000,
        "--token-cap",
        min=1,
        metavar="N",
        help="Show at most N tokens on the page; a longer sequence shows the window around its largest gap.",
    ),
    column: ColumnOpt = None,
    format: FormatOpt = DEFAULT_FORMAT,
) -> None:
    """The worst (or chosen) sequences as text, each token coloured by log p - log q and marked by every rule that rejects or reweights it; hover or focus a token for both sides' numbers and top-k."""
    keep_freed_memory()
    from dataclasses import replace

    from ..outputs import check_all
    from ..reader import parse_column_mapping
    from ..render import seam
    from ..rules import default_rules, parse_rule
    from ..view import ViewOptions, view_run
    from ._output import save

    if html is None:
        raise UsageError("view writes a page: give it --html FILE", hint="e.g. mismatchscope view RUN --html view.html")
    inputs = check_all(files=[(html, "--html")], inputs=[path])
    asked = _ids(sequences)
    if asked and (worst is not None or by != "k3"):
        raise UsageError("--sequences names the sequences; --worst and --by choose them", hint="give one or the other")
    options = ViewOptions(worst=worst or DEFAULT_WORST, by=by, sequences=tuple(asked), max_tokens=token_cap)
    rules = [parse_rule(r) for r in rule] if rule else default_rules()
    doc = replace(view_run(path, rules, options, tokenizer, parse_column_mapping(column)), page=html)
    for w in doc.warnings:
        warn(w)
    save(doc, "html", html, "--html", inputs, said=f"({len(doc.sequences)} sequences, {doc.shown_tokens:,} tokens)")
    seam.show(doc, format)


def _ids(items: list[str] | None) -> list[int]:
    """``--sequences 3,17 --sequences 5`` -> [3, 17, 5]; anything but whole numbers is a one-line error."""
    out: list[int] = []
    for item in items or []:
        for part in item.split(","):
            text = part.strip()
            try:
                out.append(int(text))
            except ValueError:
                raise UsageError(
                    f"--sequences {item!r}: {text!r} is not a sequence id",
                    hint="give whole numbers, e.g. --sequences 3,17",
                ) from None
    if len(set(out)) < len(out):
        raise UsageError(f"--sequences names a sequence twice: {', '.join(items or [])}", hint="give each id once")
    return out
