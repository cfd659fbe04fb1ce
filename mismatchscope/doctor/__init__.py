"""``doctor``: from a mismatch number to its cause (a pipeline bug, policy lag, or plain numerics).

Each cause is one module under ``causes/`` registered in ``causes.REGISTRY``
(its detector, its correction, its rivals); ``examine.examine`` reads them on
a sample of the run's sequences (``sample.py``), measures the share of the gap
each one's correction removes, and ranks them; ``verdict.decide`` says what
they add up to (``document.DoctorDocument``).
"""

from .causes import REGISTRY, cause_names
from .document import DoctorDocument, Finding
from .run import doctor, examine_result

__all__ = ["REGISTRY", "DoctorDocument", "Finding", "cause_names", "doctor", "examine_result"]
