"""Streaming token-level statistics: headline metrics, tails, exact quantiles
and the "where is it" breakdowns.

Everything is a running sum, count or maximum, except the exact quantiles
(ratio and score-centering), which keep each token's value up to a cap (8
bytes a token for the log-ratio: 80 MB at 10 million tokens) and select the
order statistics once at the end (``quantiles.ExactQuantiles``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from ..divergence import TokenTerms
from ..metrics import (
    ABS_LOGPROB_DIFF_MEAN,
    CHI2_TOKEN,
    ESS,
    K1_MEAN,
    K2_MEAN,
    K3_MEAN,
    KL_REVERSE_K3_MEAN,
    SCORE_CENTERING,
    TAIL_MASS_RATIO,
    TV_TOKEN_MEAN,
)
from .quantiles import ExactQuantiles
from .results import Breakdowns, BucketRow, CenteringStat, KeptMass, ScoreCentering, TailMassRatio, TokenMetrics, TopK
from .sums import TOKEN_SUMS, summarise_sums, token_sums, token_weights

RATIO_QUANTILES = (0.001, 0.01, 0.05, 0.5, 0.95, 0.99, 0.999)
TAIL_CUTS = (1.25, 2.0, 5.0, 10.0)
Q_EDGES = (0.0, 1e-3, 1e-2, 0.1, 0.5, 0.9)
"""sampler-probability buckets [0,1e-3) [1e-3,1e-2) [1e-2,0.1) [0.1,0.5) [0.5,0.9) [0.9,1]."""
ENTROPY_EDGES = (0.0, 0.1, 0.5, 1.0, 2.0, 4.0)
"""trainer-entropy buckets in nats: [0,0.1) [0.1,0.5) [0.5,1) [1,2) [2,4) [4,inf)."""
JOINT_KEYS = 1 << 15
"""largest (bucket, position) key space summed in one keying (9 sums x 32k keys: 2 MB a batch)."""


def bucket_index(values_T: np.ndarray, edges: tuple[float, ...]) -> np.ndarray:
    """Index (uint8) of the bucket ``[edges[i], edges[i+1])`` holding each value; the last bucket is open above.

    Values below ``edges[0]`` land in bucket 0. For finite values this is
    ``clip(searchsorted(edges, v, "right") - 1, 0, len(edges) - 1)``, done as one
    comparison per edge, which for a handful of edges is several times faster;
    the comparisons' booleans are added as bytes (a bool is a 0 or 1 byte), a
    vectorised add where an integer index would cast every boolean first.
    """
    if len(edges) > 256:
        raise ValueError("bucket_index counts in uint8: at most 256 buckets")
    idx = np.zeros(values_T.shape, np.uint8)
    above = np.empty(values_T.shape, bool)
    for e in edges[1:]:
        idx += np.greater_equal(values_T, e, out=above).view(np.uint8)
    return idx


@dataclass
class TokenStats:
    """Running sums over all tokens; ``finish()`` turns them into the report's numbers."""

    sums: np.ndarray = field(default_factory=lambda: np.zeros(len(TOKEN_SUMS)))
    tv_max: float = 0.0
    abs_l_max: float = 0.0
    log_ratio_min: float = math.inf
    log_ratio_max: float = -math.inf
    tail_high: np.ndarray = field(default_factory=lambda: np.zeros(len(TAIL_CUTS), np.int64))
    tail_low: np.ndarray = field(default_factory=lambda: np.zeros(len(TAIL_CUTS), np.int64))
    log_ratios: ExactQuantiles = field(default_factory=lambda: ExactQuantiles(expect=RATIO_QUANTILES))
    """every token's log-ratio, for the exact ratio quantiles."""
    q_buckets: np.ndarray = field(default_factory=lambda: np.zeros((len(TOKEN_SUMS), len(Q_EDGES))))
    pos_sums: np.ndarray = field(default_factory=lambda: np.zeros((len(TOKEN_SUMS), 0)))
    ent_buckets: np.ndarray | None = None
    turn_sums: np.ndarray | None = None
    """a multi-turn run: the sums per turn index (``[sum, turn]``)."""
    topk_n: int = 0
    topk_tv_sum: float = 0.0
    topk_tv_max: float = 0.0
    topk_kl_sum: float = 0.0
    topk_kl_max: float = 0.0
    topk_mass_sum: float = 0.0
    _centering: dict[str, ExactQuantiles] = field(default_factory=dict)
    """score-centering statistic -> its defined per-token values (float32, for exact quantiles)."""
    _centering_sum: dict[str, float] = field(default_factory=dict)
    """score-centering statistic -> the float64 sum of its defined values (for the mean)."""
    empty_sampler_tail: int = 0
    empty_trainer_tail: int = 0
    empty_tails: int = 0
    kept_n: int = 0
    kept_sum: float = 0.0
    kept_min: float = 0.0
    quantiles: bool = True
    """keep the log-ratios for the exact ratio quantiles; False (a headline pass): the quantiles are None."""

    def add(
        self, t: TokenTerms, position_T: np.ndarray, entropy_T: np.ndarray | None, turn_T: np.ndarray | None = None
    ) -> None:
        l = t.log_ratio_T
        if l.size == 0:
            return
        w = token_weights(t)  # once per batch, for the keyings below
        # The three breakdowns (sampler probability, entropy, position) and the totals come from one
        # set of bincounts keyed by (probability bucket, entropy bucket, position) when that key
        # space is small, which is the cost of one keying instead of two.
        nq, ne = len(Q_EDGES), len(ENTROPY_EDGES)
        code = bucket_index(t.q_T, Q_EDGES)
        if entropy_T is not None:
            code = code * np.uint8(ne) + bucket_index(entropy_T, ENTROPY_EDGES)  # < 36: a uint8 holds it
        nc = nq * ne if entropy_T is not None else nq
        pos = position_T.astype(np.intp, copy=False)
        npos = int(pos.max()) + 1
        if nc * npos <= JOINT_KEYS:
            key = code.astype(np.intp)
            key *= npos
            key += pos
            joint = token_sums(key, nc * npos, w).reshape(len(TOKEN_SUMS), nc, npos)
            by_code, by_pos = joint.sum(axis=2), joint.sum(axis=1)
        else:
            by_code, by_pos = token_sums(code, nc, w), token_sums(pos, npos, w)
        if entropy_T is not None:
            both = by_code.reshape(len(TOKEN_SUMS), nq, ne)
            by_q = both.sum(axis=2)
            if self.ent_buckets is None:
                self.ent_buckets = np.zeros((len(TOKEN_SUMS), ne))
            self.ent_buckets += both.sum(axis=1)
        else:
            by_q = by_code
        self.q_buckets += by_q
        self.sums += by_q.sum(axis=1)
        self._grow_positions(npos)
        self.pos_sums[:, :npos] += by_pos
        if turn_T is not None:
            self._add_turns(token_sums(turn_T, int(turn_T.max()) + 1, w))
        self.tv_max = max(self.tv_max, float(t.tv_T.max()))
        self.abs_l_max = max(self.abs_l_max, float(w[2].max()))
        self.log_ratio_min = min(self.log_ratio_min, float(l.min()))
        self.log_ratio_max = max(self.log_ratio_max, float(l.max()))
        for i, c in enumerate(TAIL_CUTS):
            self.tail_high[i] += int(np.count_nonzero(t.ratio_T > c))
            self.tail_low[i] += int(np.count_nonzero(t.ratio_T < 1.0 / c))
        if self.quantiles:
            self.log_ratios.add(l)

    def _grow_positions(self, npos: int) -> None:
        if npos > self.pos_sums.shape[1]:
            grown = np.zeros((len(TOKEN_SUMS), npos))
            grown[:, : self.pos_sums.shape[1]] = self.pos_sums
            self.pos_sums = grown

    def _add_turns(self, by_turn: np.ndarray) -> None:
        if self.turn_sums is None:
            self.turn_sums = by_turn.copy()
            return
        if by_turn.shape[1] > self.turn_sums.shape[1]:
            self.turn_sums, by_turn = by_turn.copy(), self.turn_sums
        self.turn_sums[:, : by_turn.shape[1]] += by_turn

    def gather_on(self, workers: int | None) -> None:
        """Gather the exact quantiles' values on ``workers`` threads, as the pass that filled them ran."""
        for q in [self.log_ratios, *self._centering.values()]:
            q.workers = workers

    def spawn(self) -> TokenStats:
        """Empty statistics for one batch on another thread, whose exact quantiles keep what these keep
        (``ExactQuantiles.spawn``). The fold may add a column meanwhile: its items are copied at once."""
        columns = list(self._centering.items())  # one step under the GIL, unlike a loop over the dict
        return TokenStats(
            log_ratios=self.log_ratios.spawn(),
            _centering={k: v.spawn() for k, v in columns},
            quantiles=self.quantiles,
        )

    def merge(self, other: TokenStats) -> None:
        """Add another pass's statistics (a batch analysed on another thread) to these."""
        self.sums += other.sums
        self.tv_max = max(self.tv_max, other.tv_max)
        self.abs_l_max = max(self.abs_l_max, other.abs_l_max)
        self.log_ratio_min = min(self.log_ratio_min, other.log_ratio_min)
        self.log_ratio_max = max(self.log_ratio_max, other.log_ratio_max)
        self.tail_high += other.tail_high
        self.tail_low += other.tail_low
        self.log_ratios.merge(other.log_ratios)
        self.q_buckets += other.q_buckets
        npos = other.pos_sums.shape[1]
        self._grow_positions(npos)
        self.pos_sums[:, :npos] += other.pos_sums
        if other.turn_sums is not None:
            self._add_turns(other.turn_sums)
        if other.ent_buckets is not None:
            self.ent_buckets = (
                other.ent_buckets.copy() if self.ent_buckets is None else self.ent_buckets + other.ent_buckets
            )
        self.topk_n += other.topk_n
        self.topk_tv_sum += other.topk_tv_sum
        self.topk_tv_max = max(self.topk_tv_max, other.topk_tv_max)
        self.topk_kl_sum += other.topk_kl_sum
        self.topk_kl_max = max(self.topk_kl_max, other.topk_kl_max)
        self.topk_mass_sum += other.topk_mass_sum
        for k, v in other._centering.items():
            self._centering.setdefault(k, ExactQuantiles(expect=RATIO_QUANTILES)).merge(v)
            self._centering_sum[k] = self._centering_sum.get(k, 0.0) + other._centering_sum[k]
        self.empty_sampler_tail += other.empty_sampler_tail
        self.empty_trainer_tail += other.empty_trainer_tail
        self.empty_tails += other.empty_tails
        self.kept_n += other.kept_n
        self.kept_sum += other.kept_sum
        self.kept_min = min(self.kept_min, other.kept_min)

    def add_topk(self, tv_lower_T: np.ndarray, kl_lower_T: np.ndarray, mass_T: np.ndarray) -> None:
        if tv_lower_T.size == 0:
            return
        self.topk_n += tv_lower_T.size
        self.topk_tv_sum += float(tv_lower_T.sum())
        self.topk_tv_max = max(self.topk_tv_max, float(tv_lower_T.max()))
        self.topk_kl_sum += float(kl_lower_T.sum())
        self.topk_kl_max = max(self.topk_kl_max, float(kl_lower_T.max()))
        self.topk_mass_sum += float(mass_T.sum())

    def add_centering(self, c) -> None:
        """Per-token score-centering statistics (``topk.ScoreCentering``) of one batch."""
        for k, v32 in centering_values(c).items():
            self._centering.setdefault(k, ExactQuantiles(expect=RATIO_QUANTILES)).add(v32)
            self._centering_sum[k] = self._centering_sum.get(k, 0.0) + float(np.sum(v32, dtype=np.float64))
        self.empty_sampler_tail += int(np.count_nonzero(c.empty_sampler_tail_T))
        self.empty_trainer_tail += int(np.count_nonzero(c.empty_trainer_tail_T))
        self.empty_tails += int(np.count_nonzero(c.empty_sampler_tail_T | c.empty_trainer_tail_T))

    def quantile_columns(self) -> dict[str, ExactQuantiles]:
        """Every column whose exact quantiles the report prints: "log_ratio" and each score-centering statistic."""
        return {"log_ratio": self.log_ratios, **self._centering}

    def score_centering(self) -> ScoreCentering | None:
        """Means and quantiles over tokens; tokens where a statistic is undefined are counted apart."""
        if not self._centering:
            return None
        stats: dict[str, CenteringStat | None] = {}
        for m in SCORE_CENTERING:
            if m.name not in self._centering:
                stats[m.name] = None
                continue
            v = self._centering[m.name]
            n = v.n
            qs = v.quantiles(RATIO_QUANTILES) if n else [None] * len(RATIO_QUANTILES)
            kind = TailMassRatio if m is TAIL_MASS_RATIO else CenteringStat
            stats[m.name] = kind(
                tokens=n,
                mean=_f(self._centering_sum[m.name] / n) if n else None,
                quantiles={_g(q): _f(x) for q, x in zip(RATIO_QUANTILES, qs, strict=True)},
            )
        sampler, trainer, rho, overlap = stats.values()
        assert sampler is not None and trainer is not None and isinstance(rho, TailMassRatio)  # every top-k batch
        rho.undefined_tokens = self.empty_tails
        rho.empty_sampler_tail = self.empty_sampler_tail
        rho.empty_trainer_tail = self.empty_trainer_tail
        return ScoreCentering(sampler, trainer, rho, overlap, tokens=sampler.tokens)

    def add_kept_mass(self, kept_logmass_T: np.ndarray) -> None:
        ok = np.isfinite(kept_logmass_T)
        self.kept_n += int(ok.sum())
        self.kept_sum += float(kept_logmass_T[ok].sum())
        if ok.any():
            self.kept_min = min(self.kept_min, float(kept_logmass_T[ok].min()))

    # ---- results -------------------------------------------------------

    def metrics(self) -> TokenMetrics:
        s = summarise_sums(self.sums)
        n = s["tokens"]
        # quantiles of r = exp(l): exp is increasing, so r's order statistics are exp of l's
        qs = self.log_ratios.quantiles(RATIO_QUANTILES, np.exp) if self.log_ratios.n else [None] * len(RATIO_QUANTILES)
        return TokenMetrics(
            tv_token_mean=s.get(TV_TOKEN_MEAN.name),
            tv_token_max=self.tv_max if n else None,
            abs_logprob_diff_mean=s.get(ABS_LOGPROB_DIFF_MEAN.name),
            abs_logprob_diff_max=self.abs_l_max if n else None,
            k1_mean=s.get(K1_MEAN.name),
            k2_mean=s.get(K2_MEAN.name),
            k3_mean=s.get(K3_MEAN.name),
            kl_reverse_k3_mean=s.get(KL_REVERSE_K3_MEAN.name),
            chi2_token=s.get(CHI2_TOKEN.name),
            ess=s.get(ESS.name),
            ratio_min=math.exp(self.log_ratio_min) if n else None,
            ratio_max=_exp(self.log_ratio_max) if n else None,
            ratio_quantiles={_g(q): _f(v) for q, v in zip(RATIO_QUANTILES, qs, strict=True)},
            ratio_tail_high={
                _g(c): (int(k) / n if n else None) for c, k in zip(TAIL_CUTS, self.tail_high, strict=True)
            },
            ratio_tail_low={_g(c): (int(k) / n if n else None) for c, k in zip(TAIL_CUTS, self.tail_low, strict=True)},
        )

    def topk(self) -> TopK | None:
        if not self.topk_n:
            return None
        return TopK(
            tokens=self.topk_n,
            tv_topk_lower_mean=self.topk_tv_sum / self.topk_n,
            tv_topk_lower_max=self.topk_tv_max,
            kl_topk_lower_mean=self.topk_kl_sum / self.topk_n,
            kl_topk_lower_max=self.topk_kl_max,
            sampler_topk_mass_mean=self.topk_mass_sum / self.topk_n,
        )

    def kept_mass(self) -> KeptMass | None:
        if not self.kept_n:
            return None
        return KeptMass(
            tokens=self.kept_n, kept_logmass_mean=self.kept_sum / self.kept_n, kept_logmass_min=self.kept_min
        )

    def breakdowns(self) -> Breakdowns:
        out = Breakdowns(sampler_prob=[], position=[], entropy=None)
        labels = q_bucket_labels()
        for j, lab in enumerate(labels):
            out.sampler_prob.append(_row(lab, self.q_buckets[:, j]))
        npos = self.pos_sums.shape[1]
        if npos:
            edges = sorted({int(math.ceil(x)) for x in np.linspace(0, npos, 11)})
            for a, b in zip(edges, edges[1:], strict=False):
                lab = f"{a}" if b - a == 1 else f"{a}-{b - 1}"
                out.position.append(_row(lab, self.pos_sums[:, a:b].sum(axis=1)))
        if self.ent_buckets is not None:
            labs = entropy_bucket_labels()
            out.entropy = [_row(lab, self.ent_buckets[:, j]) for j, lab in enumerate(labs)]
        if self.turn_sums is not None:
            out.turn = [_row(str(j), self.turn_sums[:, j]) for j in range(self.turn_sums.shape[1])]
        return out


