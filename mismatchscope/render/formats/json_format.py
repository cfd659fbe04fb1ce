"""``--format json``: every document as its own serialisation (``documents.json_text``), for machines; the one
place a command's JSON is written."""

from __future__ import annotations

from typing import Any

from ..seam import Format


def _json(doc: Any) -> str:
    from ...documents import json_text

    return json_text(doc)


FORMAT = Format("json", stream=True, order=1, any_document=_json)
