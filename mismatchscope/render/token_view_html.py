"""The token view as HTML: ``view --html``'s page, and the "tokens" tab of report's, compare-masks' and gate's.

One self-contained fragment (:func:`tokens_section`): the text of each shown
sequence, each token a span coloured by l = log p - log q on a diverging
scale (blue: the trainer gives the token more probability than the sampler
did, red: less), with a mark under it for each rule that rejects or
reweights it (one colour and line style per rule); the sequence rules'
verdicts on each sequence's header; a legend whose boxes hide a rule's
marks; a details box on hover or focus (both logprobs, the ratio, every
rule's decision, both sides' top-k). The page carries the
:class:`~mismatchscope.view.document.TokenView` as JSON for the details box
and a small script for them and for the keys (``n``/``p``: next/previous
marked token). Nothing is fetched: the file opens offline.
"""

from __future__ import annotations

import html
import json
import math
from typing import Any

from ..documents import to_json
from ..view.document import TokenView, ViewRule, ViewSequence
from .page import _page
from .token_view_assets import SCRIPT, STYLE, rule_styles

PALETTE = ("#E69F00", "#0072B2", "#009E73", "#CC79A7", "#D55E00", "#56B4E9", "#000000", "#999999")
"""Okabe and Ito's colours, told apart by most colour-blind readers."""
LINES = ("solid", "dashed", "dotted", "double")
"""with the colours: 32 rules, each with its own mark."""


def _e(x: Any) -> str:
    return html.escape(str(x), quote=True)


def render(view: TokenView) -> str:
    """``view --html``: the token view alone on a page."""
    return _page("mismatchscope view", view.run, tokens_section(view))


def tabbed(main: str, view: TokenView | None, main_title: str) -> str:
    """A page body with two tabs, ``main`` (the command's own page) and the token view; ``main`` alone when there
    is no view. Tabs are plain links to the sections (``#main``, ``#tokens``): the page needs no script for them."""
    if view is None:
        return main
    nav = (
        '<nav class="tabs" aria-label="page sections">'
        f'<a href="#main">{_e(main_title)}</a><a href="#tokens">Tokens ({len(view.sequences)} sequences)</a></nav>'
    )
    return (
        f"<style>{TAB_STYLE}</style>{nav}"
        f'<section class="tab" id="main">{main}</section>'
        f'<section class="tab" id="tokens">{tokens_section(view)}</section>'
    )


def token_view_link(view: TokenView) -> str:
    """The line a page's own tab says about its token view, with the link to it."""
    return (
        f'<p class="tv-link">Token view: <a href="#tokens">{len(view.sequences)} sequences token by token</a> '
        f"(ranked by {_e(view.ranking)}), each token coloured by log p &minus; log q and marked by the rules that "
        "cut it.</p>"
    )


TAB_STYLE = """
nav.tabs { display: flex; flex-wrap: wrap; gap: 0.4rem; border-bottom: 2px solid #ddd; margin: 1rem 0; }
nav.tabs a { padding: 0.35rem 0.9rem; border: 1px solid #ddd; border-bottom: none; border-radius: 6px 6px 0 0;
             text-decoration: none; color: #0969da; background: #f6f8fa; }
section.tab { display: none; }
section.tab:target, section.tab:has(:target) { display: block; }
body:not(:has(section.tab:target, section.tab :target)) section.tab#main { display: block; }
"""


def tokens_section(view: TokenView) -> str:
    """The token view as one fragment: its style, header, legend, sequences, details box, data and script."""
    parts = [
        f"<style>{STYLE}{rule_styles([r.key for r in view.rules], PALETTE, LINES)}</style>",
        _header(view),
        _legend(view),
        '<div class="tv-seqs">',
        *(_sequence(view, i, s) for i, s in enumerate(view.sequences)),
        "</div>",
        '<div id="tv-tip" class="tv-tip" role="tooltip" hidden></div>',
        f'<script type="application/json" id="tv-data">{_data(view)}</script>',
        f"<script>{SCRIPT}</script>",
    ]
    return f'<div class="tokview" id="tv-root">{"".join(parts)}</div>'


