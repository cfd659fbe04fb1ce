"""``import``'s output for people: what was converted, and the command to run next."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..importers.document import ImportDocument


ROW_REASONS = {
    "padding": "the stack's batch padding",
    "loss_mask_all_zero": "loss mask all 0 (overlong filtering)",
    "empty_response": "empty response",
}
"""how the summary names each kind of row a stack's dump holds that trains no token (``ImportResult.rows_skipped``)."""


def rows_skipped(counts: dict[str, int]) -> str:
    """``; 3 row(s) that train no token skipped (2 the stack's batch padding, 1 ...)``, or nothing."""
    if not counts:
        return ""
    parts = ", ".join(f"{n} {ROW_REASONS.get(k, k)}" for k, n in counts.items())
    return f"; {sum(counts.values())} row(s) that train no token skipped ({parts})"


def render(console, doc: ImportDocument) -> None:
    """The tokens imported (and the routes), then the next command: ``rescore`` for a dump that holds the
    sampler's side only, else ``report``."""
    console.print(
        f"imported {doc.tokens_written:,} tokens in {doc.sequences:,} sequences from {doc.files_read} file(s) "
        f"into {doc.out}; {doc.tokens_dropped_by_mask:,} non-generated tokens dropped by the mask"
        + (f"; {doc.bad_records_skipped} bad record(s) skipped" if doc.bad_records_skipped else "")
        + rows_skipped(doc.rows_skipped),
        highlight=False,
    )
    if doc.routes is not None:
        r = doc.routes
        console.print(
            f"imported the sampler's MoE routes of {r.sequences:,} sequences ({r.rows:,} rows, "
            f"{r.format}) into {doc.out}/routes; {r.missing_captures:,} missing captures",
            highlight=False,
        )
    if doc.sampler_only and doc.routes is None:  # a sampler-only dump (verl, ROLL)
        console.print(
            f"next: mismatchscope rescore {doc.out} --trainer-checkpoint CHECKPOINT --temperature T", highlight=False
        )
        return
    console.print(f"next: mismatchscope report {doc.out}   (or timeline / compare-masks)", highlight=False)
