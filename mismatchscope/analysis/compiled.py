"""The analysis pass's compiled loops (``_loops.c``), where the install built them.

The top-k bounds are a handful of operations per top-k list value, which
numpy can only run as a dozen passes over row-sized arrays per list column;
those passes compete with the Parquet decode for memory bandwidth, and they
were the largest share of a report's analysis. A small C extension (no
dependencies: the buffer protocol, the GIL released) runs them as one pass
over the rows, doing the same floating-point operations in the same order as
the numpy code, so every number is the same to the bit either way (where numpy's
float64 exp and log are the C library's: every CPU without AVX-512). It also
counts the exact quantiles' bins, which ``np.bincount`` can only do after
copying them to 64-bit integers and into fresh counts.

The extension is optional: without a C compiler the package installs without
it and the numpy code runs, more slowly. ``MISMATCHSCOPE_COMPILED=0`` (or
``false``, ``no``, ``off``) runs the numpy code even where it is built (to rule
the loops out, or to compare).
"""

from __future__ import annotations

import os
from types import ModuleType

try:
    from . import _loops
except ImportError:  # installed without a C compiler
    _loops = None

COMPILED_ENV = "MISMATCHSCOPE_COMPILED"
OFF = frozenset({"0", "false", "no", "off"})
"""values of ``COMPILED_ENV`` (any case) that turn the compiled loops off."""


def loops() -> ModuleType | None:
    """The compiled loops, or None: not built, or turned off by ``COMPILED_ENV``."""
    return None if os.environ.get(COMPILED_ENV, "").strip().lower() in OFF else _loops


def built() -> bool:
    """Whether the install built the compiled loops (whatever ``COMPILED_ENV`` says)."""
    return _loops is not None
