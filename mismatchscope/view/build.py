"""A :class:`~.document.TokenView` from an analysis pass's result: choose, read, judge, decode, cut.

The rules' decisions are those of the pass: a token rule is a pure function
of the token's terms (and advantage), evaluated here on the same cleaned rows
through the same evaluator; a sequence rule is evaluated on the pass's own
per-sequence inputs. So a mark on the page is a decision in the table and in
``compare-masks --write``'s audit.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, fields, replace
from typing import Any

import numpy as np

from ..analysis.evaluate import sequence_actions, token_actions
from ..analysis.masks import Unit, build_units
from ..analysis.results import display_name
from ..arrow import list_offsets, to_numpy
from ..divergence import token_terms
from ..rules import REJECT, REWEIGHT, RuleInstance, SequenceInputs
from .document import GAP_EDGES, SequenceDecision, TokenView, TopK, ViewRule, ViewSequence
from .rows import Rows, read_rows
from .select import choose
from .text import CONTEXT, Decoder, TextSource, check_fits

MAX_TOKENS = 10_000
"""the tokens a page shows at most (all sequences together): about 2 MB of page."""
ACTIONS = ("keep", "reject", "reweight")


@dataclass(frozen=True)
class ViewOptions:
    """What a view shows: ``worst`` sequences ranked ``by`` (k3, max-gap, a rule's name), or ``sequences``."""

    worst: int = 20
    by: str = "k3"
    sequences: tuple[int, ...] = ()
    max_tokens: int = MAX_TOKENS


def build_view(
    run: str, result, rules: Sequence[RuleInstance], options: ViewOptions, decoder: Decoder | None, text: TextSource
) -> TokenView:
    """The view of ``result``, a compare-masks pass over ``run`` with ``rules`` among its rules."""
    units = build_units(list(rules), [], result.source.has("advantage"))
    shown = _rules(units)
    choice = choose(result, units, options.worst, options.by, options.sequences)
    rows = read_rows(result.source, choice.ids)
    budget = _budget([int(result.per_sequence.n_tokens_S[r]) for r in choice.rows], options.max_tokens)
    seqs = [
        _sequence(result, units, shown, rows[sid], rank, value, int(row), room, decoder)
        for rank, (sid, value, row, room) in enumerate(
            zip(choice.ids, choice.values, choice.rows, budget, strict=True), start=1
        )
    ]
    if decoder is not None:
        check_fits(decoder, text, max([max(s.token_id, default=0) for s in seqs], default=0))
    counted = [_count(rule, seqs) for rule in shown]
    notes = [s.cut for s in seqs if s.cut]
    return TokenView(
        run=run,
        tokens=result.tokens,
        sequences_in_run=result.sequences,
        ranking=choice.ranking,
        rules=[replace(r, acted=c) for r, c in zip(shown, counted, strict=True)],
        statistics={st.column(u.rule.config): st.doc for u in units for st in u.rule.spec.statistics},
        text=text,
        vocabulary=_vocabulary(seqs, decoder),
        gap_edges=list(GAP_EDGES),
        max_tokens=options.max_tokens,
        shown_tokens=sum(len(s.position) for s in seqs),
        notes=notes,
        warnings=list(result.warnings),
        sequences=seqs,
    )


def _rules(units: Sequence[Unit]) -> list[ViewRule]:
    names = [display_name(u.rule.name, u.hypothesis) for u in units]
    out = []
    for i, (u, name) in enumerate(zip(units, names, strict=True)):
        shown = display_name(u.rule.label, u.hypothesis) if names.count(name) > 1 else name
        out.append(
            ViewRule(
                key=f"r{i}",
                name=shown,
                label=u.rule.label,
                level=u.rule.level,
                action=u.rule.spec.acts,
                hypothesis=u.hypothesis,
                statistics=[st.column(u.rule.config) for st in u.rule.spec.statistics],
                acted=0,
            )
        )
    return out


def _budget(lengths: list[int], cap: int) -> list[int]:
    """Tokens each sequence may show: the cap shared out, short sequences whole and the rest split evenly."""
    room = [0] * len(lengths)
    left, todo = cap, sorted(range(len(lengths)), key=lambda i: lengths[i])
    for k, i in enumerate(todo):
        share = left // (len(todo) - k)
        room[i] = min(lengths[i], max(share, 1))
        left -= room[i]
    return room


@dataclass
class _Judged:
    """The token rules' decisions on a sequence's shown tokens, and the statistics they threshold."""

    acted: dict[str, list[int]] = field(default_factory=dict)
    weights: dict[str, list[float]] = field(default_factory=dict)
    statistics: dict[str, list[float]] = field(default_factory=dict)


def _sequence(
    result,
    units: Sequence[Unit],
    rules: list[ViewRule],
    rows: Rows,
    rank: int,
    value: float | None,
    row: int,
    room: int,
    decoder: Decoder | None,
) -> ViewSequence:
    """One chosen sequence: its window of ``room`` tokens, judged by every rule, decoded, with its candidates."""
    l_all = token_terms(rows["trainer_logprob"], rows["sampler_logprob"]).log_ratio_T
    start, cut = _window(l_all, room, rows["position"])
    sl = slice(start, start + room)
    lp, lq = rows["trainer_logprob"][sl], rows["sampler_logprob"][sl]
    t = token_terms(lp, lq)
    adv = rows.get("advantage")
    judged = _judge_tokens(units, rules, t, adv[sl] if adv is not None else None)
    seq_in = _sequence_row(result.sequence_inputs, row)
    sid = int(rows["sequence_id"][0])
    return ViewSequence(
        sequence_id=sid,
        rank=rank,
        value=value,
        prompt_id=int(rows["prompt_id"][0]) if rows.get("prompt_id") is not None else None,
        tokens=int(result.per_sequence.n_tokens_S[row]),
        start=start,
        position=[int(x) for x in rows["position"][sl]],
        token_id=[int(x) for x in rows["token_id"][sl]],
        text=_text(decoder, [int(x) for x in rows["token_id"]], start, len(lp)),
        sampler_logprob=[_round(x, 10) for x in lq],
        trainer_logprob=[_round(x, 10) for x in lp],
        log_ratio=[_round(x, 7) for x in t.log_ratio_T],
        acted=judged.acted,
        weights=judged.weights,
        statistics=judged.statistics,
        sequence_rules={
            r.key: _sequence_decision(u, seq_in)
            for u, r in zip(units, rules, strict=True)
            if u.rule.level == "sequence"
        },
        turn=[int(x) for x in rows["turn"][sl]] if rows.get("turn") is not None else None,
        topk=_topk(rows, sl),
        cut=f"sequence {sid}: {cut}" if cut else None,
    )


def _judge_tokens(units: Sequence[Unit], rules: list[ViewRule], t, adv: np.ndarray | None) -> _Judged:
    """Each token rule's decisions (the tokens it acts on, a reweighting rule's weight there) and each statistic
    a token rule thresholds, computed once however many rules read it."""
    out = _Judged()
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        for u, r in zip(units, rules, strict=True):
            if u.rule.level == "sequence":
                continue
            act = token_actions(u, t, adv)
            at = np.flatnonzero(act == (REJECT if u.rule.spec.acts == "reject" else REWEIGHT))
            out.acted[r.key] = at.tolist()
            if u.rule.spec.weight is not None:
                out.weights[r.key] = [_round(w, 9) for w in np.asarray(u.rule.spec.weight(u.rule.config, t))[at]]
            for st in u.rule.spec.statistics:
                name = st.column(u.rule.config)
                if name not in out.statistics:
                    values = np.asarray(st.fn(u.rule.config, t), dtype=np.float64)
                    out.statistics[name] = [_round(v, 7) for v in values]
    return out


def _window(l_T: np.ndarray, room: int, position: np.ndarray) -> tuple[int, str | None]:
    """The first shown token of a sequence cut to ``room`` tokens: the window around its largest gap."""
    n = l_T.size
    if room >= n:
        return 0, None
    peak = int(np.argmax(np.abs(l_T)))
    start = min(max(0, peak - room // 2), n - room)
    first, last = int(position[start]), int(position[start + room - 1])
    return start, (
        f"positions {first}-{last} shown, {room:,} of its {n:,} tokens: the window around its largest gap "
        f"(position {int(position[peak])}); --max-tokens shows more"
    )


def _sequence_row(seq: SequenceInputs, row: int) -> SequenceInputs:
    """The sequence rules' inputs of one sequence (every array cut to its row)."""
    values = {f.name: getattr(seq, f.name) for f in fields(seq)}
    return SequenceInputs(**{k: (v[row : row + 1] if isinstance(v, np.ndarray) else v) for k, v in values.items()})


def _sequence_decision(u: Unit, seq: SequenceInputs) -> SequenceDecision:
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        code = int(sequence_actions(u, seq)[0])
        stats = {
            st.column(u.rule.config): _round(float(st.fn(u.rule.config, seq)[0]), 7) for st in u.rule.spec.statistics
        }
        weight = None
        if code == REWEIGHT and u.rule.spec.weight is not None:
            weight = _round(float(u.rule.spec.weight(u.rule.config, seq)[0]), 9)
    return SequenceDecision(ACTIONS[code], stats, weight)  # type: ignore[arg-type]  # codes 0-2


def _text(decoder: Decoder | None, ids: list[int], start: int, n: int) -> list[str] | None:
    """The shown tokens' pieces of text, decoded with the tokens before the window as context."""
    if decoder is None:
        return None
    lead = max(0, start - CONTEXT)
    return decoder.pieces(ids[lead : start + n])[start - lead :]


def _topk(rows: Rows, sl: slice) -> TopK | None:
    """The shown tokens' candidates, where the run has the sampler's top-k."""
    ids, lps = rows.get("sampler_topk_ids"), rows.get("sampler_topk_logprobs")
    if ids is None or lps is None:
        return None

    def lists(name: str, digits: int | None) -> list[list[Any]] | None:
        col = rows.get(name)
        if col is None:
            return None
        out = _lists(col[sl])
        return out if digits is None else [[_round(v, digits) for v in x] for x in out]

    return TopK(
        sampler_ids=lists("sampler_topk_ids", None) or [],
        sampler_logprobs=lists("sampler_topk_logprobs", 7) or [],
        trainer_logprobs_at_sampler=lists("trainer_logprobs_at_sampler_topk", 7),
        trainer_ids=lists("trainer_topk_ids", None),
        trainer_logprobs=lists("trainer_topk_logprobs", 7),
    )


def _lists(arr) -> list[list[Any]]:
    """An Arrow list column as Python lists (through numpy: ``to_pylist`` is slow on many small lists)."""
    values, offsets = list_offsets(arr)
    flat = to_numpy(values)
    return [flat[a:b].tolist() for a, b in zip(offsets[:-1], offsets[1:], strict=True)]


def _vocabulary(seqs: list[ViewSequence], decoder: Decoder | None) -> dict[str, str]:
    """The text of every id the top-k lists name (alone: a candidate has no stream to sit in)."""
    if decoder is None:
        return {}
    ids = {
        int(i)
        for s in seqs
        if s.topk is not None
        for lists in (s.topk.sampler_ids, s.topk.trainer_ids or [])
        for x in lists
        for i in x
    }
    return {str(i): decoder.one(i) for i in sorted(ids) if 0 <= i < decoder.size}


def _count(rule: ViewRule, seqs: list[ViewSequence]) -> int:
    if rule.level == "sequence":
        return sum(len(s.position) for s in seqs if s.sequence_rules[rule.key].action != "keep")
    return sum(len(s.acted[rule.key]) for s in seqs)


def _round(x: float, digits: int) -> float:
    """``x`` to ``digits`` significant digits (the page's size), non-finite values as they are."""
    x = float(x)
    return float(f"{x:.{digits}g}") if math.isfinite(x) else x
