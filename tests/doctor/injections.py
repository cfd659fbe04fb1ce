"""What the doctor's tests inject into a run: the roundings a pipeline bug applies to its logprobs."""

from __future__ import annotations

import numpy as np


def bf16_round(x: np.ndarray) -> np.ndarray:
    """Round to nearest even on bfloat16's 7 mantissa bits (the upper half of a float32)."""
    b = x.astype(np.float32).view(np.uint32).astype(np.uint64)
    b = (b + 0x7FFF + ((b >> 16) & 1)) >> 16 << 16
    return b.astype(np.uint32).view(np.float32).astype(np.float64)
