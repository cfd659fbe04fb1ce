"""``retokenized``: the trainer scored other ids than the sampler sampled, because the conversation was decoded
to text and encoded again between the two sides.

A multi-turn rollout loop that re-renders the chat template from messages
each turn (decode, append the tool message, apply the template, encode)
hands the trainer ids the sampler never produced wherever BPE is not a
bijection on the sampled ids: a merge the sampler did not make, invalid
UTF-8 bytes that decode to U+FFFD. From the first such token to the end of
the turn the two sides' rows pair different tokens, and the gap explodes
there (TRL #5224, NeMo-Gym #1416, rllm #816; eval-protocol #457 first read
the spikes as numerics on mojibake tokens).

Three ways to see it, the best the run allows, named in the finding's
``estimate["method"]`` and its confidence:

* ``exact`` (high): the run holds both sides' ids (``trainer_token_id``, which
  ``probe --turn-ids messages`` writes): the rows where they differ.
* ``tokenizer`` (medium): with the run's tokenizer (``doctor --tokenizer``, or
  a probe run's own checkpoint), each turn's sampled ids against
  ``encode(decode(ids))`` inside the chat template; a turn whose ids would
  change is retokenized when its gap steps up from there to the turn's end.
* ``signature`` (low): without either, a step up in the gap at one token of a
  turn that persists to the turn's end, improbable at the run's own rate of
  such tokens; the share of the steps on rare ids is given as evidence.

A run without turns and without both sides' ids gets no finding at all: this
cause lives in multi-turn runs, and a single-turn run's output stays as it was.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from ..documents import optional, to_json
from .document import Evidence, Finding
from .findings import MIN_TOKENS, clear, detected, g, too_few
from .sample import Sample

OFF_TOKEN = 0.1
"""signature: a token is off when its |gap| is above this and 10x the run's median."""

CAUSE = "retokenized"
STEP_RATIO = 5.0
"""tokenizer: the gap from the first changed id to the turn's end at least this multiple of the unchanged turns'."""
STEP_FLOOR = 0.05
"""tokenizer: and at least this many nats (a near-zero gap multiplied is still no step)."""
SIGNATURE_TAIL = 4
SIGNATURE_SHARE = 0.75
"""signature: from the step token to the turn's end at least SIGNATURE_TAIL tokens, this share of them off."""
SIGNATURE_BEFORE = 0.2
"""signature: and at most this share of the turn's tokens before the step off."""
SIGNATURE_ALPHA = 0.01
"""signature: the count of off tokens after the step improbable at the run's rate (binomial tail below this over the
number of (turn, step) candidates looked at): a clean run flags a turn about once in 100 runs."""
MAX_SEGMENTS = 4000
"""tokenizer: turns re-encoded at most (the first of the sample, in sequence order)."""
CHANGE = (
    "pass token ids from turn to turn (the sampled ids, then the tool span's ids from the chat template), never "
    "decode the conversation and encode it again; over a server, ask for the ids (return_token_ids)"
)


def retokenized(s: Sample, tokenizer: Any = None, source: str | None = None) -> Finding | None:
    """The finding on the sample; ``tokenizer`` (a transformers tokenizer, ``source`` naming it) enables the
    second method. None for a run of single turns with one side's ids only (and no tokenizer given)."""
    return check(s, tokenizer, source)[0]


def check(s: Sample, tokenizer: Any = None, source: str | None = None) -> tuple[Finding | None, np.ndarray | None]:
    """:func:`retokenized`, and the sample's rows a detected drift misaligns (from each drifting turn's first
    changed token to its end; None when nothing was found), so other detectors can be read without them."""
    has_turns = s.has("turn")
    if not (has_turns or s.has("trainer_token_id") or tokenizer is not None):
        return None, None
    if len(s) < MIN_TOKENS:
        return too_few(CAUSE, len(s)), None
    if s.has("trainer_token_id"):
        f, first = _exact(s)
    elif tokenizer is not None:
        f, first = _by_tokenizer(s, tokenizer, source or "the run's tokenizer")
    else:
        f, first = _signature(s)
    if f.status != "detected":
        return f, None
    ends = segments(s)[1]
    rows = np.zeros(len(s), dtype=bool)
    for k, row in first.items():
        rows[row : ends[k]] = True
    return f, rows


# ---- the turns of the sample ---------------------------------------------------------------


def segments(s: Sample) -> tuple[np.ndarray, np.ndarray]:
    """Start and end row of each (sequence, turn) of the sample (sorted by sequence and position)."""
    seq = s.columns["sequence_id"]
    turn = s.columns["turn"] if s.has("turn") else np.zeros(seq.size, np.int64)
    starts = np.flatnonzero(np.r_[True, (seq[1:] != seq[:-1]) | (turn[1:] != turn[:-1])])
    return starts, np.r_[starts[1:], seq.size]


def _turn(s: Sample, row: int) -> tuple[int, int]:
    """(turn, position within it) of a sample row."""
    if not s.has("turn"):
        return 0, int(s.columns["position"][row])
    return int(s.columns["turn"][row]), int(s.columns["turn_position"][row])


