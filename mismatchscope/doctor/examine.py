"""The examination: every registered cause read, its share of the gap measured, rivals compared, the causes
read again on the corrected pairs, and the findings ranked.

1. Every detector runs on the sample (``causes.REGISTRY``, in its order).
2. Sequences that look misjoined, or whose gap stands far above the rest, are
   examined on their own first: a cause confined to them (a shift, a base, a
   temperature, a kept set, pad rows, a prompt boundary) is named with the
   sequences it is in, and only what none of them explains is called misjoined.
3. Where two detected causes predict the same statistic, each one's model is
   fitted and the one that leaves more is ruled out (``Cause.rivals``).
4. Each detected cause's correction is applied and the share of the gap it
   removes measured (k3 mean and mean |log p - log q|, of the pairs as read).
   The cause that explains most is kept, its correction applied, and every
   other cause is read again on the corrected pairs: a second cause is never
   judged on pairs the first one has scrambled, and a cause that was only the
   first one's echo disappears (up to :data:`MAX_ROUNDS` rounds).
5. The findings are ranked by the share they explain; one that explains almost
   nothing is minor and never first. The verdict follows (``verdict``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import partial

import numpy as np

from ..analysis.parallel import each
from .causes import BY_NAME, REGISTRY
from .causes.misaligned_sequences import flagged_ids, outlier_sequences
from .document import ExplainedShare, Finding, RivalFit, Scope
from .findings import pct, share
from .registry import Cause, Context
from .sample import Sample, gap_means

MAX_ROUNDS = 4
MINOR = 0.05
"""a detected cause whose correction removes less than this share of the gap (both measures) is minor."""
SUBSET_FIT = 0.8
"""a cause confined to the suspected sequences must remove at least this share of their mean |gap|."""
FITS_BETTER = 2.0
"""a rival model wins when it leaves this many times less than the other (half); closer, the two fit alike."""
_CONFIDENCE = {"high": 0, "medium": 1, "low": 2}


@dataclass
class Examination:
    findings: list[Finding]
    """every registered cause's finding, ranked (numerics is added by ``run``)."""
    gap: tuple[float | None, float | None]
    """(k3 mean, mean |gap|) of the sample as read."""
    remaining: tuple[float | None, float | None]
    """the same after every kept cause's correction."""
    ties: list[tuple[str, str]]
    """pairs of detected causes whose models fit alike."""
    outliers: np.ndarray
    """ids of the sequences whose gap stands far above the rest that no cause accounts for."""
    outlier_share: tuple[float | None, float | None]
    """their share of the summed k3 and of the summed |gap|."""


@dataclass
class _State:
    findings: dict[str, Finding]
    scopes: dict[str, np.ndarray]
    """a cause confined to some sequences -> their ids (its correction touches only them)."""
    ties: list[tuple[str, str]]


def examine(ctx: Context) -> Examination:
    gap0 = gap_means(ctx.sample)
    state = _State({}, {}, [])
    chosen: list[str] = []
    cur = ctx
    for round_ in range(MAX_ROUNDS):
        names = [c.name for c in REGISTRY if c.name not in chosen and (round_ == 0 or (c.sample_scope and c.reread))]
        # the causes are read independently of each other: on the cores at once, kept in the registry's order
        found = dict(zip(names, each(partial(_detect_named, cur, state), names), strict=True))
        if round_ == 0:
            found = _confined(cur, found, state)
        found = _rivals(cur, found, state)
        for n, f in found.items():
            state.findings[n] = _echo(state.findings.get(n), f, chosen)
        live = [f for f in found.values() if f.status == "detected"]
        if not live:
            break
        scored = []
        for f in live:
            es, after = _share(BY_NAME[f.cause], cur, f, gap0, state)
            state.findings[f.cause] = replace(state.findings[f.cause], explained_share=es, minor=_minor(es))
            scored.append((state.findings[f.cause], after))
        best, after = min(scored, key=lambda x: _order(x[0]))
        chosen.append(best.cause)
        if after is not None:
            cur = cur.on(after, corrected=tuple(chosen))
    remaining = gap_means(cur.sample)
    outliers, share_of = _unexplained(ctx.sample, state)
    return Examination(rank(list(state.findings.values())), gap0, remaining, state.ties, outliers, share_of)


