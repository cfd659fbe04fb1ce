"""``--format table``: rich tables for people. A document's table renderer draws on a console
(``render(console, doc)``); the text it drew, at the output's width, is what the seam writes."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..seam import Format


def _drawn(renderer: Callable[..., Any], doc: Any) -> str:
    from ..consoles import recording_console

    console, text = recording_console()
    renderer(console, doc)
    return text()


FORMAT = Format("table", stream=True, order=0, call=_drawn)