def _header(view: TokenView) -> str:
    n = len(view.sequences)
    lines = [
        f"<h2>Tokens</h2><p>{n} sequence{'s' if n != 1 else ''} of {view.sequences_in_run:,} "
        f"({view.tokens:,} tokens in the run), ranked by {_e(view.ranking)}; "
        f'<span class="tv-shown">{view.shown_tokens:,}</span> tokens shown (a page shows at most '
        f"{view.max_tokens:,}).</p>",
        f'<p class="tv-text-note{" note" if view.text.tokenizer is None else ""}">{_e(view.text.note)}.</p>',
    ]
    lines += [f'<p class="note">warning: {_e(w)}</p>' for w in view.warnings]
    if view.notes:
        items = "".join(f"<li>{_e(note)}</li>" for note in view.notes)
        lines.append(
            f'<details class="tv-cuts" open><summary>{len(view.notes)} cut to the cap</summary><ul>{items}</ul></details>'
        )
    return "".join(lines)


def _legend(view: TokenView) -> str:
    edges = view.gap_edges
    swatches = ['<span class="tv-sw g0">&lt; ' + _num(edges[0]) + "</span>"]
    for k in range(1, len(edges) + 1):
        hi = f"&lt; {_num(edges[k])}" if k < len(edges) else "and more"
        swatches.append(f'<span class="tv-sw gp{k}">+{_num(edges[k - 1])} {hi}</span>')
    for k in range(1, len(edges) + 1):
        hi = f"&lt; {_num(edges[k])}" if k < len(edges) else "and more"
        swatches.append(f'<span class="tv-sw gn{k}">&minus;{_num(edges[k - 1])} {hi}</span>')
    rules = "".join(_rule_box(r) for r in view.rules)
    return (
        '<div class="tv-legend">'
        '<p class="tv-scale"><b>Colour: l = log p &minus; log q (nats)</b>, blue where the trainer gives the token more '
        f"probability than the sampler, red where it gives less: {''.join(swatches)}</p>"
        f'<fieldset class="tv-rules"><legend>Marks: each rule\'s rejections (reweights), one line style a rule; '
        "untick to hide. Sequence rules mark the sequence's header.</legend>"
        f'{rules}<span class="tv-all"><button type="button" data-all="1">all</button>'
        '<button type="button" data-all="0">none</button></span></fieldset>'
        '<p class="tv-keys">Hover or focus a token for its numbers. Keys: <kbd>n</kbd>/<kbd>j</kbd> next marked '
        "token, <kbd>p</kbd>/<kbd>k</kbd> previous, <kbd>&rarr;</kbd>/<kbd>&larr;</kbd> next/previous token, "
        "<kbd>]</kbd>/<kbd>[</kbd> next/previous sequence, <kbd>Esc</kbd> closes the details.</p></div>"
    )


def _rule_box(r: ViewRule) -> str:
    what = f"{r.acted:,} token{'s' if r.acted != 1 else ''} {'reweighted' if r.action == 'reweight' else 'rejected'}"
    level = " (sequence)" if r.level == "sequence" else ""
    return (
        f'<label class="tv-rule" title="{_e(r.label)}"><input type="checkbox" data-rule="{r.key}" checked>'
        f'<span class="tv-swatch k {r.key}"></span>{_e(r.name)}{level} '
        f'<span class="tv-count" data-count="{r.key}">{what}</span></label>'
    )


