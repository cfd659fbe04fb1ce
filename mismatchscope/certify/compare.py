"""One pairing of logprob columns compared byte for byte, and where it parts when it does.

Nothing here has a threshold: a pair is equal when its bytes are, and every
other number (the share that differ, the ULP distances, K3) describes how a
pairing that failed failed.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .bits import decimal_value, hex_value, recorded_width, stable_k3, ulp_distance

ULP_BINS: tuple[tuple[int, int], ...] = (
    (0, 0),
    (1, 1),
    (2, 2),
    (3, 4),
    (5, 16),
    (17, 256),
    (257, 65536),
    (65537, 1 << 62),
)
"""ULP classes of the distance histogram; 0 ULP with differing bytes is +0 against -0."""
SHOW_FIRST = 10


@dataclass(frozen=True)
class EarliestSummary:
    sequences: int = field(metadata={"doc": "sequences in which the pairing parts somewhere"})
    of: int = field(metadata={"doc": "sequences compared"})
    min: int
    median: float
    max: int
    at_position_0: int


@dataclass(frozen=True)
class Pairing:
    """Two logprob columns of one token that a zero-mismatch stack must make byte-equal."""

    name: str
    left: str
    """the side whose logprob is the numerator of the ratio (``d = left - right``)."""
    right: str
    title: str


PAIRINGS: tuple[Pairing, ...] = (
    Pairing("trainer_vs_sampler_decode", "trainer_logprob", "sampler_logprob", "trainer vs sampler decode"),
    Pairing("trainer_vs_sampler_prefill", "trainer_logprob", "sampler_prefill_logprob", "trainer vs sampler prefill"),
    Pairing("prefill_vs_decode", "sampler_prefill_logprob", "sampler_logprob", "sampler prefill vs sampler decode"),
    Pairing("trainer_vs_training_forward", "trainer_logprob", "trainer_forward_logprob", "trainer vs training forward"),
    Pairing("sampler_vs_training_forward", "sampler_logprob", "trainer_forward_logprob", "sampler vs training forward"),
)
PAIRING_NAMES = tuple(p.name for p in PAIRINGS)


@dataclass(frozen=True)
class Partial:
    """A column only some shards of the run hold: the token rows that have it."""

    rows: np.ndarray
    """bool per token row."""
    shards_without: int
    shards: int

    def said(self, what: str) -> str:
        """ "N tokens without WHAT (in S of T shards) not checked"."""
        n = int((~self.rows).sum())
        return f"{n:,} tokens without {what} (in {self.shards_without} of {self.shards} shards) not checked"


@dataclass(frozen=True)
class Tokens:
    """The certified tokens: their keys, in (sequence, position) order, and the logprob columns present."""

    sequence_id: np.ndarray
    position: np.ndarray
    token_id: np.ndarray
    logprobs: dict[str, np.ndarray]
    present: dict[str, Partial] = field(default_factory=dict)
    """the columns only some shards hold (``"steps"``: both policy steps), and the rows that hold each."""

    def __len__(self) -> int:
        return len(self.sequence_id)

    def rows_of(self, *columns: str) -> np.ndarray | None:
        """The rows that hold every one of ``columns``; None when every row does."""
        partial = [self.present[c].rows for c in columns if c in self.present]
        return np.logical_and.reduce(partial) if partial else None

    def only(self, rows: np.ndarray) -> Tokens:
        return Tokens(
            self.sequence_id[rows],
            self.position[rows],
            self.token_id[rows],
            {c: v[rows] for c, v in self.logprobs.items()},
        )


@dataclass
class Difference:
    sequence_id: int
    position: int
    token_id: int
    left: float
    right: float
    left_hex: str
    right_hex: str
    left_decimal: str
    right_decimal: str
    ulp: int


@dataclass(frozen=True)
class UlpBin:
    ulp: str = field(metadata={"doc": "a distance in units in the last place, or a range of them (lo-hi, >N)"})
    tokens: int


@dataclass
class PairingResult:
    pairing: Pairing
    dtype: str
    dtype_note: str
    tokens: int
    differing: int
    ulp_histogram: list[UlpBin] = field(default_factory=list)
    ulp_median: float | None = None
    ulp_p99: float | None = None
    ulp_max: int | None = None
    max_abs_diff: float = 0.0
    k3_mean: float = 0.0
    """stable K3 in float64, mean over the pairing's tokens: a diagnostic, never a criterion."""
    k3_max: float = 0.0
    first: list[Difference] = field(default_factory=list)
    sequences: int = 0
    sequences_parting: int = 0
    earliest: list[tuple[int, int]] = field(default_factory=list)
    """(sequence_id, earliest differing position) for every sequence that parts."""
    without: str | None = None
    """where some shards lack a column of the pairing: how many tokens were not compared, and why."""
    tokens_without: int | None = None

    @property
    def equal(self) -> bool:
        return self.differing == 0

    @property
    def share(self) -> float:
        return self.differing / self.tokens if self.tokens else 0.0

    def earliest_summary(self) -> EarliestSummary | None:
        if not self.earliest:
            return None
        pos = np.array([p for _, p in self.earliest])
        return EarliestSummary(
            sequences=self.sequences_parting,
            of=self.sequences,
            min=int(pos.min()),
            median=float(np.median(pos)),
            max=int(pos.max()),
            at_position_0=int((pos == 0).sum()),
        )


