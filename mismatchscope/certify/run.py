"""``certify``: does every logprob pair of a run agree byte for byte, and if not, where do they part?

A run certifies when every pairing it holds (trainer vs sampler decode,
trainer vs sampler prefill, sampler prefill vs decode) is byte-equal on every
token in the recorded float width, every value is finite, there is at least
one token, the routes agree (or were replayed) on an MoE model, and, where
the run records a policy version per side, both sides used the same one.
There is no threshold anywhere: a gap of one ULP fails like a gap of one nat.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..documents import json_edge
from ..errors import InputError, UsageError
from ..execution.compare import FieldRow
from ..execution.contract import Contract
from .compare import (
    PAIRING_NAMES,
    PAIRINGS,
    SHOW_FIRST,
    Pairing,
    PairingResult,
    compare,
)
from .load import Loaded, load
from .routes import RouteResult, check_routes
from .scope import Coverage, scope_of


@dataclass
class PolicyCheck:
    status: str
    passed: bool | None
    """None where the run gives no way to check it."""


@dataclass
class Verdict:
    run: str
    pairings: list[PairingResult]
    absent: list[Pairing]
    """pairings this run cannot show (a column it did not record)."""
    routes: RouteResult
    policy: PolicyCheck
    scope: dict[str, Any]
    coverage: Coverage
    warnings: list[str] = field(default_factory=list)
    identities: Contract | None = None
    """whether the two sides are one program (their provenance); None where the run says nothing of it."""
    sides: list[FieldRow] = field(default_factory=list)
    """the sampler's provenance against the trainer's, changed fields first: the scope as the two sides ran it."""

    @property
    def reasons(self) -> list[str]:
        """Why the run does not certify: empty when it does."""
        out = [
            f"{p.pairing.title}: {p.differing:,} of {p.tokens:,} pairs differ in their {p.dtype} bytes"
            for p in self.pairings
            if not p.equal
        ]
        if self.routes.passed is False:
            out.append(f"routes: {self.routes.status}")
        if self.policy.passed is False:
            out.append(f"policy version: {self.policy.status}")
        if self.identities is not None and self.identities.same is False:
            out.append(f"identities: {self.identities.sentence()}")
        return out

    @property
    def certified(self) -> bool:
        return not self.reasons

    @property
    def verdict(self) -> str:
        return "certified" if self.certified else "not certified"


def certify_run(
    path: str | os.PathLike,
    mapping: Mapping[str, str] | None = None,
    pairings: list[str] | None = None,
    show: int = SHOW_FIRST,
) -> Verdict:
    """The verdict on one run (a probe run, an import, a Recorder run, or token shards)."""
    chosen = _chosen(pairings)
    loaded = load(path, mapping)
    manifest = _manifest(loaded.root)
    have = set(loaded.tokens.logprobs)
    present = [p for p in chosen if p.left in have and p.right in have]
    absent = [p for p in chosen if p not in present]
    if not present:
        lacking = sorted({c for p in absent for c in (p.left, p.right)} - have)
        raise UsageError(
            f"{path}: none of the pairings asked for is in this run: "
            f"{', '.join(p.name for p in absent)} need{'s' if len(absent) == 1 else ''} the column "
            f"{', '.join(lacking)}, which it does not hold",
            hint="record the sampler's prefill logprobs with probe --sampler-prefill",
        )
    results = [compare(p, loaded.tokens, show) for p in present]
    warnings = list(loaded.source.warnings)  # an incomplete run, a run read unchecked: as report says them
    identities, sides = _sides(manifest)
    return Verdict(
        str(path),
        results,
        absent,
        check_routes(loaded.root, manifest, loaded.tokens, show),
        _policy(loaded, manifest),
        scope_of(manifest, loaded.source.run_config),
        Coverage.of(loaded.tokens),
        warnings,
        identities,
        sides,
    )


def _sides(manifest: Mapping[str, Any] | None) -> tuple[Contract | None, list[FieldRow]]:
    """The two sides' identities compared, and their whole provenance side by side: a certificate says "one
    program" only when both sides ran the same weights, tokenizer, chat template and sampling parameters."""
    if manifest is None:
        return None, []
    from ..execution.compare import sides
    from ..execution.contract import contract
    from ..execution.read import of_manifest

    prov = of_manifest("", dict(manifest)).provenance
    return contract(prov), sides(prov)