def _unexplained(s: Sample, state: _State) -> tuple[np.ndarray, tuple[float | None, float | None]]:
    """The outlier sequences no cause claimed (nor called misjoined), and their share of the gap."""
    out = set(outlier_sequences(s).tolist())
    for ids in state.scopes.values():
        out -= set(ids.tolist())
    mis = state.findings.get("misaligned_sequences")
    if mis is not None and mis.status == "detected":
        out -= set(flagged_ids(mis, s).tolist())
    ids = np.array(sorted(out), dtype=np.int64)
    if not ids.size or not len(s):
        return ids, (None, None)
    rows = np.isin(s.columns["sequence_id"], ids)
    k3, d = s.k3(), s.abs_gap()
    k3_all, d_all = k3.sum(), d.sum()
    return ids, (
        float(k3[rows].sum() / k3_all) if k3_all > 0 else None,
        float(d[rows].sum() / d_all) if d_all > 0 else None,
    )


def _detect_named(ctx: Context, state: _State, name: str) -> Finding:
    return _detect_where(BY_NAME[name], ctx, state)


def _detect_where(cause: Cause, ctx: Context, state: _State) -> Finding:
    """A cause read on the pairs as they now are: a cause confined to some sequences, on those sequences again."""
    ids = state.scopes.get(cause.name)
    before = state.findings.get(cause.name)
    if ids is None or before is None or before.scope is None:
        return _detect(cause, ctx)
    seq = ctx.sample.columns["sequence_id"]
    f = _detect(cause, ctx.on(ctx.sample.take(np.isin(seq, ids)), subset=True))
    if f.status != "detected":
        return f
    head = before.sentence[: before.sentence.index("): ") + 3] if "): " in before.sentence else ""
    return replace(f, sentence=head + f.sentence, scope=before.scope)


def _detect(cause: Cause, ctx: Context) -> Finding:
    with np.errstate(all="ignore"):  # a detector's arithmetic on odd data never prints a numpy warning
        return cause.detect(ctx)


def _echo(before: Finding | None, now: Finding, chosen: list[str]) -> Finding:
    """The finding as read on the corrected pairs; a cause seen before the corrections and gone after them was
    the corrected cause's echo, and says so."""
    now = replace(now, after=list(chosen)) if chosen else now
    if before is not None and before.status == "detected" and now.status != "detected" and chosen:
        return replace(
            now,
            status="clear",
            sentence=f"not seen once {', '.join(chosen)} is corrected: its signal came from "
            f"{'that cause' if len(chosen) == 1 else 'those causes'}",
            rivals=before.rivals,
        )
    return now


def _minor(es: ExplainedShare | None) -> bool:
    if es is None:
        return False
    values = [v for v in (es.k3, es.abs_logprob_diff) if v is not None]
    return bool(values) and max(values) < MINOR


def _order(f: Finding) -> tuple:
    """A cause that leads first and one beside the numbers last; among the readings, the most explaining first,
    then pipeline causes, then the more confident."""
    cause = BY_NAME.get(f.cause)
    s = f.explained_share.weight if f.explained_share is not None else None
    return (
        not (cause is not None and cause.leads),
        cause is not None and not cause.reading,
        f.minor,
        -(s if s is not None else 0.5),
        not f.pipeline,
        _CONFIDENCE.get(f.confidence or "", 3),
    )


def rank(found: list[Finding]) -> list[Finding]:
    """Detected first (by the share they explain, minor ones last), then not checked, then clear."""
    status = {"detected": 0, "not_checked": 1, "clear": 2}
    return sorted(found, key=lambda f: (status[f.status], *(_order(f) if f.status == "detected" else ())))


# -- the share a correction removes ---------------------------------------------------------------------------


def correct(cause: Cause, ctx: Context, f: Finding, scope: np.ndarray | None) -> Sample | None:
    """The sample with ``f``'s cause undone (only in its sequences when it is confined), None where it cannot be."""
    if cause.correct is None:
        return None
    s = ctx.sample
    if scope is None:
        out = cause.correct(ctx, f)
        return None if out is s else out
    rows = np.isin(s.columns["sequence_id"], scope)
    inside = cause.correct(ctx.on(s.take(rows), subset=True), f)
    rest = s.take(~rows)
    cols = {k: np.concatenate([rest.columns[k], inside.columns[k]]) for k in rest.columns if k in inside.columns}
    order = np.lexsort((cols["position"], cols["sequence_id"]))
    return replace(inside, columns={k: v[order] for k, v in cols.items()})