def centering_values(c) -> dict[str, np.ndarray]:
    """One batch's score-centering statistics as the quantiles keep them: float32, defined tokens only
    (NaN marks a token where a statistic is undefined; those are counted apart)."""
    sampler, trainer, rho, overlap = SCORE_CENTERING
    values = {sampler.name: c.sampler_mass_T, trainer.name: c.trainer_mass_T, rho.name: c.tail_ratio_T}
    if c.overlap_T is not None:
        values[overlap.name] = c.overlap_T
    out = {}
    for k, v in values.items():
        v32 = np.array(v, dtype=np.float32)  # a copy of its own: the quantiles keep it
        finite = np.isfinite(v32)
        out[k] = v32 if finite.all() else v32[finite]  # the masses are finite on every token: no second copy
    return out


def entropy_bucket_labels() -> list[str]:
    """The trainer-entropy buckets' labels, shared by report's breakdowns and timeline's ``--by entropy``."""
    return [f"[{_g(a)}, {_g(b)})" for a, b in zip(ENTROPY_EDGES, ENTROPY_EDGES[1:], strict=False)] + [
        f"[{_g(ENTROPY_EDGES[-1])}, inf)"
    ]


def q_bucket_labels() -> list[str]:
    """The sampler-probability buckets' labels, shared by report's breakdowns and compare-masks' tails."""
    return [f"[{_g(a)}, {_g(b)})" for a, b in zip(Q_EDGES, Q_EDGES[1:], strict=False)] + [f"[{_g(Q_EDGES[-1])}, 1]"]


def _row(bucket: str, s: np.ndarray) -> BucketRow:
    values = {k: _f(v) for k, v in summarise_sums(s).items()}
    tokens = int(values.pop("tokens") or 0)
    return BucketRow(bucket, tokens, **values)


def _g(x: float) -> str:
    return f"{x:g}"


def _exp(x: float) -> float:
    """exp(x), +inf past float64's range (a ratio of e^800 is not the largest float)."""
    with np.errstate(over="ignore"):
        return float(np.exp(x))


def _f(v):
    if v is None:
        return None
    if isinstance(v, (int, np.integer)):
        return int(v)
    v = float(v)
    return v if math.isfinite(v) else (None if math.isnan(v) else v)
