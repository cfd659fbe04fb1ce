"""``report`` and ``compare-masks``: one run's analysis as each command prints it (the library call behind each)."""

from .masks_run import masks_document, readings_document
from .report_documents import MasksDocument, ReportDocument
from .report_options import MasksOptions, ReportOptions
from .report_run import report_document

__all__ = [
    "MasksDocument",
    "MasksOptions",
    "ReportDocument",
    "ReportOptions",
    "masks_document",
    "readings_document",
    "report_document",
]