@dataclass(frozen=True)
class Drift:
    """What the drifting turns cause, as the finding's estimate records it (in this order)."""

    method: str
    first_turn: float
    first_turn_position: float
    sequence_id: float
    position: float
    sequences_share: float
    tokens_share: float
    gap_misaligned: float
    gap_rest: float | None
    turns: float
    step_on_rare_ids: float | None = field(default=None, metadata=optional("signature: rare ids among the steps"))
    rare_ids_overall: float | None = field(default=None, metadata=optional("signature: rare ids in the run"))


def _drift(s: Sample, first: dict[int, int], ends: np.ndarray, starts: np.ndarray, method: str) -> Drift:
    """What the drifting turns (segment index -> its first drifting row) cause: shares, gaps, the first one."""
    d = np.abs(s.columns["trainer_logprob"] - s.columns["sampler_logprob"])
    off = np.zeros(d.size, dtype=bool)
    for k, row in first.items():
        off[row : ends[k]] = True
    seq = s.columns["sequence_id"]
    by_turn = sorted(first.values(), key=lambda row: (*_turn(s, row), int(seq[row])))
    row = by_turn[0]
    turn, turn_position = _turn(s, row)
    drifting_sequences = np.unique(seq[list(first.values())]).size
    return Drift(
        method=method,
        first_turn=float(turn),
        first_turn_position=float(turn_position),
        sequence_id=float(seq[row]),
        position=float(s.columns["position"][row]),
        sequences_share=drifting_sequences / np.unique(seq).size,
        tokens_share=float(off.mean()),
        gap_misaligned=float(d[off].mean()),
        gap_rest=float(d[~off].mean()) if (~off).any() else None,
        turns=float(len(first)),
    )


def _found(e: Drift, confidence: str, how: str) -> Finding:
    turn, pos = int(e.first_turn), int(e.first_turn_position)
    rest = f" against {g(e.gap_rest)} elsewhere" if e.gap_rest is not None else ""
    sentence = (
        f"{how} in {e.sequences_share:.1%} of conversations ({e.tokens_share:.1%} of tokens): re-tokenized "
        f"between the sides, first in turn {turn} at its token {pos} (sequence {int(e.sequence_id)}, position "
        f"{int(e.position)}); from there the turn's pairs are misaligned, mean |log p - log q| "
        f"{g(e.gap_misaligned)}{rest}"
    )
    ev = [
        Evidence("share of conversations with a re-tokenized turn", e.sequences_share, "0"),
        Evidence("mean |log p - log q| from the first changed id to the turn's end", e.gap_misaligned, "the rest's"),
    ]
    f = detected(CAUSE, sentence, ev, to_json(e), confidence, CHANGE)  # type: ignore[arg-type]  # a Confidence
    return _with_turn(f, turn)


def _with_turn(f: Finding, turn: int) -> Finding:
    return replace(f, turn=turn)


# ---- 1. both sides' ids ---------------------------------------------------------------------


def _exact(s: Sample) -> tuple[Finding, dict[int, int]]:
    differ = s.columns["trainer_token_id"] != s.columns["token_id"]
    starts, ends = segments(s)
    rows = np.flatnonzero(differ)
    ev = [Evidence("rows whose trainer id is not the sampled id", float(rows.size), "0")]
    if not rows.size:
        return clear(
            CAUSE, "the trainer scored the ids the sampler sampled (both sides' ids agree on every row)", ev
        ), {}
    seg = np.searchsorted(starts, rows, side="right") - 1
    first = {int(k): int(r) for k, r in zip(*np.unique(seg, return_index=True), strict=True)}
    first = {k: int(rows[i]) for k, i in first.items()}
    how = "the trainer scored other ids than the sampler's"
    return _found(_drift(s, first, ends, starts, "exact"), "high", how), first


# ---- 2. the tokenizer -----------------------------------------------------------------------


def _by_tokenizer(s: Sample, tokenizer: Any, source: str) -> tuple[Finding, dict[int, int]]:
    starts, ends = segments(s)
    ids = s.columns["token_id"]
    eos = getattr(tokenizer, "eos_token_id", None)
    template = getattr(tokenizer, "chat_template", None)
    first: dict[int, int] = {}
    for k, (a, b) in enumerate(zip(starts[:MAX_SEGMENTS], ends[:MAX_SEGMENTS], strict=True)):
        sampled = [int(x) for x in ids[a:b]]
        if sampled and sampled[-1] == eos:  # the template writes the end of the turn itself
            sampled = sampled[:-1]
        j = first_change(sampled, reencode(tokenizer, sampled, template))
        if j is not None:
            first[k] = int(a + j)
    checked = min(starts.size, MAX_SEGMENTS)
    ev = [Evidence(f"turns whose ids {source} encodes otherwise after decoding", float(len(first)), "0")]
    if not first:
        return clear(CAUSE, f"every turn's ids encode back to themselves ({checked} turns, {source})", ev), {}
    e = _drift(s, first, ends, starts, "tokenizer")
    rest = e.gap_rest if e.gap_rest is not None else 0.0
    stepped = e.gap_misaligned >= max(STEP_FLOOR, STEP_RATIO * rest)
    ev.append(Evidence("mean |log p - log q| from the first such id to the turn's end", e.gap_misaligned, g(rest)))
    if not stepped:
        return clear(
            CAUSE,
            f"{len(first)} of {checked} turns hold ids that {source} encodes otherwise, but the gap does not step "
            "up there: the trainer scored the sampled ids (token ids passed between turns)",
            ev,
        ), {}
    return _found(e, "medium", f"sampled ids that {source} encodes otherwise, with the gap stepping up there,"), first


