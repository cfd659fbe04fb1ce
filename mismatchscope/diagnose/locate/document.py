"""The typed result of ``--locate`` (``OUT/locate.json``, ``locate`` in ``diagnose.json`` and in ``rescore --locate
--format json``)."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from pathlib import Path

from ...documents import flatten, optional
from ...probe.document import ProbeDocument

INTERRUPTED = "interrupted"
"""the status of a localisation a Ctrl-C stopped before it finished."""

MEASURE = (
    "per token: ||a - b|| / ||reference|| at a vector point, |a - b| (nats) at logprob; median and max over "
    "the sampled tokens"
)


@dataclass(frozen=True)
class Spread:
    median: float
    max: float


@dataclass(frozen=True)
class RouteFlips:
    """Share of sampled tokens whose top-k expert set differs, from the router logits of each side."""

    k: int
    sides: float = field(metadata={"doc": "sampler vs trainer"})
    sampler_vs_reference: float
    trainer_vs_reference: float


@dataclass(frozen=True)
class PointResult:
    point: str = field(metadata={"doc": "embed, layers.I.OP, final_norm, logits or logprob"})
    layer: int | None
    op: str
    width: int = field(metadata={"doc": "numbers per token at this point"})
    sides: Spread = field(metadata={"doc": "sampler vs trainer"})
    sampler_vs_reference: Spread
    trainer_vs_reference: Spread
    noise_floor: float = field(metadata={"doc": "min of the two sides' median difference from the reference"})
    bit_equal: bool = field(metadata={"doc": "every sampled value of the two sides identical in every bit"})
    growth: float | None = field(
        metadata={"doc": "sides' median over that of the point this one is computed from; inf from exactly 0"}
    )
    route_flips: RouteFlips | None = field(default=None, metadata=optional("router points of MoE layers"))


@dataclass(frozen=True)
class Verdict:
    first_difference: str | None = field(metadata={"doc": "first point where the sides differ in any bit"})
    first_parting: str | None = field(metadata={"doc": "first point where the sides part above the noise floor"})
    largest_growth: list[str]
    reading: str


@dataclass(frozen=True)
class LocateResult:
    sampler: str = field(metadata={"doc": "the sampler side: engine and dtype"})
    trainer: str
    reference: str
    sampler_note: str = field(metadata={"doc": "how the sampler side's points were captured (fused ops)"})
    sampler_closure: float | None = field(
        metadata={"doc": "vLLM: largest |captured logprob - the engine's own prompt logprob| (0: the chain closes)"}
    )
    token_budget: int
    tokens: int = field(metadata={"doc": "token positions captured"})
    sequences: list[str]
    capture_bytes: int = field(metadata={"doc": "memory the three captures held"})
    seconds: float
    measure: str
    points: list[PointResult]
    missing: dict[str, str] = field(metadata={"doc": "points not compared -> why"})
    verdict: Verdict


@dataclass(frozen=True)
class Localisation:
    path: str = field(metadata={"doc": "the localisation's own document, OUT/locate/locate.json"})
    result: LocateResult = field(metadata=flatten("the localisation (docs/schemas/locate.json)"))


@dataclass(frozen=True)
class LocatedRescore(ProbeDocument):
    """``rescore --locate --format json``: the rescore's document, and where its gap enters the forward pass."""

    locate: Localisation = field(metadata={"doc": "the localisation of the run's worst sequences: verdict, points"})


def with_localisation(doc: ProbeDocument, result: LocateResult, path: Path) -> LocatedRescore:
    """The rescore's document with ``rescore --locate``'s localisation, written at ``path``."""
    located = Localisation(str(path), result)
    return LocatedRescore(**{f.name: getattr(doc, f.name) for f in fields(doc)}, locate=located)
