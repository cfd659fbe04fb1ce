"""The diagnose summary: the JSON payload's public shape, the reading, the rich tables.

The payload is built by :func:`~mismatchscope.diagnose.run.run_diagnose`;
:func:`public` drops nothing but guarantees the documented keys
(docs/diagnose.md) are present. :func:`reading` is the one-paragraph
interpretation, computed from the numbers only.
"""

from __future__ import annotations

from typing import Any

from .effects import PRIMARY


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.3g}%"


def reading(p: dict[str, Any]) -> str:
    """One paragraph: who owns the gap, what removes it at what cost, what changes nothing, what is not repeatable."""
    parts = []
    base = p["baseline"]["metrics"][PRIMARY]
    dec = p["decomposition"]["shares"]
    if dec.get("sampler_share") is not None:
        owner, share = ("sampler", dec["sampler_share"]) if dec["sampler_share"] >= 0.5 else ("trainer", dec["trainer_share"])
        corr = dec.get("correlation")
        parts.append(f"the {owner} owns {_pct(share)} of the gap (mean |log p - log q| {base:.3g}"
                     + (f"; error correlation {corr:.2f}" if corr is not None else "") + ")")
    ok = [v for v in p["variants"] if v["status"] == "ok"]
    best = [v for v in ok if v["delta"][PRIMARY]["significant"] and v["delta"][PRIMARY]["estimate"] < 0]
    for v in best[:2]:
        d = v["delta"][PRIMARY]
        rel = v["throughput"].get("relative_to_baseline")
        removed = -d["estimate"] / base if base > 0 else None
        parts.append(f"{v['name']} removes {_pct(removed)} of it" + (f" at {rel:.2f}x throughput" if rel else ""))
    worse = [v for v in ok if v["delta"][PRIMARY]["significant"] and v["delta"][PRIMARY]["estimate"] > 0]
    for v in worse[:2]:
        d = v["delta"][PRIMARY]
        factor = v["metrics"][PRIMARY] / base if base > 0 else None
        parts.append(f"{v['name']} makes it {factor:.3g}x as large" if factor else f"{v['name']} adds to it")
    if p["no_effect"]:
        parts.append(f"{', '.join(p['no_effect'])} change{'s' if len(p['no_effect']) == 1 else ''} nothing measurable")
    failed = [v["name"] for v in p["variants"] if v["status"] == "failed"]
    if failed:
        parts.append(f"{', '.join(failed)} failed to run")
    det = p.get("determinism") or {}
    shaky = [k for k, d in det.items() if d.get("share_logprobs_bit_identical") not in (None, 1.0)
             or d.get("share_tokens_identical") not in (None, 1.0)]
    if det:
        parts.append("every determinism check is bit-identical" if not shaky
                     else f"not bit-identical: {', '.join(shaky)}")
    text = "; ".join(parts)
    return text[:1].upper() + text[1:] + "." if text else ""


def finish(p: dict[str, Any]) -> dict[str, Any]:
    """Add the reading to the payload (kept separate so tests can call it on any payload)."""
    p["reading"] = reading(p)
    return p


