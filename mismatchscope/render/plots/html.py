"""One self-contained HTML file: inline CSS, PNGs as base64 data URLs, tables,
run metadata. No script, no external resource: it opens from a CI artifact
with no network."""

from __future__ import annotations

import base64
import datetime as dt
import html
import json
from collections.abc import Iterable
from typing import Any

from ..._version import __version__
from ...analysis.results import Report, WorstSequence
from ...metrics import (
    ABS_LOGPROB_DIFF_MAX,
    ABS_LOGPROB_DIFF_MEAN,
    CHI2_TOKEN,
    ESS,
    GEO_RATIO_MEAN,
    K1_MEAN,
    K2_MEAN,
    K3_MEAN,
    KL_REVERSE_K3_MEAN,
    KL_TOPK_LOWER_MEAN,
    RATIO_MAX,
    RATIO_MIN,
    RATIO_QUANTILES,
    SCORE_CENTERING,
    SEQ_LOG_RATIO_MEAN,
    TV_TOKEN_MAX,
    TV_TOKEN_MEAN,
    TV_TOPK_LOWER_MEAN,
)

_CSS = """
body { font-family: -apple-system, "Segoe UI", Roboto, Helvetica, Arial, sans-serif; margin: 2rem auto; max-width: 1300px; box-sizing: border-box;
       padding: 0 1rem; color: #1b1b1b; line-height: 1.45; }
h1 { font-size: 1.6rem; margin-bottom: 0.2rem; } h2 { font-size: 1.25rem; margin-top: 2rem; border-bottom: 1px solid #ddd; }
.sub { color: #555; margin-top: 0; }
table { border-collapse: collapse; margin: 0.6rem 0 1rem; font-size: 0.9rem; max-width: 100%; }
th, td { border: 1px solid #d0d0d0; padding: 0.25rem 0.55rem; text-align: left; vertical-align: top; overflow-wrap: anywhere; }
th { background: #f3f3f3; overflow-wrap: normal; } td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; overflow-wrap: normal; }
.pass { color: #1a7f37; font-weight: 600; } .floor { color: #0969da; font-weight: 600; } .fail { color: #cf222e; font-weight: 700; } .warn { color: #9a6700; font-weight: 600; }
.verdict { font-size: 1.3rem; padding: 0.6rem 1rem; border-radius: 6px; display: inline-block; }
.verdict.pass { background: #dafbe1; } .verdict.fail { background: #ffebe9; }
figure { margin: 1rem 0 2rem; } figure img { max-width: 100%; height: auto; border: 1px solid #e5e5e5; }
figcaption { color: #444; font-size: 0.9rem; margin-top: 0.3rem; }
.note { background: #fff8c5; padding: 0.5rem 0.8rem; border-radius: 4px; }
code { background: #f3f3f3; padding: 0 0.2rem; border-radius: 3px; }
"""


def _e(x: Any) -> str:
    return html.escape(str(x), quote=True)


def _num(v: Any) -> str:
    from ..gate_markdown import fmt

    if isinstance(v, bool) or v is None or isinstance(v, str):
        return _e("-" if v is None else v)
    if isinstance(v, int):
        return f"{v:,}"
    return _e(fmt(float(v)))


