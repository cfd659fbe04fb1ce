"""``gate --html``: the verdict, the checks, the runs compared and their comparability, the pictures, and both
runs' metrics and metadata, on the page scaffolding of ``render/page.py``."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..formatting import fmt
from .gate_text import estimate_text, limit_text, method_text, status_text
from .page import _breakdown, _e, _figures, _metadata, _metrics, _num, _page, _table
from .token_view_html import tabbed, token_view_link

if TYPE_CHECKING:
    from ..execution.stack import StackReport
    from ..gate.document import GateDocument


def render(doc: GateDocument) -> str:
    """``gate --html``: verdict, checks, comparability, pictures, both runs' metadata; the candidate's token view
    in its own tab, which the verdict links to."""
    from .gate_pictures import pictures as drawn

    gr, pictures, tokens = doc.source, drawn(doc), doc.tokens
    files = [("candidate", gr.candidate)] + ([("baseline", gr.baseline)] if gr.baseline else [])
    body = [_verdict(gr)]
    if tokens is not None:
        body.append(token_view_link(tokens).replace("Token view:", "The candidate's token view:", 1))
    body += [_stack(gr.stack), _checks(gr), _runs(files), _comparability(gr.comparability), _method(gr)]
    body.append(_figures(pictures))
    body.append(_reports(files))
    return _page(
        "mismatchscope gate",
        f"candidate {gr.candidate.path}" + (f" vs baseline {gr.baseline.path}" if gr.baseline else ""),
        tabbed("".join(body), tokens, "Gate"),
    )


def _verdict(gr) -> str:
    failed = sum(c.failed for c in gr.checks)
    return (
        f'<p class="verdict {"pass" if gr.passed else "fail"}">{"PASS" if gr.passed else "FAIL"}: '
        + (f"{failed} of {len(gr.checks)} checks failed" if failed else f"all {len(gr.checks)} checks hold")
        + "</p>"
    )


def _stack(stack: StackReport | None) -> str:
    """What changed in the stack (the runs' provenance), beside the verdict as in the table and the Markdown: a
    table of the changes, or one line saying none did; what limited the comparison first."""
    from ..execution.compare import shown

    if stack is None:
        return ""
    out = "".join(f'<p class="note">provenance: {_e(n)}</p>' for n in stack.notes)
    if not stack.changes:
        return out + f"<p>Stack changes (provenance): {_e(stack.line())}</p>"
    rows = [[_e(c.side), _e(c.label), _e(shown(c.baseline)), _e(shown(c.candidate))] for c in stack.changes]
    return (
        out
        + "<h2>What changed in the stack (provenance)</h2>"
        + _table(["side", "field", "baseline", "candidate"], rows)
    )


def _checks(gr) -> str:
    confidence = gr.config.confidence
    rows = []
    for c in gr.checks:
        cls = "fail" if c.failed else ("warn" if c.inconclusive else "floor" if c.below_floor else "pass")
        rows.append(
            [
                f'<span class="{cls}">{_e(status_text(c))}</span>',
                f"<code>{_e(c.name)}</code>",
                _e(fmt(c.baseline)),
                _e(fmt(c.candidate)),
                _e(estimate_text(c)),
                _e(limit_text(c)),
                _e(method_text(c, confidence)),
                _e(c.explanation),
            ]
        )
    header = ["result", "check", "baseline", "candidate", f"estimate [{confidence:.0%} interval]", "limit"]
    return _table([*header, "method", "why"], rows, numeric={2, 3, 4})


def _runs(files) -> str:
    return _table(
        ["run", "path", "tokens", "sequences"],
        [[r, f"<code>{_e(e.path)}</code>", _num(e.tokens), _num(e.sequences)] for r, e in files],
        numeric={2, 3},
    )


def _comparability(comp) -> str:
    """What changed in the serving stack and what was allowed to differ; with no metadata, why it was not checked."""
    if comp is None:
        return ""
    if not comp.checked:
        return f'<h2>Comparability</h2><p class="note">{_e(comp.warning)}</p>'
    items = "".join(f"<li><code>{_e(d.change())}</code></li>" for d in comp.serving) or "<li>nothing recorded</li>"
    out = f"<h2>Comparability</h2><p>Same checkpoint, prompts and sampling settings.</p><p>Serving stack change:</p><ul>{items}</ul>"
    if comp.differences:
        out += "<p>Allowed to differ: " + "; ".join(_e(d.text()) for d in comp.differences) + "</p>"
    return out


def _method(gr) -> str:
    """How the intervals were drawn and where the limits came from, then the run's warnings and notes."""
    cfg = gr.config
    out = (
        f"<p>Bootstrap: {cfg.bootstrap} resamples of sequences, seed {cfg.seed}, {cfg.confidence:.0%} percentile intervals. "
        f"Limits from {_e(cfg.source)}.</p>"
    )
    out += "".join(f'<p class="note">warning: {_e(w)}</p>' for w in gr.warnings)
    return out + "".join(f"<p>note: {_e(n)}</p>" for n in gr.notes)


def _reports(files) -> str:
    """Both runs' headline metrics and breakdown (baseline first), then their metadata side by side."""
    out = ""
    reports = [(role, e.result.report) for role, e in reversed(files) if e.result.report]
    if reports:
        out += "<h2>Token mismatch</h2>" + _metrics(reports)
        out += "<h2>By sampler probability</h2>" + _breakdown(reports, "sampler_prob")
    return out + "<h2>Run metadata</h2>" + _metadata([(role, e.result.run) for role, e in reversed(files)])
