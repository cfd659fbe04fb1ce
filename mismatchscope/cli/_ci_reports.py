"""The reports a CI reads (``--junit-xml``, ``--markdown`` and ``$GITHUB_STEP_SUMMARY``), written one way for every
command that gives a verdict: the same checks before any work, the same order of writes, the same lines on stderr.

The step summary is appended to, never replaced (a job's steps share it), and only when the variable names a file;
the Markdown is rendered once for both the ``--markdown`` file and the summary.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass

from ._streams import info

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

    def write(self, inputs, junit: Callable[[], str], markdown: Callable[[], str]) -> None:
        """Render and write each report asked for: JUnit, then the Markdown file, then the summary appended.

        ``junit`` and ``markdown`` render only when their report is asked for; ``inputs`` (from ``check_all``)
        keeps a write from replacing a file the command read.
        """
        from ..outputs import write_text

        if self.junit_xml:
            write_text(self.junit_xml, junit(), "--junit-xml", inputs=inputs)
            info(f"wrote {self.junit_xml}")
        if not (self.markdown or self.summary):
            return
        text = markdown()
        if self.markdown:
            write_text(self.markdown, text, "--markdown", inputs=inputs)
            info(f"wrote {self.markdown}")
        if self.summary:
            write_text(self.summary, text + "\n", STEP_SUMMARY, append=True, inputs=inputs)
