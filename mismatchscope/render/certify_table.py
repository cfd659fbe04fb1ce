"""The certify verdict for people: what was compared, each check, and where the pairs part."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..certify.document import CertifyDocument
    from ..certify.rows import FullVocabResult
    from ..certify.run import Verdict


def render(console, doc: CertifyDocument) -> None:
    """What was compared, one row per check, each pairing's distances and first parting tokens, the route flips,
    ``--full-vocab``'s whole rows, then the one verdict, which holds for the rows too."""
    v, rows = doc.source, doc.full_vocab
    _coverage(console, v)
    _checks(console, v)
    for p in v.pairings:
        _pairing(console, p)
    _route_flips(console, v)
    if rows is not None and rows.equal:
        console.print(f"full vocabulary: {rows.detail()}", highlight=False)
    _verdict(console, v, rows)


def _coverage(console, v: Verdict) -> None:
    from rich.markup import escape

    c = v.coverage
    console.print(
        escape(
            f"{v.run}: {c.tokens:,} tokens, {c.sequences:,} sequences, longest position "
            f"{c.longest_position}, {c.share_past_512:.1%} past position 512"
        ),
        highlight=False,
    )
    console.print(escape("scope: " + ", ".join(f"{k}={val}" for k, val in v.scope.items())), highlight=False)
    changed = [r.label for r in v.sides if r.status == "changed"]
    if changed:
        console.print(escape("the sides differ in: " + ", ".join(changed)), highlight=False)


def _checks(console, v: Verdict) -> None:
    from rich.markup import escape
    from rich.table import Table

    from ..certify.document import checks
    from .layout import print_table

    t = Table(title="Certify (byte equality, no threshold)", title_justify="left")
    for col in ("result", "check", "detail"):
        t.add_column(col)
    for name, ok, detail in checks(v):
        mark = (
            "[green]pass[/green]" if ok else ("[bold red]FAIL[/bold red]" if ok is False else "[dim]not checked[/dim]")
        )
        t.add_row(mark, escape(name), escape(detail))
    print_table(console, t)


def _pairing(console, p) -> None:
    """One pairing's width note; where it parts, its ULP distances, earliest positions and first tokens."""
    from rich.markup import escape

    console.print(escape(f"{p.pairing.title}: {p.dtype_note}"), highlight=False)
    if p.equal:
        return
    hist = ", ".join(f"{b.ulp} ULP: {b.tokens:,}" for b in p.ulp_histogram)
    console.print(escape(f"  ULP distances: {hist}"), highlight=False)
    e = p.earliest_summary()
    assert e is not None  # a pairing that parts has an earliest position
    console.print(
        escape(
            f"  earliest differing position per sequence: {e.sequences} of {e.of} sequences "
            f"part, at position min {e.min}, median {e.median:g}, max {e.max} "
            f"({e.at_position_0} at position 0)"
        ),
        highlight=False,
    )
    if p.first:
        _first_tokens(console, p)


def _first_tokens(console, p) -> None:
    from rich.table import Table

    from .layout import print_table

    ft = Table(title=f"first differing tokens ({p.pairing.title})", title_justify="left")
    for col in ("sequence", "position", "token", p.pairing.left, p.pairing.right, "ULP"):
        ft.add_column(col, justify="right" if col in ("sequence", "position", "token", "ULP") else "left")
    for d in p.first:
        ft.add_row(
            str(d.sequence_id),
            str(d.position),
            str(d.token_id),
            f"{d.left_hex} {d.left_decimal}",
            f"{d.right_hex} {d.right_decimal}",
            f"{d.ulp:,}",
        )
    print_table(console, ft)


def _route_flips(console, v: Verdict) -> None:
    from rich.markup import escape

    r = v.routes
    if not r.flips_by_layer:
        return
    console.print(
        escape("  route flips by layer: " + ", ".join(f"{k}: {n}" for k, n in r.flips_by_layer.items())),
        highlight=False,
    )
    for f in r.first:
        console.print(
            escape(
                f"  sequence {f.sequence_id} position {f.position} layer {f.layer}: "
                f"sampler {f.sampler}, trainer {f.trainer}"
            ),
            highlight=False,
        )


def _verdict(console, v: Verdict, rows: FullVocabResult | None = None) -> None:
    from rich.markup import escape

    from ..certify.document import checks

    if rows is not None and not rows.equal:
        also = (
            "; the run certifies on sampled tokens but not on full rows (every checked pair byte-equal: "
            f"{', '.join(p.pairing.name for p in v.pairings)})"
            if v.certified
            else "; " + "; ".join(v.reasons)
        )
        console.print("[bold red]NOT CERTIFIED[/bold red]: " + escape(f"full vocabulary: {rows.detail()}{also}"))
    elif v.certified:
        unchecked = [name for name, ok, _ in checks(v) if ok is None]
        console.print(
            f"[bold green]CERTIFIED[/bold green]: every checked pair is byte-equal "
            f"({', '.join(p.pairing.name for p in v.pairings)})"
            + escape(f"; not checked: {', '.join(unchecked)}" if unchecked else "")
        )
    else:
        console.print("[bold red]NOT CERTIFIED[/bold red]: " + escape("; ".join(v.reasons)))