@json_edge
def _manifest(root: Path | None) -> dict[str, Any] | None:
    """The run's manifest; a run without one has none, and one whose manifest is there but unreadable is refused:
    the verdict's scope and policy come from it, and an "unknown" scope is no certificate of a stack."""
    from ..rundir import read_manifest
    from ..rundir.layout import MANIFEST

    if root is None:
        return None
    manifest = read_manifest(root)
    if manifest is None and (root / MANIFEST).exists():
        raise InputError(
            f"{root / MANIFEST}: the run's manifest cannot be read (truncated or damaged): a certificate holds for "
            "the stack the manifest records",
            hint="restore the run from a copy",
        )
    return manifest


def bit_equal(path: str | os.PathLike, mapping: Mapping[str, str] | None = None) -> bool:
    """True when the run certifies: every pairing it holds byte-equal, routes and policy version agreeing."""
    return certify_run(path, mapping, show=0).certified


def certified_or_false(path: str | os.PathLike) -> bool:
    """:func:`bit_equal`, with a run that cannot be certified at all (NaN, no token) counted as not certified:
    for tables that mark many runs, where one bad run must not stop the others."""
    from ..errors import MismatchscopeError

    try:
        return bit_equal(path)
    except MismatchscopeError:
        return False


def _chosen(names: list[str] | None) -> list[Pairing]:
    if not names:
        return list(PAIRINGS)
    unknown = [n for n in names if n not in PAIRING_NAMES]
    if unknown:
        raise UsageError(f"unknown pairing {unknown[0]!r}", hint=f"use one of {', '.join(PAIRING_NAMES)}")
    return [p for p in PAIRINGS if p.name in names]


def _policy(loaded: Loaded, manifest: Mapping[str, Any] | None) -> PolicyCheck:
    """Both sides on one policy version: per token where the run records steps, else per run from the manifest."""
    steps = loaded.steps
    if len(steps) == 2:
        t = loaded.tokens
        partial = t.present.get("steps")
        recorded = partial.rows if partial is not None else np.ones(len(t), bool)
        differ = recorded & (steps["sampler_step"] != steps["trainer_step"])
        if differ.any():
            i = int(np.flatnonzero(differ)[0])
            return PolicyCheck(
                f"{int(differ.sum()):,} of {int(recorded.sum()):,} tokens were sampled and scored at different steps "
                f"(first: sequence {t.sequence_id[i]} position {t.position[i]}, sampler step "
                f"{steps['sampler_step'][i]}, trainer step {steps['trainer_step'][i]})",
                False,
            )
        if partial is not None:
            return PolicyCheck(
                "every token's sampler_step equals its trainer_step where the run records them "
                f"({partial.said('sampler_step and trainer_step')})",
                True,
            )
        return PolicyCheck("every token's sampler_step equals its trainer_step", True)
    ckpt = ((manifest or {}).get("config") or {}).get("trainer_checkpoint")
    if isinstance(ckpt, dict) and "same_as_sampler" in ckpt:
        if ckpt["same_as_sampler"]:
            return PolicyCheck("one checkpoint on both sides (the probe scored with the sampler's weights)", True)
        return PolicyCheck(
            f"the trainer scored with other weights ({ckpt.get('path')}) than the sampler "
            "sampled with: a policy-lag run compares two policies",
            False,
        )
    lag = declared_lag(manifest, loaded.source.run_config)
    if lag is not None:
        return PolicyCheck(f"the run records policy lag: {lag}", False)
    return PolicyCheck(
        "not checked: the run records no sampler_step and trainer_step per token, nor which weights each side used",
        None,
    )


def declared_lag(manifest: Mapping[str, Any] | None, file_meta: Mapping[str, Any] | None) -> str | None:
    """Why the trainer's weights were not the sampler's, where the run says so and gives no per-token steps to
    check it: an import of an asynchronous trainer (prime-rl's semantics), a rescore of one (its ``imported``
    semantics), a probe scored with ``--trainer-checkpoint``. Byte-equal pairs of two policies prove nothing
    about one stack, so such a run cannot certify."""
    from ..analysis.yardsticks import policy_lag

    for doc in (manifest, file_meta):
        if not isinstance(doc, Mapping):
            continue
        cfg = doc.get("config")
        imported = cfg.get("imported") if isinstance(cfg, Mapping) else None
        for part in (doc, cfg, imported):
            note = policy_lag(dict(part)) if isinstance(part, Mapping) else None
            if note:
                return note
    return None
