"""``diagnose`` for people: its tables section by section, from the JSON payload (printed as it is with
``--format json``); the localisation's tables are :mod:`.locate_tables`', shared with ``rescore --locate``."""

from __future__ import annotations

from typing import Any

from ..diagnose.effects import PRIMARY
from ..metrics import ABS_LOGPROB_DIFF_MAX, ABS_LOGPROB_DIFF_MEAN, K3_MEAN, TV_TOKEN_MEAN


def json_document(p: dict[str, Any]) -> dict[str, Any]:
    """What ``--format json`` prints: the typed document of the payload (``OUT/diagnose.json`` holds the same)."""
    from ..diagnose.document import DiagnoseDocument
    from ..documents import document

    return document(DiagnoseDocument.of(p))


def print_diagnose(console, p: dict[str, Any]) -> None:
    """The terminal output of ``diagnose``: its tables, then (``--locate``) each configuration's localisation."""
    render(console, p)
    if p.get("locate"):
        from .locate_tables import render_all

        render_all(console, p["locate"])


def render(console, p: dict[str, Any]) -> None:
    """The diagnose tables, section by section, from the JSON payload."""
    _header(console, p)
    _decomposition(console, p)
    _variants(console, p)
    _determinism(console, p["determinism"])
    _cost(console, p)
    _conclusion(console, p)


def _header(console, p: dict[str, Any]) -> None:
    ref = p["reference"]
    console.print(f"diagnose {p['checkpoint']} | device {p['device']} | reference: {ref['note']}", highlight=False)
    b = p["baseline"]
    console.print(
        f"baseline: sampler {b['sampler']['kind']}/{b['sampler']['dtype']}, "
        f"trainer {b['trainer']['dtype']}"
        f" | {b['throughput']['tokens']:,} tokens | run {b['run_dir']}",
        highlight=False,
    )


def _decomposition(console, p: dict[str, Any]) -> None:
    """The four gaps on identical tokens, their run directories, the error budget and the route flips."""
    from rich.table import Table

    from .layout import print_table
    from .tables import num, pct

    t = Table(title="Decomposition (identical tokens; the metrics of `report` on each pair)", title_justify="left")
    for c in ("gap", "|log p - log q| mean", "max", "tv_token mean", "k3 mean"):
        t.add_column(c, justify="left" if c == "gap" else "right")
    dirs = []
    for name in ("total", "sampler_vs_reference", "trainer_vs_reference", "sampler_decode_vs_prefill"):
        g = p["decomposition"][name]
        if g.get("status") == "skipped":
            t.add_row(name, "skipped", "", "", "")
            dirs.append(f"  {name}: skipped ({g['reason']})")
            continue
        m = g["metrics"]
        t.add_row(
            name, *(num(m[k.name]) for k in (ABS_LOGPROB_DIFF_MEAN, ABS_LOGPROB_DIFF_MAX, TV_TOKEN_MEAN, K3_MEAN))
        )
        dirs.append(f"  {name}: {g['run_dir']}")
    print_table(console, t)
    console.print("run directories:\n" + "\n".join(dirs), highlight=False)
    s = p["decomposition"]["shares"]
    console.print(
        f"error budget: sampler share {pct(s['sampler_share'])}, trainer share {pct(s['trainer_share'])}, "
        f"correlation {num(s['correlation'])} (mean e_s^2 {num(s['sampler_mse'])}, mean e_t^2 {num(s['trainer_mse'])})",
        highlight=False,
    )
    _routes(console, p["decomposition"].get("routes") or {})
    if p["decomposition"]["sampler_decode_vs_prefill"].get("note"):
        console.print(f"[dim]{p['decomposition']['sampler_decode_vs_prefill']['note']}[/dim]")


_VARIANT_COLUMNS = (
    "variant",
    "side",
    "gap",
    "change",
    "95% interval",
    "signif.",
    "bootstrap",
    "tokens changed",
    "sampler share",
    "throughput",
)


def _variants(console, p: dict[str, Any]) -> None:
    """The variants ranked by their effect on the total gap; the ones that did not run, and why."""
    from rich.table import Table

    from .layout import print_table

    t = Table(
        title="Variants, ranked by effect on the total gap (|log p - log q| mean; variant - baseline)",
        title_justify="left",
    )
    for c in _VARIANT_COLUMNS:
        t.add_column(c, justify="left" if c in ("variant", "side", "bootstrap", "signif.") else "right")
    for v in p["variants"]:
        if v["status"] != "ok":
            t.add_row(v["name"], v["side"], v["status"], "", "", "", "", "", "", "", style="dim")
            continue
        t.add_row(*_variant_cells(v))
    print_table(console, t)
    for v in p["variants"]:
        if v["status"] != "ok":
            console.print(f"  {v['name']}: {v['status']}: {v['reason']}", highlight=False)
    if p["no_effect"]:
        console.print(f"change nothing (no significant effect): {', '.join(p['no_effect'])}", highlight=False)


