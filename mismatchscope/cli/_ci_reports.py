"""The reports a CI reads (``--junit-xml``, ``--markdown`` and ``$GITHUB_STEP_SUMMARY``), written one way for every
command that gives a verdict: the same checks before any work, the same order of writes, the same lines on stderr.

The step summary is appended to, never replaced (a job's steps share it), and only when the variable names a file;
the Markdown file and the summary hold the same text.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from ._output import save

STEP_SUMMARY = "GITHUB_STEP_SUMMARY"


@dataclass(frozen=True)
class CiReports:
    """What the command line and the environment asked for; ``None`` where nothing is written."""

    junit_xml: str | None
    markdown: str | None
    summary: str | None

    @classmethod
    def asked(cls, junit_xml: str | None, markdown: str | None) -> CiReports:
        """The two options, and the step summary when ``$GITHUB_STEP_SUMMARY`` is set (an empty value is unset)."""
        return cls(junit_xml, markdown, os.environ.get(STEP_SUMMARY) or None)

    def outputs(self, *others: tuple[str | None, str]) -> list[tuple[str | None, str]]:
        """The files for ``outputs.check_all`` as ``(path, option)``; ``others`` (a command's own files, such as
        ``--html``) go before the step summary, so a bad path is named in the order the options are listed."""
        return [(self.junit_xml, "--junit-xml"), (self.markdown, "--markdown"), *others, (self.summary, STEP_SUMMARY)]

    def write(self, inputs, doc: Any) -> None:
        """Each report asked for, of the command's document: JUnit, then the Markdown file, then the summary
        appended. ``inputs`` (from ``check_all``) keeps a write from replacing a file the command read."""
        if self.junit_xml:
            save(doc, "junit", self.junit_xml, "--junit-xml", inputs)
        if self.markdown:
            save(doc, "markdown", self.markdown, "--markdown", inputs)
        if self.summary:
            save(doc, "markdown", self.summary, STEP_SUMMARY, inputs, append=True)
