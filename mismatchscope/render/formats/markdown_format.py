"""Markdown (``--markdown FILE``, a pull-request comment or the GitHub step summary): a file, never stdout; each document type that has one renders it in ``render/<type>_markdown.py``."""

from __future__ import annotations

from ..seam import Format

FORMAT = Format("markdown", stream=False)
