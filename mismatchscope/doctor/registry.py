"""What a cause is to ``doctor``: one registered object with a detector, a correction and its rivals.

A cause module (``causes/<name>.py``) builds one :class:`Cause` and the
registry (``causes/__init__.py``'s ``REGISTRY``) lists them in the order the
detectors run. The examination (``examine.py``) only ever goes through these
objects: it runs each detector on the pairs, applies a detected cause's
correction to measure the share of the gap it explains, fits the rivals
a cause names against it, and reads every other cause again on the pairs
with that correction applied.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from ..analysis.results import Report
from .document import ExplainedShare, Finding, RivalFit
from .sample import Sample


@dataclass(frozen=True)
class Context:
    """Everything a detector may read: the (possibly corrected) sample and the run as a whole."""

    sample: Sample
    report: Report
    """read for its sums, tails and breakdowns alone: ``doctor`` runs a headline pass
    (``AnalysisRequest.headline``), whose exact quantiles, top-k bounds and score centering are None."""
    run: dict[str, Any] | None
    """the run's metadata (manifest, file metadata)."""
    diagnose: dict[str, Any] | None = None
    """a ``diagnose`` document, when doctor reads a diagnose output."""
    routes: Any = None
    """the run's ``routing.io.RoutesRun`` (MoE runs with routes/), or None."""
    corrected: tuple[str, ...] = ()
    """the causes whose corrections this sample carries, in the order applied."""
    subset: bool = False
    """True when the sample holds only the sequences a cause was suspected in (see ``examine``)."""
    extra: dict[str, Any] = field(default_factory=dict)

    def on(self, sample: Sample, corrected: tuple[str, ...] | None = None, subset: bool | None = None) -> Context:
        """The same run with another sample."""
        return replace(
            self,
            sample=sample,
            corrected=self.corrected if corrected is None else corrected,
            subset=self.subset if subset is None else subset,
        )


Detector = Callable[[Context], Finding]
Correction = Callable[[Context, Finding], Sample]
"""a detected finding's correction: the sample with the cause undone (rows dropped or one side's values moved)."""
ShareModel = Callable[[Context, Finding], ExplainedShare | None]
"""for a cause whose effect cannot be undone row by row: the share of the gap it explains, from a model."""
RivalFitter = Callable[[Context, Finding, Finding], RivalFit | None]
"""fits the rival's model to the data this finding rests on: None when the rival cannot be fitted here."""
Screen = Callable[[Sample], np.ndarray]
"""the ids of the sequences where the cause's signature shows, one sequence at a time (a scale-free statistic
per sequence): where ``examine`` looks for the cause confined to a few sequences."""


@dataclass(frozen=True)
class Cause:
    """One cause ``doctor`` can name."""

    name: str
    detect: Detector
    correct: Correction | None = None
    share: ShareModel | None = None
    """used where ``correct`` is None (a model-based share), or to describe what the correction measures."""
    correction: str = ""
    """what the correction does, in words (``ExplainedShare.how``)."""
    rivals: dict[str, RivalFitter] = field(default_factory=dict)
    """rival cause -> a fit of both models on this finding's data; the one that fits worse is dropped."""
    sample_scope: bool = True
    """False for a cause read from the run as a whole (routes, a diagnose document, the provenance): it is not
    read again on corrected pairs, on a subset of sequences or on one turn's rows."""
    reread: bool = True
    """read again on the pairs other causes' corrections leave; False for a cause read once, on the values as
    written (another cause's correction moves values off a grid or a filler)."""
    subset_rival: bool = False
    """a cause that can be confined to a few sequences (a join that mixes two writers, one worker's bug): it is
    tried on the sequences its ``screen`` names, and on those that look misjoined or far off the rest, before
    they are called misjoined."""
    screen: Screen | None = None
    leads: bool = False
    """read before the numbers: when found, it is ranked first and sets the verdict whatever the rest explains (two
    sides that are not one program: no numerical reading applies until they are)."""
    reading: bool = True
    """a reading of the gap; False for a finding beside the numbers (a side that ran otherwise than asked) that
    is listed after the readings and never sets the verdict."""
