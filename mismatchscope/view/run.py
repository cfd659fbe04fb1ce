"""``view``: one compare-masks pass over the run, then its token view; and the same view from a pass that already
ran (report's, compare-masks' and gate's pages)."""

from __future__ import annotations

from collections.abc import Sequence

from ..rules import RuleInstance
from .build import ViewOptions, build_view
from .document import TokenView
from .text import Decoder, TextSource, find_tokenizer, load_decoder


def given_tokenizer(tokenizer: str | None) -> tuple[Decoder, TextSource] | None:
    """``--tokenizer``, loaded before any work (a wrong folder is an error before the pass, not after it)."""
    if tokenizer is None:
        return None
    from pathlib import Path

    return load_decoder(Path(tokenizer), "--tokenizer"), TextSource(
        tokenizer, f"text from the tokenizer of {tokenizer}"
    )


def token_view(
    run: str,
    result,
    rules: Sequence[RuleInstance],
    options: ViewOptions,
    given: tuple[Decoder, TextSource] | None = None,
) -> TokenView:
    """The token view of ``result`` (a pass over ``run`` whose rules include ``rules``), its text from ``given``
    (``--tokenizer``), else from the run's own checkpoint, else its ids."""
    decoder, text = given if given is not None else find_tokenizer(result.run, run)
    return build_view(run, result, rules, options, decoder, text)


def view_run(
    path: str,
    rules: Sequence[RuleInstance],
    options: ViewOptions,
    tokenizer: str | None = None,
    mapping: dict[str, str] | None = None,
) -> TokenView:
    """``mismatchscope view PATH``: the pass, then the view."""
    from ..analysis.engine import AnalysisRequest, analyse

    given = given_tokenizer(tokenizer)
    result = analyse(path, AnalysisRequest(report=False, masks=True, rules=list(rules)), mapping)
    return token_view(path, result, rules, options, given)