def compare(pairing: Pairing, tokens: Tokens, show: int = SHOW_FIRST) -> PairingResult:
    """Byte-compare ``pairing`` over the tokens that hold both its columns (finite values only: the caller
    refused the others); those without one are counted, and said."""
    rows = tokens.rows_of(pairing.left, pairing.right)
    if rows is None:
        return _compare(pairing, tokens, show)
    out = _compare(pairing, tokens.only(rows), show)
    out.tokens_without = int((~rows).sum())
    out.without = "; ".join(tokens.present[c].said(c) for c in (pairing.left, pairing.right) if c in tokens.present)
    return out


def _compare(pairing: Pairing, tokens: Tokens, show: int) -> PairingResult:
    left, right = tokens.logprobs[pairing.left], tokens.logprobs[pairing.right]
    width = recorded_width(left, right, pairing.left, pairing.right)
    from .bits import bits

    differ = bits(left, width.dtype) != bits(right, width.dtype)
    k3 = stable_k3(left, right)
    out = PairingResult(
        pairing,
        width.dtype,
        width.note,
        len(tokens),
        int(differ.sum()),
        sequences=len(np.unique(tokens.sequence_id)),
        k3_mean=float(k3.mean()) if len(k3) else 0.0,
        k3_max=float(k3.max()) if len(k3) else 0.0,
    )
    if not out.differing:
        return out
    idx = np.flatnonzero(differ)
    ulp = ulp_distance(left[idx], right[idx], width.dtype)
    out.ulp_histogram = _ulp_histogram(ulp)
    out.ulp_median, out.ulp_p99 = float(np.median(ulp)), float(np.quantile(ulp, 0.99))
    out.ulp_max = int(ulp.max())
    out.max_abs_diff = float(np.abs(left[idx] - right[idx]).max())
    out.first = _first(tokens, left, right, idx[:show], ulp, width.dtype)
    seqs, first_at = np.unique(tokens.sequence_id[idx], return_index=True)  # idx is in (sequence, position) order
    out.earliest = [(int(s), int(tokens.position[idx[k]])) for s, k in zip(seqs, first_at, strict=True)]
    out.sequences_parting = len(seqs)
    return out


def _ulp_histogram(ulp: np.ndarray) -> list[UlpBin]:
    """The differing tokens by ULP distance, in ``ULP_BINS``; empty bins left out."""
    bins = [
        UlpBin(
            ulp=f"{lo}" if lo == hi else f"{lo}-{hi}" if hi < 1 << 62 else f">{lo - 1}",
            tokens=int(((ulp >= lo) & (ulp <= hi)).sum()),
        )
        for lo, hi in ULP_BINS
    ]
    return [b for b in bins if b.tokens]


def _first(
    tokens: Tokens, left: np.ndarray, right: np.ndarray, shown: np.ndarray, ulp: np.ndarray, dtype: str
) -> list[Difference]:
    """The first differing tokens (``shown``: their rows), each value in hex and in decimal at the recorded width."""
    out = []
    for j, i in enumerate(shown):
        a, b = float(left[i]), float(right[i])
        out.append(
            Difference(
                int(tokens.sequence_id[i]),
                int(tokens.position[i]),
                int(tokens.token_id[i]),
                a,
                b,
                hex_value(a, dtype),
                hex_value(b, dtype),
                decimal_value(a, dtype),
                decimal_value(b, dtype),
                int(ulp[j]),
            )
        )
    return out
