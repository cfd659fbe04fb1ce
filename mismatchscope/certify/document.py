"""What ``certify --format json`` prints: the :class:`~.run.Verdict` as a typed document.

The same checks the Markdown and JUnit reports list (one per pairing, routes,
policy version), then each pairing's numbers, the routes and policy checks as
the library holds them, the scope the certificate holds for and the tokens it
covered. Its schema is ``docs/schemas/certify.json``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from ..documents import optional
from ..execution.compare import FieldRow, Status
from ..execution.contract import Contract
from ..formatting import fmt
from .compare import Difference, EarliestSummary, PairingResult, UlpBin
from .routes import RouteResult
from .rows import FullVocabResult
from .run import PolicyCheck, Verdict
from .scope import Coverage


def checks(v: Verdict) -> list[tuple[str, bool | None, str]]:
    """(name, passed, one-line detail); passed is None for a check this run cannot make."""
    out: list[tuple[str, bool | None, str]] = [(p.pairing.name, p.equal, pairing_line(p)) for p in v.pairings]
    out += [(p.name, None, f"not in this run (needs {p.left} and {p.right})") for p in v.absent]
    out.append(("routes", v.routes.passed, v.routes.status))
    out.append(("policy_version", v.policy.passed, v.policy.status))
    if v.identities is not None:
        out.append(("identities", v.identities.same, v.identities.sentence()))
    return out


def pairing_line(p: PairingResult) -> str:
    without = f"; {p.without}" if p.without else ""
    if p.equal:
        return f"all {p.tokens:,} pairs byte-equal in {p.dtype}{without}"
    return (
        f"{p.differing:,} of {p.tokens:,} pairs ({p.share:.2%}) differ in {p.dtype}; "
        f"ULP median {fmt(p.ulp_median)}, max {p.ulp_max:,}; stable K3 mean {p.k3_mean:.3g} (diagnostic){without}"
    )


@dataclass(frozen=True)
class CheckEntry:
    name: str
    passed: bool | None = field(metadata={"doc": "null: a check this run cannot make (a column or record it lacks)"})
    detail: str


@dataclass(frozen=True)
class EarliestEntry:
    sequence_id: int
    position: int = field(metadata={"doc": "the sequence's first differing completion position"})


@dataclass(frozen=True)
class PairingEntry:
    name: str
    left: str
    right: str
    equal: bool
    dtype: str = field(metadata={"doc": "the float width both sides recorded, whose bytes are compared"})
    dtype_note: str
    tokens: int
    differing: int
    share_differing: float
    ulp_histogram: list[UlpBin]
    ulp_median: float | None
    ulp_p99: float | None
    ulp_max: int | None
    max_abs_diff: float
    k3_stable_mean: float = field(metadata={"doc": "stable K3 in float64, mean over the tokens: a diagnostic only"})
    k3_stable_max: float
    first_differences: list[Difference]
    earliest_position: EarliestSummary | None
    earliest_by_sequence: list[EarliestEntry]
    tokens_without: int | None = field(
        default=None,
        metadata=optional(
            "tokens not compared because their shard lacks a column of the pairing (only some shards hold it)"
        ),
    )

    @classmethod
    def of(cls, p: PairingResult) -> PairingEntry:
        return cls(
            p.pairing.name,
            p.pairing.left,
            p.pairing.right,
            p.equal,
            p.dtype,
            p.dtype_note,
            p.tokens,
            p.differing,
            p.share,
            list(p.ulp_histogram),
            p.ulp_median,
            p.ulp_p99,
            p.ulp_max,
            p.max_abs_diff,
            p.k3_mean,
            p.k3_max,
            list(p.first),
            p.earliest_summary(),
            [EarliestEntry(s, pos) for s, pos in p.earliest],
            p.tokens_without,
        )


@dataclass(frozen=True)
class SideRow:
    """One provenance field, the sampler's value against the trainer's (null: not recorded)."""

    field: str
    label: str
    sampler: Any
    trainer: Any
    status: Status

    @classmethod
    def of(cls, r: FieldRow) -> SideRow:
        return cls(r.field, r.label, r.left, r.right, r.status)


@dataclass(frozen=True)
class CertifyDocument:
    run: str
    verdict: Literal["certified", "not certified"]
    certified: bool
    reasons: list[str] = field(metadata={"doc": "why the run does not certify, one line each; empty when it does"})
    checks: list[CheckEntry]
    pairings: list[PairingEntry]
    absent_pairings: list[str]
    routes: RouteResult
    policy_version: PolicyCheck
    scope: dict[str, Any] = field(
        metadata={"doc": "the stack the verdict holds for; 'unknown' where the run is silent"}
    )
    coverage: Coverage
    warnings: list[str]
    identities: Contract | None = field(
        default=None,
        metadata={"doc": "the identities both sides recorded, and those that differ; null for token shards alone"},
    )
    sides: list[SideRow] = field(
        default_factory=list,
        metadata={"doc": "the sampler's provenance against the trainer's, changed fields first (the scope, per side)"},
    )
    full_vocab: FullVocabResult | None = field(
        default=None,
        metadata=optional(
            "certify --full-vocab: whole log-prob rows compared through their digests, and where they part"
        ),
    )

    source: Verdict = field(kw_only=True, metadata={"json": False})
    """the verdict as the library holds it: what the tables, Markdown and JUnit list beyond the JSON."""
    seconds: float = field(default=0.0, kw_only=True, metadata={"json": False})
    """how long the certification took (the JUnit report's time)."""

    @classmethod
    def of(cls, v: Verdict, rows: FullVocabResult | None = None, seconds: float = 0.0) -> CertifyDocument:
        """The verdict's document; with ``--full-vocab``'s whole rows, a run whose rows part is not certified."""
        parted = rows is not None and not rows.equal
        reasons = [*v.reasons, f"full vocabulary: {rows.detail()}"] if parted and rows is not None else v.reasons
        certified = v.certified and not parted
        return cls(
            v.run,
            "certified" if certified else "not certified",
            certified,
            reasons,
            [CheckEntry(n, ok, d) for n, ok, d in checks(v)],
            [PairingEntry.of(p) for p in v.pairings],
            [p.name for p in v.absent],
            v.routes,
            v.policy,
            v.scope,
            v.coverage,
            v.warnings,
            v.identities,
            [SideRow.of(r) for r in v.sides],
            rows,
            source=v,
            seconds=seconds,
        )

    def cases(self) -> list[CheckEntry]:
        """Every check the reports list: the JSON's, and with ``--full-vocab`` the whole rows', which decides the
        verdict like the others."""
        rows = self.full_vocab
        return [*self.checks, *([] if rows is None else [CheckEntry("full_vocab", rows.equal, rows.detail())])]