def _variant_cells(v: dict[str, Any]) -> list[str]:
    from .tables import num, pct

    d = v["delta"][PRIMARY]
    return [
        v["name"],
        v["side"],
        num(v["metrics"][PRIMARY]),
        num(d["estimate"]),
        f"[{num(d['ci_low'])}, {num(d['ci_high'])}]",
        "yes" if d["significant"] else "no",
        d["bootstrap"],
        pct(v["tokens_changed_share"]),
        pct(v["decomposition"]["sampler_share"]),
        _ratio(v["throughput"]),
    ]


def _determinism(console, determinism: dict[str, Any]) -> None:
    from rich.table import Table

    from .layout import print_table
    from .tables import num, pct

    if not determinism:
        return
    t = Table(title="Determinism and batch invariance (bits as the engines returned them)", title_justify="left")
    for c in ("check", "tokens", "tokens identical", "logprobs bit-identical", "largest |diff|", "compared"):
        t.add_column(c, justify="left" if c in ("check", "compared") else "right")
    for name, d in determinism.items():
        t.add_row(
            name,
            num(d["tokens"]),
            pct(d["share_tokens_identical"]),
            pct(d["share_logprobs_bit_identical"]),
            num(d["max_abs_diff"]),
            d.get("compared", ""),
        )
    print_table(console, t)


_COST_COLUMNS = (
    "configuration",
    "sampler tok/s",
    "trainer tok/s",
    "pipeline tok/s",
    "x baseline",
    "rounds",
    "start-up s",
    "wall s",
    "Pareto",
    "certified",
)


def _cost(console, p: dict[str, Any]) -> None:
    """Each configuration's throughput, its ratio to the baseline's, the Pareto front and certification."""
    from rich.table import Table

    from .layout import print_table
    from .tables import num

    t = Table(title="Cost per configuration (start-up excluded from throughput)", title_justify="left")
    for c in _COST_COLUMNS:
        t.add_column(c, justify="left" if c == "configuration" else "right")
    rows = [("baseline", p["baseline"])] + [(v["name"], v) for v in p["variants"] if v["status"] == "ok"]
    for name, rec in rows:
        tp = rec["throughput"]
        t.add_row(
            name,
            num(tp["sampler_tokens_per_s"]),
            num(tp["trainer_tokens_per_s"]),
            num(tp.get("pipeline_tokens_per_s")),
            "1x" if name == "baseline" else _ratio(tp),
            _rounds(tp.get("timing")),
            num(tp["startup_s"]),
            num(tp["wall_s"]),
            "*" if name in p["pareto_front"] else "",
            {True: "yes", False: "no"}.get(rec.get("certified"), "-"),
        )
    print_table(console, t)
    console.print(
        "x baseline: pipeline throughput over the baseline's, the median of interleaved rounds (baseline, "
        "variant, ...) of the same work; rounds: their number and range. Throughput columns are one "
        "measurement each, minutes apart.",
        highlight=False,
    )


def _conclusion(console, p: dict[str, Any]) -> None:
    """The price of zero mismatch (one line per certified configuration), the reading, the output folder."""
    from ..diagnose.price import price_line

    for entry in p.get("zero_price") or []:
        console.print(price_line(entry), highlight=False)
    console.print(f"\n{p['reading']}", highlight=False)
    console.print(
        f"\noutput directory: {p['out']} (every run directory above works with report, compare-masks and gate)",
        highlight=False,
    )


def _ratio(tp: dict[str, Any]) -> str:
    rel = tp.get("relative_to_baseline")
    if rel is None:
        return "-"
    timing = tp.get("timing") or {}
    return f"{rel:.2f}x" + ("" if timing.get("rankable", True) else " (!)")


def _rounds(timing: dict[str, Any] | None) -> str:
    if not timing:
        return "-"
    return f"{timing['rounds']}: {timing['low']:.2f}-{timing['high']:.2f}x"


def _routes(console, r: dict[str, Any]) -> None:
    """One line per side: its route flips against the reference's routes, layer by layer (MoE only)."""
    from .tables import pct

    if not r.get("layers"):
        return
    if r.get("status") != "ok":
        console.print(f"route flips against the reference: not measured ({r.get('reason')})", highlight=False)
        return
    for side in ("sampler", "trainer"):
        f = r.get(side) or {}
        if f.get("status") == "ok":
            layers = ", ".join(f"{layer}: {pct(x)}" for layer, x in zip(r["layers"], f["flip_rate_per_layer"]))
            console.print(
                f"{side} route flips against the reference: {pct(f['flipped_any_layer'])} of tokens in any "
                f"layer (by layer {layers})",
                highlight=False,
            )
        else:
            console.print(
                f"{side} route flips against the reference: not measured ({f.get('reason')})", highlight=False
            )
