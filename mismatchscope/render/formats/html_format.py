"""one self-contained HTML page (``--html FILE``): a file, never stdout; each document type that has one renders it in ``render/<type>_html.py``."""

from __future__ import annotations

from ..seam import Format

FORMAT = Format("html", stream=False)
