"""What every HTML page shares (``report``'s, ``gate``'s, ``diagnose``'s): one self-contained file with inline
CSS, PNGs as base64 data URLs, tables, run metadata, and the headline-metric and breakdown tables of one run or
several side by side. No external resource: it opens from a CI artifact with no network. The only script is the
token view's (``render/token_view_html.py``), inline, in the tab that holds it.

Each page is built beside its command: ``render/report_html.py``, ``render/gate_html.py``,
``render/diagnose_pictures.py``."""

from __future__ import annotations

import base64
import datetime as dt
import html
import json
from collections.abc import Iterable
from typing import Any

from .._version import __version__
from ..analysis.results import Report
from ..metrics import (
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
    from ..formatting import fmt

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


def _page(title: str, subtitle: str, body: str) -> str:
    stamp = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    return (
        f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{_e(title)}</title><style>{_CSS}</style></head><body><h1>{_e(title)}</h1>"
        f'<p class="sub">{_e(subtitle)} &middot; mismatchscope {_e(__version__)} &middot; {stamp}</p>{body}</body></html>\n'
    )
