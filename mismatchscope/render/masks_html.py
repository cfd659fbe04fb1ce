"""``compare-masks --html``: the rules' counts, which tail each cuts, how they overlap, and the token view of the
run in its own tab, on the page scaffolding of ``render/page.py``."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..analysis.results import MasksResult, display_name
from .page import _e, _figures, _metadata, _num, _page, _table
from .token_view_html import tabbed, token_view_link

if TYPE_CHECKING:
    from ..reporting import MasksDocument


def render(doc: MasksDocument) -> str:
    """The page of ``compare-masks --html``: the rules' table and agreement, with ``--plots`` its pictures, and the
    run's token view in its own tab."""
    result, masks, tokens = doc.analysis, doc.masks, doc.tokens
    if doc.pictures:
        from .masks_pictures import pictures as drawn

        pictures = drawn(doc)
    else:
        pictures = []
    body = [f"<p>{masks.tokens:,} tokens, {masks.sequences:,} sequences, {len(result.source.files)} file(s).</p>"]
    if tokens is not None:
        body.append(token_view_link(tokens))
    body += [f'<p class="note">warning: {_e(w)}</p>' for w in masks.warnings]
    body.append("<h2>Rules</h2>" + _rules(masks))
    if masks.tail_reading:
        body.append(f"<p>{_e(masks.tail_reading)}</p>")
    if masks.agreement:
        body.append("<h2>Agreement</h2>" + _agreement(masks))
    if pictures:
        body.append(_figures(pictures))
    body.append("<h2>Run metadata</h2>" + _metadata([("run", result.run)]))
    return _page("mismatchscope compare-masks", _files(result), tabbed("".join(body), tokens, "Rules"))


def _rules(masks: MasksResult) -> str:
    header = [
        "rule",
        "parameters",
        "level",
        "action",
        "tokens rejected",
        "reject rate",
        "tokens reweighted",
        "sequences rejected",
    ]
    rows = [
        [
            f"<code>{_e(display_name(r.name, r.hypothesis))}</code>",
            _e(r.label.partition(":")[2] or "-"),
            _e(r.level),
            _e(r.action),
            _num(r.tokens_rejected),
            _num(r.token_reject_rate),
            _num(r.tokens_reweighted),
            _num(r.sequences_rejected),
        ]
        for r in masks.rules
    ]
    return _table(header, rows, numeric={4, 5, 6, 7})


def _agreement(masks: MasksResult) -> str:
    rows = [[_e(a.a), _e(a.b), _num(a.both), _num(a.only_a), _num(a.only_b), _num(a.jaccard)] for a in masks.agreement]
    return _table(["rule a", "rule b", "both", "only a", "only b", "Jaccard"], rows, numeric={2, 3, 4, 5})


def _files(result) -> str:
    files = result.source.files
    return ", ".join(str(f) for f in files[:3]) + (" ..." if len(files) > 3 else "")
