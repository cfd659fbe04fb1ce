"""compare-masks: what each rule would reject or reweight, and how they overlap.

Token rules are evaluated batch by batch; sequence rules once at the end, on
the per-sequence aggregates. Advantage-dependent rules without an
``advantage`` column are evaluated twice, as if every advantage were positive
("A>0") and negative ("A<0"), and their average is reported as "mean": labelled
hypotheses, never a silent assumption of the sign.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field, replace

import numpy as np

from ..divergence import TokenTerms
from ..rules import RuleInstance, SequenceInputs
from .evaluate import HYPOTHESES, Verdicts, sequence_verdicts, token_actions
from .grouping import Groups
from .results import DisagreementExample, Hypothesis, MaskTotals, RuleAgreement, RuleRow, display_name
from .table import RuleColumn
from .tokenstats import Q_EDGES, bucket_index, q_bucket_labels
from .turns import TurnRows, tokens_by_turn

ROUTE_FLIPPED = "route_flipped"
"""the per-sequence sum of tokens flipped in any MoE layer, when the run has routes (the engine adds it)."""
SIGNS = ("p>q", "p<q", "p=q")
"""the sign of p - q of a rejected token: which way the trainer moved from the sampler."""
N_Q = len(Q_EDGES)


def tail_codes(t: TokenTerms) -> tuple[np.ndarray, np.ndarray]:
    """Per token, its sampler-probability bucket (report's buckets) and its sign of p - q (index into SIGNS)."""
    return bucket_index(t.q_T, Q_EDGES), sign_code(t.p_T, t.q_T)


def sign_code(a_T: np.ndarray, b_T: np.ndarray | float) -> np.ndarray:
    """0 where a > b, 1 where a < b, 2 where a == b (finite inputs): the index into SIGNS, or into (A>0, A<0, A=0)."""
    return (a_T <= b_T).astype(np.intp) + (a_T == b_T)


def pair_counts(rejected: np.ndarray) -> np.ndarray:
    """``[R, R]``: for each pair of rules, how many tokens both reject (the diagonal: each rule's own count).

    ``rejected`` is ``[R, n]`` booleans. Rejections are rare and the rules
    overlap, so the tokens any rule rejects fall into few distinct patterns
    (which rules reject them): each pattern's count times the outer product of
    its bits replaces a dense ``[R, n] @ [n, R]`` product over every token.
    Integer arithmetic throughout, so the counts are exact.
    """
    r = rejected.shape[0]
    hit = np.flatnonzero(np.logical_or.reduce(rejected, axis=0)) if r else np.zeros(0, np.intp)
    if hit.size == 0:
        return np.zeros((r, r))
    sub = rejected[:, hit]
    if r > 62:  # patterns no longer fit one integer
        f = sub.astype(np.float64)
        return f @ f.T
    code = np.zeros(hit.size, np.int64)
    for i in range(r):
        code |= sub[i].astype(np.int64) << i
    patterns, counts = np.unique(code, return_counts=True)
    bits = (patterns[:, None] >> np.arange(r)) & 1  # [U, R]
    return (bits.T @ (bits * counts[:, None])).astype(np.float64)


@dataclass(eq=False)
class Unit:
    """One rule instance under one advantage hypothesis."""

    rule: RuleInstance
    hypothesis: Hypothesis
    """"data" (real advantages or none needed), "A>0" or "A<0"."""
    sweep: str | None = None
    """"rule.param" when the unit belongs to a --sweep, else None."""
    tokens_rejected: int = 0
    tokens_reweighted: int = 0
    rejected_by_sign: dict[str, int] = field(default_factory=lambda: {"A>0": 0, "A<0": 0, "A=0": 0})
    sequences_rejected: int = 0
    sequences_reweighted: int = 0
    sequences_with_rejection: int = 0
    sequences_with_reweight: int = 0
    rejected_by_q: np.ndarray = field(default_factory=lambda: np.zeros(N_Q, np.int64))
    """rejected tokens per sampler-probability bucket."""
    rejected_by_pq_sign: np.ndarray = field(default_factory=lambda: np.zeros(len(SIGNS), np.int64))
    """rejected tokens with p > q, p < q, p = q."""
    flipped_rejected: int = 0
    """rejected tokens whose experts differ between the sides in some MoE layer (runs with routes)."""
    rejected_by_turn: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    """rejected tokens per turn index (``--by turn``; a multi-turn run)."""
    reweighted_by_turn: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))

    def fresh(self) -> Unit:
        """The same rule, hypothesis and sweep with every count at zero."""
        return Unit(self.rule, self.hypothesis, self.sweep)

    def merge(self, other: Unit) -> None:
        """Add another pass's token counts (a batch analysed on another thread) to these."""
        self.tokens_rejected += other.tokens_rejected
        self.tokens_reweighted += other.tokens_reweighted
        for k, v in other.rejected_by_sign.items():
            self.rejected_by_sign[k] += v
        self.rejected_by_q += other.rejected_by_q
        self.rejected_by_pq_sign += other.rejected_by_pq_sign
        self.flipped_rejected += other.flipped_rejected
        self.rejected_by_turn = add_counts(self.rejected_by_turn, other.rejected_by_turn)
        self.reweighted_by_turn = add_counts(self.reweighted_by_turn, other.reweighted_by_turn)

    @property
    def key(self) -> str:
        return f"{self.rule.label}|{self.hypothesis}|{self.sweep or ''}"

    @property
    def display(self) -> str:
        return display_name(self.rule.name, self.hypothesis)


