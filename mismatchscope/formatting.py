"""How a number is written in text: the one formatter every table, page, report and sentence uses.

``num`` is a table cell (thousands separators, short exponents); ``fmt`` a compact figure of a few significant
digits (the gate's cells, the pages, sentences); ``pct`` a share as a percentage; ``md_cell`` any text as one
Markdown table cell.
"""

from __future__ import annotations

import math
from typing import Any


def num(v: Any, digits: int = 4) -> str:
    """A table cell: ``-`` for none, integers with separators (47,650), 1e4..1e9 whole, else ``digits``
    significant digits with a short exponent outside 1e-3..1e4 (8.442e-5, not 8.442e-05)."""
    if v is None:
        return "-"
    if isinstance(v, str):
        return v
    if isinstance(v, int):
        return f"{v:,}"
    v = float(v)
    if v == 0:
        return "0"
    if 1e4 <= abs(v) < 1e9:  # 47,650 tokens/s reads at a glance; 4.765e4 makes the reader count
        return f"{v:,.0f}"
    if abs(v) >= 1e4 or abs(v) < 1e-3:  # 8.442e-5, not 8.442e-05: a column's character saved
        return f"{v:.{digits - 1}e}".replace("e-0", "e-").replace("e+0", "e").replace("e+", "e")
    return f"{v:.{digits}g}"


def pct(v: float | None) -> str:
    """A share as a percentage of 3 significant digits; ``-`` for none."""
    return "-" if v is None else f"{100 * v:.3g}%"


def fmt(v: float | None, digits: int = 4) -> str:
    """A compact figure: ``digits`` significant digits; ``-`` for none, ``nan``, ``inf`` and ``-inf`` as such."""
    if v is None:
        return "-"
    if isinstance(v, float) and math.isnan(v):
        return "nan"
    if isinstance(v, float) and math.isinf(v):
        return "inf" if v > 0 else "-inf"
    return f"{v:.{digits}g}"


def md_cell(text: str) -> str:
    """``text`` as one Markdown table cell: a ``|`` escaped, a line break a space."""
    return str(text).replace("|", "\\|").replace("\n", " ")
