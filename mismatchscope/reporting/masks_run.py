"""``compare-masks``' library call: the pass with the rules (writing the per-token audit when asked), the page's
token view, as one :class:`MasksDocument`; with ``--readings``, one rule's readings side by side."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..analysis.side_by_side import Readings
from .report_documents import MasksDocument
from .report_options import MasksOptions, selected_rules


def masks_document(opts: MasksOptions, pictures: bool = False) -> MasksDocument:
    """compare-masks' document; ``pictures``: they are drawn (``--plots``), and the page shows them."""
    from ..analysis.engine import AnalysisRequest, analyse

    rules, sweeps = selected_rules(opts.rules, opts.sweeps)
    request = AnalysisRequest(
        report=False, masks=True, rules=rules, sweeps=sweeps, examples=opts.examples, by_turn=opts.by_turn
    )
    result, written = writing_audit(opts.write, lambda sink: analyse(opts.path, request, opts.mapping, sink=sink))
    tokens = None
    if opts.page:
        from ..view import ViewOptions, token_view

        tokens = token_view(opts.path, result, rules, ViewOptions(), opts.tokenizer)
    assert result.masks is not None  # masks=True
    return MasksDocument(
        result.masks, analysis=result, examples=opts.examples, pictures=pictures, tokens=tokens, written=written
    )


def readings_document(path: str, readings: str, mapping: dict[str, str], write: str | None = None) -> Readings:
    """``--readings``: one rule under mismatchscope's defaults and each framework reading that has it, side by
    side (the per-token audit written into ``write`` during the same pass)."""
    from dataclasses import replace

    from ..analysis.side_by_side import side_by_side

    result, written = writing_audit(write, lambda sink: side_by_side(path, readings, mapping, sink=sink))
    return replace(result, written=written)


def writing_audit(write: str | None, run: Callable[[Any], Any]) -> tuple[Any, list[str]]:
    """``run(sink)``, the pass, writing the per-token audit into ``write`` when given (``sink``: its writer, else
    None), and the files it wrote; the audit is taken back if the pass fails."""
    if write is None:
        return run(None), []
    from ..audit import audit_writer

    with audit_writer(write) as sink:
        result = run(sink)
    return result, [str(p) for p in sink.written]