def add_counts(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Two count vectors keyed by index (turns), the shorter one read as zeros past its end."""
    if a.size < b.size:
        a, b = b, a
    out = a.copy()
    out[: b.size] += b
    return out


def build_units(
    rules: list[RuleInstance], sweeps: list[tuple[str, str, list[RuleInstance]]], has_advantage: bool
) -> list[Unit]:
    units = []

    def expand(rule: RuleInstance, sweep: str | None):
        if rule.spec.uses_advantage and not has_advantage:
            return [Unit(rule, h, sweep) for h in HYPOTHESES]
        return [Unit(rule, "data", sweep)]

    for r in rules:
        units += expand(r, None)
    for name, key, instances in sweeps:
        for r in instances:
            units += expand(r, f"{name}.{key}")
    return units


class MaskAccumulator:
    """Streams token batches through the token rules and keeps what the report needs."""

    def __init__(self, units: list[Unit], examples: int):
        self.units = units
        self.token_units = [u for u in units if u.rule.level == "token"]
        self.seq_units = [u for u in units if u.rule.level == "sequence"]
        # token-rejecting units that enter the agreement view (no sweeps)
        self.agree_token = [u for u in self.token_units if u.sweep is None and u.rule.spec.acts == "reject"]
        self.pair_counts = np.zeros((len(self.agree_token), len(self.agree_token)))
        self.n_examples = examples
        self._examples: list[tuple[float, int, DisagreementExample]] = []
        self.tokens_by_q = np.zeros(N_Q, np.int64)
        self.tokens_by_pq_sign = np.zeros(len(SIGNS), np.int64)
        self.tokens_by_turn = np.zeros(0, np.int64)
        """tokens per turn index (``--by turn``)."""
        self.seq_verdicts: dict[Unit, np.ndarray] = {}
        """sequence-rule unit -> rejected mask over sequences (filled by finish)."""
        self._tie = 0
        self.routed = False
        """the run has routes: count the flipped tokens each rule rejects."""

    def per_token_columns(self) -> list[str]:
        """Names of the per-sequence sums this accumulator adds to the sequence aggregator."""
        tails = [f"q{j}" for j in range(N_Q)] + [f"s{j}" for j in range(len(SIGNS))] if self.seq_units else []
        return (
            [f"rej{i}" for i in range(len(self.token_units))]
            + [f"rew{i}" for i in range(len(self.token_units))]
            + tails
        )

    def rule_columns(self, per_seq: dict[str, np.ndarray], n_tokens_S: np.ndarray) -> list[RuleColumn]:
        """Every token-rule unit's rejected and reweighted tokens per sequence, and the rejecting sequence
        rules' verdicts (after :meth:`finish`), for the per-sequence table."""
        cols = [RuleColumn(u, per_seq[f"rej{i}"], per_seq[f"rew{i}"]) for i, u in enumerate(self.token_units)]
        for u, rejected_S in self.seq_verdicts.items():
            r = rejected_S.astype(np.float64)
            cols.append(RuleColumn(u, r * n_tokens_S, np.zeros_like(r), r))
        return cols

    def spawn(self) -> MaskAccumulator:
        """An empty accumulator over the same units, for one batch on a worker thread (:meth:`merge` folds it back)."""
        spawned = MaskAccumulator([u.fresh() for u in self.units], self.n_examples)
        spawned.routed = self.routed
        return spawned

    def merge(self, other: MaskAccumulator) -> None:
        """Fold a spawned accumulator in; folding batches in file order keeps the examples' tie-breaks reproducible."""
        for a, b in zip(self.units, other.units, strict=True):
            a.merge(b)
        self.pair_counts += other.pair_counts
        self.tokens_by_q += other.tokens_by_q
        self.tokens_by_pq_sign += other.tokens_by_pq_sign
        self.tokens_by_turn = add_counts(self.tokens_by_turn, other.tokens_by_turn)
        for score, _, item in sorted(other._examples, key=lambda e: e[1]):  # in the order the batch offered them
            self._offer_example(score, item)

    def add(
        self,
        t: TokenTerms,
        advantage_T: np.ndarray | None,
        batch: dict,
        groups: Groups,
        flipped_T: np.ndarray | None = None,
        actions: dict[str, np.ndarray] | None = None,
        turn_T: np.ndarray | None = None,
    ) -> dict[str, np.ndarray]:
        """Count one batch; returns the per-sequence sums of :meth:`per_token_columns`, one row per run of ``groups``.

        ``flipped_T`` (runs with routes): which tokens went through different experts on the two sides.
        ``actions``, when given, receives each selected token unit's actions on the batch (KEEP, REJECT or
        REWEIGHT per token) under its ``Unit.key``: the audit writes them as they were counted.
        ``turn_T`` (``--by turn``): each token's turn, by which the rules' counts are also kept.
        """
        qi, sign = tail_codes(t)
        tail = qi * len(SIGNS) + sign  # sampler-probability bucket and sign of p - q, in one code
        per_seq = self._tail_sums(tail, groups)
        adv_sign = sign_code(advantage_T, 0.0) if advantage_T is not None else None
        if turn_T is not None:
            self.tokens_by_turn = add_counts(self.tokens_by_turn, np.bincount(turn_T))
        rejected_rows = []
        for i, u in enumerate(self.token_units):
            act = token_actions(u, t, advantage_T)
            if actions is not None and u.sweep is None:
                actions[u.key] = act
            v = Verdicts.of(act)
            rej_at, rew_at = self._count_unit(u, v.rejected, v.reweighted, tail, adv_sign, flipped_T)
            if turn_T is not None:
                u.rejected_by_turn = add_counts(u.rejected_by_turn, np.bincount(turn_T[rej_at]))
                u.reweighted_by_turn = add_counts(u.reweighted_by_turn, np.bincount(turn_T[rew_at]))
            per_seq[f"rej{i}"] = groups.count_at(rej_at)
            per_seq[f"rew{i}"] = groups.count_at(rew_at)
            if u in self.agree_token:
                rejected_rows.append(v.rejected)
        if rejected_rows:
            m = np.stack(rejected_rows)
            self.pair_counts += pair_counts(m)
            if self.n_examples:
                self._collect_examples(m, t, batch)
        return per_seq

    def _tail_sums(self, tail: np.ndarray, groups: Groups) -> dict[str, np.ndarray]:
        """Count the batch's tokens by bucket and sign; with sequence rules, also per sequence (what a
        rejected sequence takes with it)."""
        n_tail = N_Q * len(SIGNS)
        by_tail = np.bincount(tail, minlength=n_tail).reshape(N_Q, len(SIGNS))
        self.tokens_by_q += by_tail.sum(axis=1)
        self.tokens_by_pq_sign += by_tail.sum(axis=0)
        per_seq: dict[str, np.ndarray] = {}
        if self.seq_units:
            per_run = groups.count_codes(tail, n_tail).reshape(groups.n, N_Q, len(SIGNS))
            for j in range(N_Q):
                per_seq[f"q{j}"] = per_run[:, j, :].sum(axis=1)
            for j in range(len(SIGNS)):
                per_seq[f"s{j}"] = per_run[:, :, j].sum(axis=1)
        return per_seq

    @staticmethod
    def _count_unit(
        u: Unit,
        rej: np.ndarray,
        rew: np.ndarray,
        tail: np.ndarray,
        adv_sign: np.ndarray | None,
        flipped_T: np.ndarray | None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """Add one token unit's verdicts on the batch to its counts; returns the rejected and reweighted indices."""
        # rejections and reweights are rare: count them through their indices, not over every token
        rej_at, rew_at = np.flatnonzero(rej), np.flatnonzero(rew)
        u.tokens_rejected += int(rej_at.size)
        u.tokens_reweighted += int(rew_at.size)
        if flipped_T is not None:
            u.flipped_rejected += int(flipped_T[rej_at].sum())
        if u.rule.spec.acts == "reject":
            cut = np.bincount(tail[rej_at], minlength=N_Q * len(SIGNS)).reshape(N_Q, len(SIGNS))
            u.rejected_by_q += cut.sum(axis=1)
            u.rejected_by_pq_sign += cut.sum(axis=0)
        if adv_sign is not None and u.hypothesis == "data":
            by_sign = np.bincount(adv_sign[rej_at], minlength=3)
            for k, name in enumerate(("A>0", "A<0", "A=0")):
                u.rejected_by_sign[name] += int(by_sign[k])
        return rej_at, rew_at

    def _collect_examples(self, rej: np.ndarray, t: TokenTerms, batch: dict) -> None:
        votes = rej.sum(axis=0)
        split = np.flatnonzero((votes > 0) & (votes < rej.shape[0]))
        if split.size == 0:
            return
        score = np.abs(t.log_ratio_T[split])
        if split.size > self.n_examples:
            top = np.argpartition(-score, self.n_examples - 1)[: self.n_examples]
            split, score = split[top], score[top]
        for j, s in zip(split, score, strict=True):
            item = DisagreementExample(
                sequence_id=int(batch["sequence_id"][j]),
                position=int(batch["position"][j]),
                token_id=int(batch["token_id"][j]),
                p=float(t.p_T[j]),
                q=float(t.q_T[j]),
                log_ratio=float(t.log_ratio_T[j]),
                rejected_by=[u.display for k, u in enumerate(self.agree_token) if rej[k, j]],
                kept_by=[u.display for k, u in enumerate(self.agree_token) if not rej[k, j]],
            )
            self._offer_example(float(s), item)

    def _offer_example(self, score: float, item: DisagreementExample) -> None:
        self._tie += 1
        entry = (score, self._tie, item)
        if len(self._examples) < self.n_examples:
            heapq.heappush(self._examples, entry)
        elif entry[0] > self._examples[0][0]:
            heapq.heapreplace(self._examples, entry)

    def finish(
        self, seq: SequenceInputs, per_seq: dict[str, np.ndarray], by_turn: tuple[np.ndarray, TurnRows] | None = None
    ) -> MaskTotals:
        """The sequence rules' verdicts and what the result adds to the rows. ``by_turn``: the sequences' ids
        (in the order of ``seq``) and the run's tokens per (sequence, turn), for ``--by turn``."""
        n_tok = seq.n_tokens_S
        seq_masks: list[tuple[Unit, np.ndarray]] = []
        for i, u in enumerate(self.token_units):
            u.sequences_with_rejection = int((per_seq[f"rej{i}"] > 0).sum())
            u.sequences_with_reweight = int((per_seq[f"rew{i}"] > 0).sum())
        for u in self.seq_units:
            v = sequence_verdicts(u, seq)
            rej, rew = v.rejected, v.reweighted
            u.sequences_rejected = u.sequences_with_rejection = int(rej.sum())
            u.sequences_reweighted = u.sequences_with_reweight = int(rew.sum())
            u.tokens_rejected = int(n_tok[rej].sum())
            u.tokens_reweighted = int(n_tok[rew].sum())
            if ROUTE_FLIPPED in per_seq:
                u.flipped_rejected = int(per_seq[ROUTE_FLIPPED][rej].sum())
            if u.rule.spec.acts == "reject":
                u.rejected_by_q = np.array([int(per_seq[f"q{j}"][rej].sum()) for j in range(N_Q)])
                u.rejected_by_pq_sign = np.array([int(per_seq[f"s{j}"][rej].sum()) for j in range(len(SIGNS))])
            if seq.advantage_S is not None and u.hypothesis == "data":
                a = seq.advantage_S
                u.rejected_by_sign = {
                    "A>0": int(n_tok[rej & (a > 0)].sum()),
                    "A<0": int(n_tok[rej & (a < 0)].sum()),
                    "A=0": int(n_tok[rej & (a == 0)].sum()),
                }
            if u.sweep is None and u.rule.spec.acts == "reject":
                seq_masks.append((u, rej))
                self.seq_verdicts[u] = rej
            if by_turn is not None:
                ids, rows = by_turn
                u.rejected_by_turn = tokens_by_turn(rows, ids[rej])
                u.reweighted_by_turn = tokens_by_turn(rows, ids[rew])
        return MaskTotals(
            tokens_by_sampler_prob=dict(zip(q_bucket_labels(), map(int, self.tokens_by_q), strict=True)),
            tokens_by_pq_sign=dict(zip(SIGNS, map(int, self.tokens_by_pq_sign), strict=True)),
            agreement=self._agreement(seq_masks, per_seq, n_tok),
            examples=[e[2] for e in sorted(self._examples, key=lambda e: -e[0])],
        )

    def _agreement(self, seq_masks, per_seq, n_tok) -> list[RuleAgreement]:
        members: list[tuple[Unit, int]] = [(u, u.tokens_rejected) for u in self.agree_token] + [
            (u, u.tokens_rejected) for u, _ in seq_masks
        ]
        nt = len(self.agree_token)
        tok_counts = [per_seq[f"rej{self.token_units.index(u)}"] for u in self.agree_token]
        out = []
        for a in range(len(members)):
            for b in range(a + 1, len(members)):
                if a < nt and b < nt:
                    both = int(round(self.pair_counts[a, b]))
                elif a < nt:  # token rule x sequence rule
                    both = int(tok_counts[a][seq_masks[b - nt][1]].sum())
                else:  # two sequence rules
                    both = int(n_tok[seq_masks[a - nt][1] & seq_masks[b - nt][1]].sum())
                ua, na = members[a]
                ub, nb = members[b]
                union = na + nb - both
                out.append(
                    RuleAgreement(
                        a=ua.display,
                        b=ub.display,
                        a_params=ua.rule.params,
                        b_params=ub.rule.params,
                        both=both,
                        only_a=na - both,
                        only_b=nb - both,
                        jaccard=(both / union) if union else None,
                    )
                )
        return out


def unit_row(
    u: Unit, tokens: int, sequences: int, has_advantage: bool, routed: bool = False, turns: int | None = None
) -> RuleRow:
    """``routed`` (runs with routes) adds how many tokens flipped in some MoE layer the rule rejects; ``turns``
    (``--by turn``: the run's number of turns) its rejected and reweighted tokens per turn."""
    rejects = u.rule.spec.acts == "reject"
    return RuleRow(
        name=u.rule.name,
        params=u.rule.params,
        label=u.rule.label,
        level=u.rule.level,
        action=u.rule.spec.acts,
        uses_advantage=u.rule.spec.uses_advantage,
        hypothesis=u.hypothesis,
        tokens_rejected=u.tokens_rejected,
        tokens_reweighted=u.tokens_reweighted,
        token_reject_rate=u.tokens_rejected / tokens if tokens else None,
        token_reweight_rate=u.tokens_reweighted / tokens if tokens else None,
        sequences_rejected=u.sequences_rejected,
        sequences_reweighted=u.sequences_reweighted,
        sequences_with_rejection=u.sequences_with_rejection,
        sequences_with_reweight=u.sequences_with_reweight,
        sequence_reject_rate=u.sequences_rejected / sequences if sequences else None,
        rejected_by_advantage_sign=dict(u.rejected_by_sign) if has_advantage and u.hypothesis == "data" else None,
        rejected_by_sampler_prob=dict(zip(q_bucket_labels(), map(int, u.rejected_by_q), strict=True))
        if rejects
        else None,
        rejected_by_pq_sign=dict(zip(SIGNS, map(int, u.rejected_by_pq_sign), strict=True)) if rejects else None,
        route_flipped_rejected=u.flipped_rejected if routed else None,
        rejected_by_turn=turn_counts(u.rejected_by_turn, turns) if turns is not None else None,
        reweighted_by_turn=turn_counts(u.reweighted_by_turn, turns) if turns is not None else None,
    )


def turn_counts(counts: np.ndarray, turns: int) -> dict[str, float]:
    """Counts per turn as the JSON keys them: every turn of the run ("0", "1", ...), zeros included."""
    full = add_counts(np.zeros(turns, np.int64), counts)
    return {str(k): int(v) for k, v in enumerate(full)}  # whole counts, typed as the mean row's halves


def mean_row(a: RuleRow, b: RuleRow) -> RuleRow:
    """The "mean" hypothesis row: the average of the A>0 and A<0 rows (a count or rate that is None stays None)."""

    def avg(x: float | None, y: float | None) -> float | None:
        return None if x is None or y is None else (x + y) / 2

    def avg_map(x: dict[str, float] | None, y: dict[str, float] | None) -> dict[str, float] | None:
        return None if x is None or y is None else {k: (x[k] + y[k]) / 2 for k in x}

    return replace(
        a,
        hypothesis="mean",
        tokens_rejected=(a.tokens_rejected + b.tokens_rejected) / 2,
        tokens_reweighted=(a.tokens_reweighted + b.tokens_reweighted) / 2,
        token_reject_rate=avg(a.token_reject_rate, b.token_reject_rate),
        token_reweight_rate=avg(a.token_reweight_rate, b.token_reweight_rate),
        sequences_rejected=(a.sequences_rejected + b.sequences_rejected) / 2,
        sequences_reweighted=(a.sequences_reweighted + b.sequences_reweighted) / 2,
        sequences_with_rejection=(a.sequences_with_rejection + b.sequences_with_rejection) / 2,
        sequences_with_reweight=(a.sequences_with_reweight + b.sequences_with_reweight) / 2,
        sequence_reject_rate=avg(a.sequence_reject_rate, b.sequence_reject_rate),
        route_flipped_rejected=avg(a.route_flipped_rejected, b.route_flipped_rejected),
        rejected_by_sampler_prob=avg_map(a.rejected_by_sampler_prob, b.rejected_by_sampler_prob),
        rejected_by_pq_sign=avg_map(a.rejected_by_pq_sign, b.rejected_by_pq_sign),
        rejected_by_turn=avg_map(a.rejected_by_turn, b.rejected_by_turn),
        reweighted_by_turn=avg_map(a.reweighted_by_turn, b.reweighted_by_turn),
    )


_REGIONS = (("q<0.1", slice(0, 3)), ("0.1<=q<0.5", slice(3, 4)), ("q>=0.5", slice(4, N_Q)))
"""the three tails the reading names: low-probability buckets, the middle, high-probability buckets."""


def tail_reading(rows: list[RuleRow]) -> str | None:
    """One sentence on which tail each token-level rejecting rule cuts, computed from its breakdown.

    Per rule: the region of q holding most of its rejections (``q<0.1``, ``0.1<=q<0.5``, ``q>=0.5``;
    "across all q" when none holds more than half), and the sign of p - q of most of them (60% or more, else both signs).
    """
    parts = []
    for r in rows:
        if r.action != "reject" or r.level != "token" or r.hypothesis not in ("data", "mean"):
            continue
        total = r.tokens_rejected
        if not total or r.rejected_by_sampler_prob is None or r.rejected_by_pq_sign is None:
            continue  # a rejecting rule always has both breakdowns
        counts = list(r.rejected_by_sampler_prob.values())
        shares = [(sum(counts[sl]) / total, name) for name, sl in _REGIONS]
        share, region = max(shares)
        signs = r.rejected_by_pq_sign
        up, down = signs["p>q"] / total, signs["p<q"] / total
        sign = f"with p>q ({up:.0%})" if up >= 0.6 else f"with p<q ({down:.0%})" if down >= 0.6 else "of both signs"
        where = f"mostly {region} tokens ({share:.0%})" if share > 0.5 else "tokens across all q"
        parts.append(f"{r.name}{'' if r.hypothesis == 'data' else ' (mean of A>0, A<0)'} rejects {where} {sign}")
    if not parts:
        return None
    return "Which tail each rule cuts: " + "; ".join(parts) + "."
