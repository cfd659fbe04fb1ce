"""JUnit XML (``--junit-xml FILE``: one test case per check, for a CI's test report): a file, never stdout; each document type that has one renders it in ``render/<type>_junit.py``."""

from __future__ import annotations

from ..seam import Format

FORMAT = Format("junit", stream=False)
