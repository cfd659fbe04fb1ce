"""What ``diagnose --format json`` prints (and ``OUT/diagnose.json`` holds): a typed document.

The sections keep the shape :func:`~.run.run_diagnose` builds them in; the
document fixes which sections there are, their types, and ``schema_version``.
A gap's ``metrics`` are the report's token metrics (``metrics.CATALOG``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..documents import optional


@dataclass
class DiagnoseDocument:
    checkpoint: str
    out: str
    device: str = field(metadata={"doc": "cuda or cpu"})
    reference: dict[str, Any] = field(metadata={"doc": "the float64 reference forward: dtype, note, seconds"})
    baseline: dict[str, Any] = field(metadata={"doc": "the configuration as given: settings, metrics, throughput"})
    decomposition: dict[str, Any] = field(
        metadata={"doc": "the gap split by the reference: total, sampler and trainer sides, their shares"}
    )
    variants: list[dict[str, Any]]
    determinism: dict[str, Any]
    wall_s: float
    no_effect: list[str]
    pareto_front: list[str]
    reading: str
    zero_price: list[dict[str, Any]] = field(
        default_factory=list,
        metadata={
            "doc": "each certified configuration's throughput against the fastest uncertified one "
            "(cost_x: how many times slower; empty when none certifies)"
        },
    )
    plots: dict[str, str] | None = field(default=None, metadata=optional("the pictures --plots or --html wrote"))
    html: str | None = field(default=None, metadata=optional("the page --html wrote"))
    locate: list[dict[str, Any]] | None = field(
        default=None,
        metadata=optional("--locate: per configuration, where the gap enters (docs/schemas/locate.json, each entry)"),
    )

    @classmethod
    def of(cls, payload: dict[str, Any]) -> DiagnoseDocument:
        """The document of a finished run's payload (every section filled, ``rank`` and ``finish`` applied)."""
        return cls(**payload)  # a section the document does not declare is a TypeError, not a silent drop
