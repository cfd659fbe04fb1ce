"""Numbers as the tables, pages and reports print them (the gate's and the HTML pages' cells)."""

from __future__ import annotations

import math


def fmt(v: float | None) -> str:
    """Compact numbers for tables: 4 significant digits."""
    if v is None:
        return "-"
    if isinstance(v, float) and math.isnan(v):
        return "nan"
    if isinstance(v, float) and math.isinf(v):
        return "inf" if v > 0 else "-inf"
    return f"{v:.4g}"


def md_cell(text: str) -> str:
    """``text`` as one Markdown table cell: a ``|`` escaped, a line break a space."""
    return str(text).replace("|", "\\|").replace("\n", " ")
