"""``doctor``: from a mismatch number to its cause (a pipeline bug, policy lag, or plain numerics).

Each detector is a small pure function over a sample of the run's sequences
(``sample.py``) and report's result; ``run.doctor`` runs them all and ranks
the findings (``document.DoctorDocument``).
"""

from .document import CAUSES, DoctorDocument, Finding
from .run import doctor

__all__ = ["CAUSES", "DoctorDocument", "Finding", "doctor"]
