"""A command's document in the files its options name (``--markdown``, ``--html``, ...), through the output seam
(``render.seam``; stdout is ``render.seam.show``)."""

from __future__ import annotations

from typing import Any

from ._streams import info


def save(
    doc: Any, fmt: str, path: Any, option: str, inputs: Any = None, *, append: bool = False, said: str = ""
) -> None:
    """``doc`` in the format ``fmt`` written to ``path`` (``option`` names it in an error), and a line saying so
    (``said``: what it holds); ``inputs`` (``outputs.check_all``) keeps the write from replacing a file the
    command read. ``append``: added to the file (a CI's step summary), silently."""
    from ..outputs import write_text
    from ..render.seam import render

    write_text(path, render(doc, fmt) + ("\n" if append else ""), option, append=append, inputs=inputs)
    if not append:
        info(f"wrote {path} {said}" if said else f"wrote {path}")


def save_pictures(pictures: list, directory: str, inputs: Any = None) -> None:
    """``--plots DIR``: each picture as ``DIR/<name>.png``, and a line for each."""
    from pathlib import Path

    from ..render.pictures import write_pngs

    for p in write_pngs(pictures, Path(directory), inputs):
        info(f"wrote {p}")
