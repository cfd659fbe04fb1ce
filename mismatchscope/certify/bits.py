"""Logprobs as the bytes a side recorded: which float width, bit equality, ULP distance, hex.

Every writer of a run (``probe``, ``import``, the Recorder) stores logprobs in
float64 columns, but the engines compute them in float32 (vLLM returns its
float32 logprobs as Python floats; the transformers paths upcast logits to
float32 before the log-softmax). A float32 widened to float64 is exact, so the
float32 bytes a side produced are recovered by narrowing back, and comparing
those is the claim "the FP32 logprob bytes agree". A column whose values do
not all narrow exactly holds genuine float64 values and is compared as such.

The distance in units in the last place (ULP) counts how many representable
values of the compared width lie between the two numbers: the size of a
difference on the float grid, independent of the magnitude of the logprob.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

FLOAT32 = "float32"
FLOAT64 = "float64"
_INT = {FLOAT32: np.int32, FLOAT64: np.int64}
_FLOAT = {FLOAT32: np.float32, FLOAT64: np.float64}


@dataclass(frozen=True)
class Width:
    """The float width a pair is compared in, and why (one line for the verdict)."""

    dtype: str
    note: str


def narrows_exactly(values: np.ndarray) -> bool:
    """True when every finite value of a float64 column is a float32 widened exactly."""
    finite = values[np.isfinite(values)]
    with np.errstate(over="ignore"):
        return bool(np.array_equal(finite.astype(np.float32).astype(np.float64), finite))


def recorded_width(left: np.ndarray, right: np.ndarray, left_name: str, right_name: str) -> Width:
    """float32 when both sides hold float32 values (the engines' width), float64 otherwise."""
    l32, r32 = narrows_exactly(left), narrows_exactly(right)
    if l32 and r32:
        return Width(
            FLOAT32,
            "float64 columns holding float32 values (each widens exactly): the float32 bit patterns are compared",
        )
    wide = [n for n, ok in ((left_name, l32), (right_name, r32)) if not ok]
    return Width(
        FLOAT64,
        f"{' and '.join(wide)} hold(s) values with no exact float32 form: the float64 bit patterns are compared",
    )


def as_width(values: np.ndarray, dtype: str) -> np.ndarray:
    return np.ascontiguousarray(values, dtype=_FLOAT[dtype])


def bits(values: np.ndarray, dtype: str) -> np.ndarray:
    """The raw bit patterns (signed integers of the same width)."""
    return as_width(values, dtype).view(_INT[dtype])


def ulp_distance(left: np.ndarray, right: np.ndarray, dtype: str) -> np.ndarray:
    """Representable values between ``left`` and ``right`` in ``dtype`` (finite inputs), as int64.

    The sign-magnitude bit patterns are mapped onto one ordered integer line
    (negative floats mirrored below zero), where the distance is a difference.
    +0 and -0 map to the same point: their bytes differ, their distance is 0.
    """
    a = bits(left, dtype).astype(np.int64)
    b = bits(right, dtype).astype(np.int64)
    top = np.int64(np.iinfo(_INT[dtype]).max)
    a = np.where(a < 0, -(a & top), a)
    b = np.where(b < 0, -(b & top), b)
    return np.abs(a - b)


def hex_value(value: float, dtype: str) -> str:
    """The bytes of one value as hex, ``0xc0490fdb`` (float32) or 16 digits (float64)."""
    raw = int(np.array([value], dtype=_FLOAT[dtype]).view(_INT[dtype])[0])
    width = 8 if dtype == FLOAT32 else 16
    return f"0x{raw & ((1 << (4 * width)) - 1):0{width}x}"


def decimal_value(value: float, dtype: str) -> str:
    """The shortest decimal that reads back as exactly this value in ``dtype``."""
    return np.format_float_positional(_FLOAT[dtype](value), unique=True, trim="-") if np.isfinite(value) else str(value)


def stable_k3(left: np.ndarray, right: np.ndarray) -> np.ndarray:
    """``expm1(d) - d`` with ``d = left - right`` in float64: no cancellation near 0, so a
    1-ULP gap shows as ~1e-15 instead of rounding to 0. A diagnostic, never a criterion."""
    d = np.asarray(left, dtype=np.float64) - np.asarray(right, dtype=np.float64)
    return np.expm1(d) - d
