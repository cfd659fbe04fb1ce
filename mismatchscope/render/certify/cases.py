"""The checks every certify report lists, ``--full-vocab``'s whole-row check among them."""

from __future__ import annotations

from ...certify.document import checks
from ...certify.rows import FullVocabResult
from ...certify.run import Verdict


def cases(v: Verdict, rows: FullVocabResult | None) -> list[tuple[str, bool | None, str]]:
    """The checks, and with ``--full-vocab`` the whole-row check: it decides the verdict like the others."""
    extra = [] if rows is None else [("full_vocab", rows.equal, rows.detail())]
    return [*checks(v), *extra]


def certified(v: Verdict, rows: FullVocabResult | None) -> bool:
    return v.certified and (rows is None or rows.equal)