def _sequence(view: TokenView, index: int, s: ViewSequence) -> str:
    acted_by: dict[int, list[str]] = {}
    for key, at in s.acted.items():
        for i in at:
            acted_by.setdefault(i, []).append(key)
    seq_keys = [k for k, d in s.sequence_rules.items() if d.action != "keep"]
    by_key = {r.key: r for r in view.rules}
    badges = "".join(
        f'<span class="tv-badge {k}"><span class="tv-swatch k {k}"></span>{_e(by_key[k].name)}: '
        f"{s.sequence_rules[k].action}</span>"
        for k in seq_keys
    )
    value = "" if s.value is None else f" &middot; ranked by {_num(s.value)}"
    prompt = "" if s.prompt_id is None else f" &middot; prompt {s.prompt_id}"
    head = (
        f'<h3><a href="#seq-{s.sequence_id}">#{s.rank} sequence {s.sequence_id}</a>'
        f'<span class="tv-meta">{s.tokens:,} tokens{prompt}{value}</span>{badges}</h3>'
    )
    cut = f'<p class="tv-cut">{_e(s.cut)}</p>' if s.cut else ""
    classes = " ".join(["tv-seq", *(f"sr-{k}" for k in seq_keys)])
    body = _tokens(index, s, acted_by, view.gap_edges)
    return (
        f'<article class="{classes}" id="seq-{s.sequence_id}" data-s="{index}">{head}{cut}'
        f'<div class="tv-text{" tv-ids" if s.text is None else ""}">{body}</div></article>'
    )


def _tokens(index: int, s: ViewSequence, acted_by: dict[int, list[str]], edges: list[float]) -> str:
    out = []
    prev_pos, prev_turn = None, None
    for i, (pos, l) in enumerate(zip(s.position, s.log_ratio, strict=True)):
        turn = s.turn[i] if s.turn is not None else None
        if turn is not None and turn != prev_turn:
            if prev_pos is not None and pos > prev_pos + 1:
                out.append(
                    f'<span class="tv-tool">tool or environment: {pos - prev_pos - 1:,} positions not scored</span>'
                )
            out.append(f'<span class="tv-turn">turn {turn}</span>')
        prev_pos, prev_turn = pos, turn
        keys = acted_by.get(i, [])
        marks = "".join(f'<b class="k {k}"></b>' for k in keys)
        text, breaks = _shown(s, i)
        cls = f"t {_gap_class(l, edges)}" + (" x" if keys else "")
        m = f' data-m="{" ".join(keys)}"' if keys else ""
        tab = "0" if index == 0 and i == 0 else "-1"
        out.append(
            f'<span class="{cls}" data-s="{index}" data-i="{i}"{m} tabindex="{tab}">{text}{marks}</span>{breaks}'
        )
    return "".join(out)


def _shown(s: ViewSequence, i: int) -> tuple[str, str]:
    """A token's visible text (whitespace made visible where it would vanish), and a line break after it when
    its text ends a line."""
    if s.text is None:
        return _e(s.token_id[i]), " "
    piece = s.text[i]
    if piece == "":
        return '<span class="tv-empty">&#9643;</span>', ""
    shown = _e(piece.replace("\t", "\u21e5").replace("\r", "").replace("\n", "\u21b5"))
    return shown, "<br>" if "\n" in piece else ""


def _gap_class(l: float, edges: list[float]) -> str:
    """The colour class of a gap: g0 below the first edge, gp1..gp5 (l > 0) or gn1..gn5 (l < 0) above."""
    a = abs(l)
    if not math.isfinite(a):
        return "gp5" if l > 0 else "gn5"
    level = sum(a >= e for e in edges)
    if level == 0:
        return "g0"
    return f"{'gp' if l > 0 else 'gn'}{level}"


def _num(x: float) -> str:
    from ..formatting import fmt

    return _e(fmt(x))


def _data(view: TokenView) -> str:
    """The document as JSON for the script: non-finite numbers as strings (JSON has none), ``</`` escaped."""
    text = json.dumps(_finite(to_json(view)), ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    return text.replace("</", "<\\/").replace("<!--", "<\\!--")


def _finite(x: Any) -> Any:
    if isinstance(x, float) and not math.isfinite(x):
        return "nan" if math.isnan(x) else ("inf" if x > 0 else "-inf")
    if isinstance(x, dict):
        return {k: _finite(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_finite(v) for v in x]
    return x