def _table(
    header: Iterable[str], rows: Iterable[Iterable[str]], numeric: set[int] | frozenset[int] = frozenset()
) -> str:
    head = "".join(f"<th>{_e(h)}</th>" for h in header)
    body = "".join(
        "<tr>"
        + "".join(f'<td class="num">{c}</td>' if i in numeric else f"<td>{c}</td>" for i, c in enumerate(r))
        + "</tr>"
        for r in rows
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _figures(pictures) -> str:
    out = []
    for p in pictures:
        data = base64.b64encode(p.png).decode("ascii")
        out.append(
            f'<figure id="{_e(p.name)}"><h3>{_e(p.title)}</h3><img alt="{_e(p.title)}" src="data:image/png;base64,{data}">'
            f"<figcaption>{_e(p.caption)}</figcaption></figure>"
        )
    return "<h2>Pictures</h2>" + "".join(out)


def _flatten(d: Any, prefix: str = "") -> list[tuple[str, Any]]:
    if isinstance(d, dict):
        out = []
        for k, v in d.items():
            out += _flatten(v, f"{prefix}.{k}" if prefix else str(k))
        return out
    if isinstance(d, list) and d and any(isinstance(x, (dict, list)) for x in d):
        return [(prefix, json.dumps(d, default=str))]
    return [(prefix, d)]


def _metadata(runs: list[tuple[str, dict | None]]) -> str:
    keys: list[str] = []
    flat = []
    for _, run in runs:
        f = dict(_flatten(run or {}))
        flat.append(f)
        keys += [k for k in f if k not in keys]
    if not keys:
        return "<p>No run metadata in the file(s) (not written by a probe).</p>"
    rows = []
    for k in keys:
        cells = [
            _e(json.dumps(f[k], default=str) if k in f and not isinstance(f[k], str) else f.get(k, "-")) for f in flat
        ]
        differs = len(flat) > 1 and len({json.dumps(f.get(k), default=str) for f in flat}) > 1
        rows.append([f"<code>{_e(k)}</code>", *[f"<mark>{c}</mark>" if differs else c for c in cells]])
    note = "<p>Highlighted: the values that differ between the runs.</p>" if len(runs) > 1 else ""
    return note + _table(["key", *[label for label, _ in runs]], rows)


def _metrics(runs: list[tuple[str, Report]]) -> str:
    shown = (
        TV_TOKEN_MEAN,
        TV_TOKEN_MAX,
        ABS_LOGPROB_DIFF_MEAN,
        ABS_LOGPROB_DIFF_MAX,
        K1_MEAN,
        K2_MEAN,
        K3_MEAN,
        KL_REVERSE_K3_MEAN,
        CHI2_TOKEN,
        ESS,
        RATIO_MIN,
        RATIO_MAX,
        SEQ_LOG_RATIO_MEAN,
        GEO_RATIO_MEAN,
        TV_TOPK_LOWER_MEAN,
        KL_TOPK_LOWER_MEAN,
    )
    rows = [[f"<code>{m.name}</code>", *[_num(getattr(rep.metrics, m.name)) for _, rep in runs]] for m in shown]
    for q in runs[0][1].metrics.ratio_quantiles:
        rows.append(
            [
                f"<code>{RATIO_QUANTILES.name}.{_e(q)}</code>",
                *[_num(rep.metrics.ratio_quantiles[q]) for _, rep in runs],
            ]
        )
    return _table(["metric", *[label for label, _ in runs]], rows, numeric=set(range(1, len(runs) + 1)))


def _breakdown(runs: list[tuple[str, Report]], kind: str) -> str:
    if not getattr(runs[0][1].breakdowns, kind):
        return ""
    header = ["bucket"]
    for label, _ in runs:
        header += [f"{label} tokens", f"{label} {TV_TOKEN_MEAN.label}", f"{label} {K3_MEAN.label}"]
    buckets = [r.bucket for r in getattr(runs[0][1].breakdowns, kind)]
    rows = []
    for b in buckets:
        row = [_e(b)]
        for _, rep in runs:
            r = next((x for x in getattr(rep.breakdowns, kind) if x.bucket == b), None)
            if r is None:
                row += [_num(None)] * 3
            else:
                row += [_num(r.tokens), _num(r.tv_token_mean), _num(r.k3_mean)]
        rows.append(row)
    return _table(header, rows, numeric=set(range(1, len(header))))


def _centering(rep: Report) -> str:
    """The score-centering statistics (top-k columns only), as the terminal prints them."""
    sc = rep.score_centering
    if not sc:
        return ""
    qs = ("0.01", "0.5", "0.99")
    rows = [
        [
            _e(m.label),
            _num(v.tokens),
            _num(v.mean),
            *[_num(v.quantiles[q]) for q in qs],
            f"<code>{_e(m.meaning)}</code>",
        ]
        for m in SCORE_CENTERING
        if (v := getattr(sc, m.name))
    ]
    rho = sc.tail_mass_ratio
    note = (
        f'<p class="note">rho is undefined on {rho.undefined_tokens:,} token(s) with an empty tail (sampler: '
        f"{rho.empty_sampler_tail:,}, trainer: {rho.empty_trainer_tail:,}), counted apart.</p>"
        if rho.undefined_tokens
        else ""
    )
    return (
        f"<h2>Score centering from the top-k</h2><p>{sc.tokens:,} tokens; K = the sampler's listed ids and the sampled one.</p>"
        + _table(["statistic", "tokens", "mean", *[f"q{q}" for q in qs], "meaning"], rows, numeric={1, 2, 3, 4, 5})
        + note
    )


def _routing(rep: Report) -> str:
    """MoE runs: the flip rate per MoE layer (completion and prompt rows apart) and what flipped tokens cost."""
    from ...analysis.routing_report import ROUTING_COLUMNS

    ro = rep.routing
    if not ro:
        return ""
    if ro.route_flip_rate_by_layer is None:
        absent = ", ".join(ro.sides.absent())
        return f"<h2>MoE routing</h2><p>No flip rates: routes missing for the {_e(absent)}.</p>"
    pct = lambda v: "-" if v is None else _e(f"{100 * v:.3g}%")  # noqa: E731
    rows = [
        [
            _e(c.layer),
            pct(c.flip_rate),
            f"{c.flipped:,} / {c.compared:,}",
            pct(p.flip_rate),
            f"{p.flipped:,} / {p.compared:,}",
        ]
        for c, p in zip(ro.route_flip_rate_by_layer, ro.prompt_route_flip_rate_by_layer or [])
    ]
    rows.append(
        [
            "any layer",
            pct(ro.route_flip_rate),
            f"{ro.tokens_flipped:,} / {ro.tokens_compared:,}",
            pct(ro.prompt_route_flip_rate),
            f"{ro.prompt_rows_flipped:,} / {ro.prompt_rows_compared:,}",
        ]
    )
    out = (
        f"<h2>MoE routing</h2><p>Top-{ro.top_k} expert sets that differ between the sides ({_e(ro.family)}, "
        f"{ro.num_experts} experts); missing captures ({ro.missing_captures.sampler or 0:,} sampler, "
        f"{ro.missing_captures.trainer or 0:,} trainer of {ro.missing_captures.entries:,} entries) "
        "are left out.</p>" + _table(ROUTING_COLUMNS, rows, numeric={0, 1, 2, 3, 4})
    )
    gap = ro.abs_logprob_diff
    if gap:
        out += _table(
            ["tokens", "count", "mean |log p - log q|"],
            [
                ["flipped in some layer", _num(gap.flipped_tokens), _num(gap.flipped_mean)],
                ["unflipped", _num(gap.unflipped_tokens), _num(gap.unflipped_mean)],
                ["without a compared route", _num(gap.tokens_without_routes), "-"],
            ],
            numeric={1, 2},
        )
        out += (
            "<p>Routing's share of the gap (sum |log p - log q| on flipped / on all tokens): "
            f"{pct(ro.routing_share_of_gap)}.</p>"
        )
    if ro.by_trainer_margin:
        out += "<h3>Flips by the trainer's router margin</h3>" + _table(
            ["margin", "compared", "flipped", "flip rate"],
            [[_e(r.bucket), _num(r.compared), _num(r.flipped), pct(r.flip_rate)] for r in ro.by_trainer_margin],
            numeric={1, 2, 3},
        )
    return out


def _worst(rows: list[WorstSequence]) -> str:
    from ...analysis.worst import RANKINGS

    by = rows[0].by
    shown = by not in ("k3_sum", "tv_max")  # those two are columns anyway
    ident = lambda v: _e("-" if v is None else v)  # noqa: E731  ids as written, no thousands separator
    header = [
        "rank",
        "sequence",
        "prompt",
        "tokens",
        *([RANKINGS[by][0]] if shown else []),
        "sum k3",
        "max |p - q|",
        "position of the largest gap",
        "token there",
        "gap l there (nats)",
    ]
    body = [
        [
            _num(r.rank),
            ident(r.sequence_id),
            ident(r.prompt_id),
            _num(r.tokens),
            *([_num(r.value)] if shown else []),
            _num(r.k3_sum),
            _num(r.tv_max),
            ident(r.max_gap_position),
            ident(r.max_gap_token_id),
            _num(r.max_gap_log_ratio),
        ]
        for r in rows
    ]
    return (
        f"<h2>Worst sequences</h2><p>Ranked by {_e(RANKINGS[by][0])}; their traces are among the pictures below.</p>"
        + _table(header, body, numeric=set(range(len(header))))
    )


def _page(title: str, subtitle: str, body: str) -> str:
    stamp = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    return (
        f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{_e(title)}</title><style>{_CSS}</style></head><body><h1>{_e(title)}</h1>"
        f'<p class="sub">{_e(subtitle)} &middot; mismatchscope {_e(__version__)} &middot; {stamp}</p>{body}</body></html>\n'
    )


def report_page(result, pictures, worst: list[WorstSequence] | None = None) -> str:
    """``report --html``: headline metrics, breakdowns, pictures, run metadata; ``worst`` (``report --worst``) adds its table."""
    rep = result.report
    runs = [("value", rep)]
    body = [f"<p>{result.tokens:,} tokens, {result.sequences:,} sequences, {len(result.source.files)} file(s).</p>"]
    if result.warnings:
        body.append("".join(f'<p class="note">warning: {_e(w)}</p>' for w in result.warnings))
    body.append("<h2>Token mismatch</h2>" + _metrics(runs))
    body.append(
        "<h2>Readings</h2>"
        + _table(
            ["metric", "value", "reading", "source"],
            [[_e(i.metric), _num(i.value), _e(i.reading), _e(i.source)] for i in rep.interpretation],
            numeric={1},
        )
    )
    if worst:
        body.append(_worst(worst))
    body.append(_figures(pictures))
    body.append("<h2>By sampler probability</h2>" + _breakdown(runs, "sampler_prob"))
    body.append("<h2>By position in the completion</h2>" + _breakdown(runs, "position"))
    if rep.breakdowns.entropy:
        body.append("<h2>By trainer entropy</h2>" + _breakdown(runs, "entropy"))
    body.append(_centering(rep))
    body.append(_routing(rep))
    body.append("<h2>Run metadata</h2>" + _metadata([("run", result.run)]))
    return _page(
        "mismatchscope report",
        ", ".join(str(f) for f in result.source.files[:3]) + (" ..." if len(result.source.files) > 3 else ""),
        "".join(body),
    )


def gate_page(gr, pictures) -> str:
    """``gate --html``: verdict, checks, comparability, pictures, both runs' metadata."""
    from ..gate_markdown import estimate_text, fmt, limit_text, method_text, status_text

    cfg = gr.config
    failed = sum(c.failed for c in gr.checks)
    verdict = (
        f'<p class="verdict {"pass" if gr.passed else "fail"}">{"PASS" if gr.passed else "FAIL"}: '
        + (f"{failed} of {len(gr.checks)} checks failed" if failed else f"all {len(gr.checks)} checks hold")
        + "</p>"
    )
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
                _e(method_text(c, cfg.confidence)),
                _e(c.explanation),
            ]
        )
    body = [
        verdict,
        _table(
            [
                "result",
                "check",
                "baseline",
                "candidate",
                f"estimate [{cfg.confidence:.0%} interval]",
                "limit",
                "method",
                "why",
            ],
            rows,
            numeric={2, 3, 4},
        ),
    ]
    files = [("candidate", gr.candidate)] + ([("baseline", gr.baseline)] if gr.baseline else [])
    body.append(
        _table(
            ["run", "path", "tokens", "sequences"],
            [[r, f"<code>{_e(e.path)}</code>", _num(e.tokens), _num(e.sequences)] for r, e in files],
            numeric={2, 3},
        )
    )
    comp = gr.comparability
    if comp is not None:
        if comp.checked:
            items = (
                "".join(f"<li><code>{_e(d.change())}</code></li>" for d in comp.serving) or "<li>nothing recorded</li>"
            )
            body.append(
                f"<h2>Comparability</h2><p>Same checkpoint, prompts and sampling settings.</p><p>Serving stack change:</p><ul>{items}</ul>"
            )
            if comp.differences:
                body.append("<p>Allowed to differ: " + "; ".join(_e(d.text()) for d in comp.differences) + "</p>")
        else:
            body.append(f'<h2>Comparability</h2><p class="note">{_e(comp.warning)}</p>')
    body.append(
        f"<p>Bootstrap: {cfg.bootstrap} resamples of sequences, seed {cfg.seed}, {cfg.confidence:.0%} percentile intervals. "
        f"Limits from {_e(cfg.source)}.</p>"
    )
    for w in gr.warnings:
        body.append(f'<p class="note">warning: {_e(w)}</p>')
    for n in gr.notes:
        body.append(f"<p>note: {_e(n)}</p>")
    body.append(_figures(pictures))
    reports = [(role, e.result.report) for role, e in reversed(files) if e.result.report]
    if reports:
        body.append("<h2>Token mismatch</h2>" + _metrics(reports))
        body.append("<h2>By sampler probability</h2>" + _breakdown(reports, "sampler_prob"))
    body.append("<h2>Run metadata</h2>" + _metadata([(role, e.result.run) for role, e in reversed(files)]))
    return _page(
        "mismatchscope gate",
        f"candidate {gr.candidate.path}" + (f" vs baseline {gr.baseline.path}" if gr.baseline else ""),
        "".join(body),
    )
