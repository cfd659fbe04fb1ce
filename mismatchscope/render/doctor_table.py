"""``doctor``'s findings for people: a table that reads whole at 80 columns (:mod:`.doctor`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .doctor import doctor_tables as render

if TYPE_CHECKING:
    from ..doctor.document import DoctorDocument

__all__ = ["DoctorDocument", "render"]
