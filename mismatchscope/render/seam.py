"""The one door every command's output goes through: a typed document, a format, and the renderer of the pair.

A command builds one typed document and hands it here with the format asked for: :func:`show` writes it on
stdout (``--format``), :func:`render` returns its text for a file (``--markdown``, ``--junit-xml``, ``--html``).
No command decides how a format looks, and none branches on it.

Two registries meet here:

* **formats**: one module each under ``render/formats/`` (its ``FORMAT``), loaded on first use, or a
  :class:`Format` given to :func:`register`. A format says whether ``--format`` may name it (``stream``) and may
  render every document itself (``any_document``: JSON is the document's own serialisation).
* **renderers**: the renderer of a document type in a format is the function ``render`` of the module
  ``render/<type>_<format>.py``, the type's name in snake case without its ``Document`` suffix
  (``GateDocument`` in Markdown: ``render/gate_markdown.py``); a subclass without one of its own takes its
  base's. Only the module asked for is imported, so a command pays for its own renderers and no other's.

A format a document has no renderer for, and a name no format has, are one-line usage errors, never a table.
"""

from __future__ import annotations

import importlib
import pkgutil
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..errors import UsageError


def _call(renderer: Callable[..., str], doc: Any) -> str:
    return renderer(doc)


@dataclass(frozen=True)
class Format:
    """An output format: its name, where it goes, and how its renderers are called."""

    name: str
    stream: bool
    """``--format`` may name it: written on stdout. Otherwise a file an option of its own names."""
    order: int = 100
    """its place in ``--format``'s list (the default first)."""
    call: Callable[[Callable[..., Any], Any], str] = _call
    """how a renderer of this format gives its text (the table format hands its renderers a console)."""
    any_document: Callable[[Any], str] | None = None
    """the renderer of a document that has none of its own in this format."""


_FORMATS: dict[str, Format] = {}
_LOADED = False


def register(fmt: Format) -> Format:
    """Add (or replace) a format: from then on ``--format`` and :func:`render` know it."""
    _FORMATS[fmt.name] = fmt
    return fmt


def _formats() -> dict[str, Format]:
    """Every format: the modules of ``render/formats/`` first, then any registered since."""
    global _LOADED
    if not _LOADED:
        from . import formats

        for m in pkgutil.iter_modules(formats.__path__):
            fmt = importlib.import_module(f"{formats.__name__}.{m.name}").FORMAT
            _FORMATS.setdefault(fmt.name, fmt)
        _LOADED = True
    return _FORMATS


def stream_formats() -> list[str]:
    """The formats ``--format`` takes, the default first."""
    return [f.name for f in sorted(_formats().values(), key=lambda f: (f.order, f.name)) if f.stream]


def renderer_module(doc_type: type, fmt: str) -> str:
    """The module that holds the renderer of ``doc_type`` in ``fmt`` (it may not exist)."""
    name = re.sub(r"Document$", "", doc_type.__name__)
    return f"{__package__}.{re.sub(r'(?<!^)(?=[A-Z])', '_', name).lower()}_{fmt}"


def _renderer(doc_type: type, fmt: str) -> Callable[..., Any] | None:
    for t in doc_type.__mro__[:-1]:  # a subclass without a renderer of its own takes its base's
        try:
            module = importlib.import_module(renderer_module(t, fmt))
        except ModuleNotFoundError as e:
            if e.name != renderer_module(t, fmt):  # the module is there but imports what is missing: a bug
                raise
            continue
        return module.render
    return None


def renders_extras(doc_type: type, fmt: str) -> bool:
    """Whether ``fmt`` renders a ``doc_type`` with a renderer of its own, which may show what the document's JSON
    leaves out (a table's last line, say); a format that writes the document's own serialisation needs nothing
    beyond it, so a command can skip gathering the rest."""
    return _renderer(doc_type, fmt) is not None


def format_of(name: str) -> Format:
    fmt = _formats().get(name)
    if fmt is None:
        raise UsageError(f"unknown output format {name!r}", hint=f"use one of {', '.join(stream_formats())}")
    return fmt


def render(doc: Any, fmt: str) -> str:
    """The text of ``doc`` in the format ``fmt``."""
    f = format_of(fmt)
    renderer = _renderer(type(doc), fmt)
    if renderer is not None:
        return f.call(renderer, doc)
    if f.any_document is not None:
        return f.any_document(doc)
    what = renderer_module(type(doc), "").rpartition(".")[2].rstrip("_").replace("_", " ")
    raise UsageError(f"there is no {fmt} output of {what}", hint=f"use one of {', '.join(_has(doc, f.stream))}")


def _has(doc: Any, stream: bool) -> list[str]:
    """The formats of the same kind (stdout's, or files') that render ``doc``."""
    names = sorted(n for n, f in _formats().items() if f.stream == stream)
    return [n for n in names if _formats()[n].any_document or _renderer(type(doc), n)]


def show(doc: Any, fmt: str) -> None:
    """``doc`` in the format ``fmt`` on stdout: the data a command prints, and nothing else."""
    sys.stdout.write(render(doc, fmt))
    sys.stdout.flush()
