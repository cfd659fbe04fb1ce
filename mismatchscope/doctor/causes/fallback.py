"""``fallback``: a side whose numerics ran otherwise than asked, or whose engine logged a fallback (the run's
provenance). The program is the same on both sides but not the one meant: a finding beside the reading of the
numbers, listed after it, that never sets the verdict. The reading is ``doctor/contract.py``'s."""

from __future__ import annotations

from ..contract import fallback_finding
from ..document import Finding
from ..registry import Cause, Context


def detect(ctx: Context) -> Finding:
    return fallback_finding(ctx.extra.get("provenance"))


CAUSE = Cause("fallback", detect, sample_scope=False, reading=False)
