"""``certify --format json``: the typed document, with ``--full-vocab``'s whole-row result when it was asked for."""

from __future__ import annotations

from typing import Any

from ...certify.rows import FullVocabResult
from ...certify.run import Verdict


def payload(v: Verdict) -> dict[str, Any]:
    """``certify --format json``: the typed document (``certify/document.py``), ``schema_version`` first."""
    from ...certify.document import CertifyDocument
    from ...documents import document

    return document(CertifyDocument.of(v))


def with_rows(doc: dict, rows: FullVocabResult | None) -> dict:
    """The document with the whole-row result; a run whose rows part is not certified."""
    if rows is None:
        return doc
    from ...documents import to_json

    out = {**doc, "full_vocab": to_json(rows)}
    if not rows.equal:
        out.update(
            certified=False, verdict="not certified", reasons=[*doc["reasons"], f"full vocabulary: {rows.detail()}"]
        )
    return out