def _share(
    cause: Cause, ctx: Context, f: Finding, gap0: tuple[float | None, float | None], state: _State
) -> tuple[ExplainedShare | None, Sample | None]:
    """What ``f``'s correction removes of the gap as read (``gap0``), measured on the pairs as they now are."""
    with np.errstate(all="ignore"):
        after = correct(cause, ctx, f, state.scopes.get(cause.name))
        if after is not None:
            (kb, ab), (ka, aa) = gap_means(ctx.sample), gap_means(after)
            return ExplainedShare(share(kb, ka, gap0[0]), share(ab, aa, gap0[1]), "the gap", cause.correction), after
        if cause.share is None:
            return None, None
        es = cause.share(ctx, f)
    if es is None or es.of != "the gap":
        return es, None
    kb, ab = gap_means(ctx.sample)  # a model's share is of the pairs as they now are: scaled to the gap as read
    scale_k = kb / gap0[0] if kb is not None and gap0[0] else 1.0
    scale_a = ab / gap0[1] if ab is not None and gap0[1] else 1.0
    return replace(
        es,
        k3=None if es.k3 is None else min(1.0, es.k3 * scale_k),
        abs_logprob_diff=None if es.abs_logprob_diff is None else min(1.0, es.abs_logprob_diff * scale_a),
    ), None


# -- causes confined to some sequences ------------------------------------------------------------------------


def _confined(ctx: Context, found: dict[str, Finding], state: _State) -> dict[str, Finding]:
    """Try the causes that can hide in a few sequences before calling those sequences misjoined.

    Each such cause is read on its suspects pooled: the sequences its own screen names, and those that look
    misjoined or far off the rest. The causes seen there are held against their rivals on those sequences;
    then, the cause that explains most of its suspects' gap first, each claims the sequences whose mean |gap|
    its correction takes down by :data:`SUBSET_FIT`. What no cause claims and looked misjoined stays misjoined;
    a sequence that was only an outlier is left to the run-wide reading (a merely noisier sequence).
    """
    s = ctx.sample
    seq = s.columns["sequence_id"]
    mis = found.get("misaligned_sequences")
    joined = set(flagged_ids(mis, s).tolist()) if mis is not None and mis.status == "detected" else set()
    general = set(outlier_sequences(s).tolist()) | joined
    tried: dict[str, tuple[Finding, Context, float]] = {}
    screened = [c for c in REGISTRY if c.subset_rival and c.correct is not None and not _detected(found, c.name)]
    screens = dict(zip((c.name for c in screened), each(partial(_screen, s), screened), strict=True))
    for cause in REGISTRY:
        if not cause.subset_rival or cause.correct is None:
            continue
        if _detected(found, cause.name):
            if joined:  # seen run-wide: it may still be what makes the suspected sequences look misjoined
                sub = ctx.on(s.take(np.isin(seq, np.array(sorted(joined)))), subset=True)
                tried[cause.name] = (found[cause.name], sub, 1.0)
            continue
        own = screens[cause.name]
        # its own suspects alone first (others' suspects, pad rows say, would blur its statistic), then pooled
        tries = [sorted(x) for x in (own, own | general) if x]
        for ids in [t for i, t in enumerate(tries) if t not in tries[:i]]:
            sub = ctx.on(s.take(np.isin(seq, np.array(ids, dtype=np.int64))), subset=True)
            f = _detect(cause, sub)
            if f.status == "detected":
                break
        else:
            continue
        if f.status == "detected":
            with np.errstate(all="ignore"):
                fixed = cause.correct(sub, f)
            (_, before), (_, after) = gap_means(sub.sample), gap_means(fixed)
            gain = (before - after) / before if before and after is not None else 0.0
            tried[cause.name] = (f, sub, gain)
    if not tried:
        return found
    ruled = {n: t[0] for n, t in tried.items()}
    for name, (_f, sub, _) in tried.items():  # each rivalry fitted on the suspects of the cause that names it
        for rival in BY_NAME[name].rivals:
            if rival in tried and ruled[name].status == ruled[rival].status == "detected":
                pair = _rivals(sub, {name: ruled[name], rival: ruled[rival]}, _State({}, {}, []))
                ruled.update(pair)
    total = int(np.unique(seq).size)
    taken: set[int] = set()
    for name in sorted(tried, key=lambda n: -tried[n][2]):
        f, sub, _ = tried[name]
        if ruled[name].status != "detected":
            continue
        with np.errstate(all="ignore"):
            fixed = BY_NAME[name].correct(sub, f)  # pyright: ignore[reportOptionalCall] - tried causes correct
        claimed = np.array([x for x in _claimed(sub.sample, fixed).tolist() if x not in taken], dtype=np.int64)
        if not claimed.size:
            continue
        taken |= set(claimed.tolist())
        if found.get(name) is not None and found[name].status == "detected":
            continue  # a run-wide finding keeps its reading; it only accounts for the suspects
        scope = Scope(int(claimed.size), claimed.size / max(total, 1), [int(x) for x in claimed[:10]])
        head = (
            f"in {claimed.size} of {total} sequences ({pct(scope.share)}; first ids "
            f"{', '.join(map(str, claimed[:5]))}): "
        )
        found[name] = replace(ruled[name], sentence=head + f.sentence, scope=scope)
        state.scopes[name] = claimed
    if mis is not None and mis.status == "detected" and joined & taken:
        if joined <= taken:
            found["misaligned_sequences"] = replace(
                mis,
                status="clear",
                sentence="the sequences that looked misjoined are explained by "
                f"{', '.join(state.scopes)} confined to them",
                confidence=None,
                change=None,
                scope=None,
            )
        else:
            rest = ctx.on(s.take(~np.isin(seq, np.array(sorted(taken)))))
            found["misaligned_sequences"] = _detect(BY_NAME["misaligned_sequences"], rest)
    return found


