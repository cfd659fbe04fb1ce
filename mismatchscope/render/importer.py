"""``import``'s output: what was converted and the command to run next (terminal), or the typed document (JSON)."""

from __future__ import annotations

from pathlib import Path


def import_payload(result, out_dir: Path) -> dict:
    """``import --format json``: ``importers/document.ImportDocument``, ``schema_version`` first."""
    from ..documents import document
    from ..importers.document import ImportDocument

    return document(ImportDocument.of(result, out_dir))


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


def import_lines(console, result, out_dir: Path) -> None:
    """The tokens imported (and the routes), then the next command: ``rescore`` for a dump that holds the
    sampler's side only, else ``report``."""
    console.print(
        f"imported {result.tokens_written:,} tokens in {result.sequences:,} sequences from {result.files_read} file(s) "
        f"into {out_dir}; {result.tokens_dropped_by_mask:,} non-generated tokens dropped by the mask"
        + (f"; {result.bad_records_skipped} bad record(s) skipped" if result.bad_records_skipped else "")
        + rows_skipped(result.rows_skipped),
        highlight=False,
    )
    if result.routes is not None:
        r = result.routes
        console.print(
            f"imported the sampler's MoE routes of {r['sequences']:,} sequences ({r['rows']:,} rows, "
            f"{r['format']}) into {out_dir}/routes; {r['missing_captures']:,} missing captures",
            highlight=False,
        )
    if (out_dir / "sequences.parquet").is_file() and result.routes is None:  # a sampler-only dump (verl, ROLL)
        console.print(
            f"next: mismatchscope rescore {out_dir} --trainer-checkpoint CHECKPOINT --temperature T", highlight=False
        )
        return
    console.print(f"next: mismatchscope report {out_dir}   (or timeline / compare-masks)", highlight=False)
