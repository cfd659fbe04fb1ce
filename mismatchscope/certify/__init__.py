"""Certify a zero-mismatch stack: byte-equal logprob pairs (and routes), or the first place they part.

Light core: numpy and pyarrow only.
"""

from .compare import PAIRING_NAMES, PAIRINGS, Pairing, PairingResult
from .run import Verdict, bit_equal, certified_or_false, certify_run

__all__ = [
    "PAIRINGS",
    "PAIRING_NAMES",
    "Pairing",
    "PairingResult",
    "Verdict",
    "bit_equal",
    "certified_or_false",
    "certify_run",
]
