"""``rescore --locate`` for people: the rescore's tables (:mod:`.probe_table`), then where its gap enters the
forward pass (:mod:`.locate_table`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from . import probe_table
from .locate_table import render_locate

if TYPE_CHECKING:
    from ..diagnose.locate.document import LocatedRescore


def render(console, doc: LocatedRescore) -> None:
    probe_table.render(console, doc)
    render_locate(console, doc.locate.result, "locate")