def first_change(a: list[int], b: list[int]) -> int | None:
    """The first index where two id lists differ (the shorter one's length when one is the other's start)."""
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def reencode(tokenizer: Any, ids: list[int], template: str | None) -> list[int]:
    """``encode(decode(ids))`` as a loop that re-renders the conversation gets it: inside an assistant message
    of the chat template where the tokenizer has one (merges across the message's edges included)."""
    text = tokenizer.decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False)
    if not template:
        return list(tokenizer.encode(text, add_special_tokens=False))
    try:
        rendered = tokenizer.apply_chat_template(
            [{"role": "user", "content": "."}, {"role": "assistant", "content": text}], tokenize=False
        )
    except Exception:  # a template that refuses this conversation: the message alone
        return list(tokenizer.encode(text, add_special_tokens=False))
    at = rendered.rfind(text)
    enc = tokenizer(rendered, add_special_tokens=False, return_offsets_mapping=True)
    inside = [
        t for t, (a, b) in zip(enc["input_ids"], enc["offset_mapping"], strict=True) if b > at and a < at + len(text)
    ]
    return [int(t) for t in inside]


# ---- 3. the signature -----------------------------------------------------------------------


def _signature(s: Sample) -> tuple[Finding, dict[int, int]]:
    d = np.abs(s.columns["trainer_logprob"] - s.columns["sampler_logprob"])
    cut = max(OFF_TOKEN, 10 * float(np.median(d)))
    off = d > cut
    starts, ends = segments(s)
    ids = s.columns["token_id"]
    steps = {}  # first the pattern alone; the run's own rate of off tokens is then read outside the steps' tails
    for k in np.flatnonzero(ends - starts >= SIGNATURE_TAIL + 1):
        j = _step(off[starts[k] : ends[k]])
        if j is not None and np.ptp(ids[starts[k] + j : ends[k]]) > 0:  # one id repeated to the end is padding
            steps[int(k)] = int(starts[k] + j)
    outside = np.ones(d.size, dtype=bool)
    for k, row in steps.items():
        outside[row : ends[k]] = False
    rate = max(float(off[outside].mean()) if outside.any() else 0.0, 1e-6)
    alpha = SIGNATURE_ALPHA / max(int(np.maximum(ends - starts - SIGNATURE_TAIL, 0).sum()), 1)
    first = {
        k: row
        for k, row in steps.items()
        if _binomial_tail(int(off[row : ends[k]].sum()), int(ends[k] - row), rate) < alpha
    }
    ev = [Evidence(f"turns whose gap steps above {g(cut)} nats at one token and stays there", float(len(first)), "0")]
    if len(first) < 2:
        why = "no turn's gap steps up at one token and stays up to its end (signature; no ids to compare)"
        return clear(CAUSE, why, ev), {}
    e = _drift(s, first, ends, starts, "signature")
    values, counts = np.unique(ids, return_counts=True)
    rare_ids = values[counts <= max(2, int(1e-4 * ids.size))]
    step_rare = float(np.isin(ids[list(first.values())], rare_ids).mean())
    base_rare = float(np.isin(ids, rare_ids).mean())
    e = replace(e, step_on_rare_ids=step_rare, rare_ids_overall=base_rare)
    ev.append(Evidence("share of the step tokens that are rare ids in the run", step_rare, f"{base_rare:.3g} overall"))
    how = "a step up in the gap that persists to the turn's end (signature, no ids to compare)"
    return _found(e, "low", how), first


def _step(off: np.ndarray) -> int | None:
    """The first token (not the turn's first) where the turn's gap steps up and stays up to its end, or None."""
    n = off.size
    after = np.cumsum(off[::-1])[::-1]  # off tokens from j to the end
    before = np.r_[0, np.cumsum(off)[:-1]]
    for j in np.flatnonzero(off[1 : n - SIGNATURE_TAIL + 1]) + 1:
        if after[j] >= SIGNATURE_SHARE * (n - j) and before[j] <= SIGNATURE_BEFORE * j:
            return int(j)
    return None


def _binomial_tail(k: int, n: int, p: float) -> float:
    """P(X >= k) for X ~ Binomial(n, p), summed in log space."""
    if p <= 0:
        return 0.0 if k > 0 else 1.0
    if p >= 1:
        return 1.0
    terms = [
        math.lgamma(n + 1) - math.lgamma(j + 1) - math.lgamma(n - j + 1) + j * math.log(p) + (n - j) * math.log1p(-p)
        for j in range(k, n + 1)
    ]
    top = max(terms)
    return min(1.0, math.exp(top) * sum(math.exp(t - top) for t in terms))