def render(console, p: dict[str, Any]) -> None:
    from rich.table import Table

    from ..cli._render import num, pct

    ref = p["reference"]
    console.print(f"diagnose {p['checkpoint']} | device {p['device']} | reference: {ref['note']}", highlight=False)
    b = p["baseline"]
    console.print(f"baseline: sampler vllm/{b['sampler']['dtype']}, trainer {b['trainer']['dtype']}"
                  f" | {b['throughput']['tokens']:,} tokens | run {b['run_dir']}", highlight=False)

    t = Table(title="Decomposition (identical tokens; the metrics of `report` on each pair)", title_justify="left")
    for c in ("gap", "|log p - log q| mean", "max", "tv_token mean", "k3 mean", "run directory"):
        t.add_column(c, justify="left" if c in ("gap", "run directory") else "right")
    for name in ("total", "sampler_vs_reference", "trainer_vs_reference", "sampler_decode_vs_prefill"):
        g = p["decomposition"][name]
        if g.get("status") == "skipped":
            t.add_row(name, "skipped", "", "", "", g["reason"])
            continue
        m = g["metrics"]
        t.add_row(name, num(m["abs_logprob_diff_mean"]), num(m["abs_logprob_diff_max"]), num(m["tv_token_mean"]),
                  num(m["k3_mean"]), g["run_dir"])
    console.print(t)
    s = p["decomposition"]["shares"]
    console.print(f"error budget: sampler share {pct(s['sampler_share'])}, trainer share {pct(s['trainer_share'])}, "
                  f"correlation {num(s['correlation'])} (mean e_s^2 {num(s['sampler_mse'])}, mean e_t^2 {num(s['trainer_mse'])})",
                  highlight=False)
    if p["decomposition"]["sampler_decode_vs_prefill"].get("note"):
        console.print(f"[dim]{p['decomposition']['sampler_decode_vs_prefill']['note']}[/dim]")

    t = Table(title="Variants, ranked by effect on the total gap (|log p - log q| mean; variant - baseline)", title_justify="left")
    for c in ("#", "variant", "side", "gap", "change", "95% interval", "signif.", "bootstrap", "tokens changed",
              "sampler share", "throughput"):
        t.add_column(c, justify="left" if c in ("variant", "side", "bootstrap", "signif.") else "right")
    for v in p["variants"]:
        if v["status"] != "ok":
            t.add_row("-", v["name"], v["side"], v["status"], "", "", "", "", "", "", "", style="dim")
            continue
        d = v["delta"][PRIMARY]
        t.add_row(str(v["rank"]), v["name"], v["side"], num(v["metrics"][PRIMARY]), num(d["estimate"]),
                  f"[{num(d['ci_low'])}, {num(d['ci_high'])}]", "yes" if d["significant"] else "no", d["bootstrap"],
                  pct(v["tokens_changed_share"]), pct(v["decomposition"]["sampler_share"]),
                  "-" if v["throughput"].get("relative_to_baseline") is None else f"{v['throughput']['relative_to_baseline']:.2f}x")
    console.print(t)
    for v in p["variants"]:
        if v["status"] != "ok":
            console.print(f"  {v['name']}: {v['status']}: {v['reason']}", highlight=False)
    if p["no_effect"]:
        console.print(f"change nothing (no significant effect): {', '.join(p['no_effect'])}", highlight=False)

    if p["determinism"]:
        t = Table(title="Determinism and batch invariance (bits as the engines returned them)", title_justify="left")
        for c in ("check", "tokens", "tokens identical", "logprobs bit-identical", "largest |diff|", "compared"):
            t.add_column(c, justify="left" if c in ("check", "compared") else "right")
        for name, d in p["determinism"].items():
            t.add_row(name, num(d["tokens"]), pct(d["share_tokens_identical"]), pct(d["share_logprobs_bit_identical"]),
                      num(d["max_abs_diff"]), d.get("compared", ""))
        console.print(t)

    t = Table(title="Cost per configuration (start-up excluded from throughput)", title_justify="left")
    for c in ("configuration", "sampler tok/s", "trainer tok/s", "pipeline tok/s", "start-up s", "wall s", "Pareto", "certified"):
        t.add_column(c, justify="left" if c == "configuration" else "right")
    rows = [("baseline", b)] + [(v["name"], v) for v in p["variants"] if v["status"] == "ok"]
    for name, rec in rows:
        tp = rec["throughput"]
        t.add_row(name, num(tp["sampler_tokens_per_s"]), num(tp["trainer_tokens_per_s"]), num(tp.get("pipeline_tokens_per_s")),
                  num(tp["startup_s"]), num(tp["wall_s"]), "*" if name in p["pareto_front"] else "",
                  {True: "yes", False: "no"}.get(rec.get("certified"), "-"))
    console.print(t)
    console.print(f"\n{p['reading']}", highlight=False)
    console.print(f"\noutput directory: {p['out']} (every run directory above works with report, compare-masks and gate)",
                  highlight=False)