def _detected(found: dict[str, Finding], name: str) -> bool:
    return (f := found.get(name)) is not None and f.status == "detected"


def _screen(s: Sample, cause: Cause) -> set[int]:
    """The sequences ``cause``'s own screen names (none without one)."""
    with np.errstate(all="ignore"):
        return set(cause.screen(s).tolist()) if cause.screen is not None else set()


def _claimed(before: Sample, after: Sample) -> np.ndarray:
    """Ids of the sequences whose k3 mean or mean |gap| the correction took down by :data:`SUBSET_FIT` or more."""

    def per_seq(x: Sample) -> dict[int, tuple[float, float]]:
        starts, ends = x.segments()
        if not starts.size:
            return {}
        n = ends - starts
        k3 = np.add.reduceat(x.k3(), starts) / n
        a = np.add.reduceat(x.abs_gap(), starts) / n
        return dict(
            zip(x.columns["sequence_id"][starts].tolist(), zip(k3.tolist(), a.tolist(), strict=True), strict=True)
        )

    b, a = per_seq(before), per_seq(after)
    keep = 1 - SUBSET_FIT
    return np.array(
        sorted(k for k, (k3, ab) in b.items() if k in a and (a[k][0] <= keep * k3 or a[k][1] <= keep * ab)),
        dtype=np.int64,
    )


# -- rivals ----------------------------------------------------------------------------------------------------


def _rivals(ctx: Context, found: dict[str, Finding], state: _State) -> dict[str, Finding]:
    """For each detected cause and each rival it names: fit both models on its data; keep the one that fits."""
    done: set[frozenset[str]] = set()
    for cause in REGISTRY:
        own = found.get(cause.name)
        if own is None or own.status != "detected" or own.scope is not None:
            continue  # a cause confined to some sequences met its rivals there (``_confined``)
        for rival_name, fitter in cause.rivals.items():
            pair = frozenset((cause.name, rival_name))
            if pair in done:
                continue
            done.add(pair)
            rival = found.get(rival_name) or Finding(rival_name, "clear", "")
            with np.errstate(all="ignore"):
                fit = fitter(ctx, own, rival)
            both = rival.status == "detected"
            if fit is None:  # the two models cannot be told apart on this data, or do not compete on it
                continue
            found[cause.name] = own = replace(own, rivals=[*own.rivals, fit])
            mine, theirs = fit.own_residual, fit.residual
            if mine is None or theirs is None or not (np.isfinite(mine) and np.isfinite(theirs)):
                continue
            mirror = RivalFit(cause.name, mine, theirs, fit.sentence)  # the same fit, seen from the rival
            if theirs > FITS_BETTER * mine:
                if both:
                    found[rival_name] = replace(
                        rival,
                        status="clear",
                        sentence=f"ruled out by {cause.name}: {fit.sentence}",
                        confidence=None,
                        change=None,
                        rivals=[mirror],
                        scope=None,
                    )
            elif mine > FITS_BETTER * theirs and both:
                found[cause.name] = replace(
                    own,
                    status="clear",
                    sentence=f"ruled out by {rival_name}: {fit.sentence}",
                    confidence=None,
                    change=None,
                    scope=None,
                )
                found[rival_name] = replace(rival, rivals=[*rival.rivals, mirror])
                break
            elif mine > FITS_BETTER * theirs:  # the rival fits better, though its own detector did not fire
                found[cause.name] = own = replace(own, confidence="low")
            elif both:
                state.ties.append((cause.name, rival_name))
                found[cause.name] = own = replace(own, confidence="low")
                found[rival_name] = replace(rival, confidence="low", rivals=[*rival.rivals, mirror])
    return found
