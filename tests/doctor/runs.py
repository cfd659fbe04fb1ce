"""Small runs with known causes for doctor's tests: full distributions over a small vocabulary, tokens sampled
from the sampler's own distribution, noise whose scale differs from sequence to sequence.

Deliberately not the calibration corpus's generator (benchmarks/doctor_corpus.py): a second, simpler model,
so a test does not pass only because the corpus and the detectors were made to agree.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from mismatchscope.schema import write_table

VOCAB = 200


def log_softmax(z: np.ndarray) -> np.ndarray:
    m = z.max(-1, keepdims=True)
    return z - m - np.log(np.exp(z - m).sum(-1, keepdims=True))


@dataclass
class Run:
    """Per position: both sides' logits over the whole (small) vocabulary; the recorded columns."""

    seq: np.ndarray
    pos: np.ndarray
    zt: np.ndarray
    zs: np.ndarray
    k: int
    cols: dict[str, Any] = field(default_factory=dict)
    meta: dict[str, Any] = field(default_factory=dict)

    def write(self, folder: Path, name: str = "run.parquet") -> str:
        data = {}
        for key, v in self.cols.items():
            data[key] = [list(r) for r in v] if isinstance(v, np.ndarray) and v.ndim == 2 else v
        return str(write_table(folder / name, data, metadata=self.meta))


def make(
    seed: int,
    sequences: int = 60,
    length: int = 40,
    noise: float = 0.01,
    seq_sigma: float = 0.7,
    k: int = 5,
    peaked: float = 0.6,
) -> Run:
    """A clean run: per-logit Gaussian noise on the sampler, its scale log-normal per sequence."""
    rng = np.random.default_rng(seed)
    n = sequences * length
    seq = np.repeat(np.arange(sequences) + 100, length)
    pos = np.tile(np.arange(length), sequences)
    width = np.where(rng.random(n) < peaked, rng.uniform(5, 10, n), rng.uniform(0.5, 2, n))
    zt = rng.gumbel(0, 1, (n, VOCAB)) * width[:, None]
    scale = noise * np.exp(rng.normal(0, seq_sigma, sequences))[seq - 100]
    zs = zt + rng.normal(0, 1, zt.shape) * scale[:, None]
    return sample(Run(seq, pos, zt, zs, k), rng)


def sample(run: Run, rng: np.random.Generator, token: np.ndarray | None = None) -> Run:
    """The columns, with tokens drawn from the sampler's distribution (unless given)."""
    lt, ls = log_softmax(run.zt), log_softmax(run.zs)
    if token is None:
        p = np.exp(ls)
        token = (np.cumsum(p, 1) < rng.random(len(p))[:, None] * p.sum(1, keepdims=True)).sum(1)
        token = np.minimum(token, VOCAB - 1)
    rows = np.arange(len(token))
    cols: dict[str, Any] = {
        "sequence_id": run.seq,
        "position": run.pos,
        "token_id": token.astype(np.int64),
        "sampler_logprob": np.minimum(ls[rows, token], 0.0),
        "trainer_logprob": np.minimum(lt[rows, token], 0.0),
    }
    if run.k:
        order = np.argsort(-ls, 1)[:, : run.k]
        cols["sampler_topk_ids"] = order.astype(np.int64)
        cols["sampler_topk_logprobs"] = np.minimum(np.take_along_axis(ls, order, 1), 0.0)
        cols["trainer_logprobs_at_sampler_topk"] = np.minimum(np.take_along_axis(lt, order, 1), 0.0)
    cols.update({k: v for k, v in run.cols.items() if k not in cols and not k.startswith("_")})
    out = replace(run, cols=cols)
    out.cols["_token"] = token
    return out


def clean_columns(run: Run) -> dict[str, Any]:
    return {k: v for k, v in run.cols.items() if not k.startswith("_")}


def tempered(run: Run, t: float, rng: np.random.Generator, where: np.ndarray | None = None) -> Run:
    """The sampler at temperature ``t`` (on the rows ``where``), its tokens sampled from it."""
    w = np.ones(len(run.seq), bool) if where is None else where
    return sample(replace(run, zs=np.where(w[:, None], run.zs / t, run.zs)), rng)


def top_p(run: Run, p: float, rng: np.random.Generator, where: np.ndarray | None = None) -> Run:
    """The sampler renormalised over its top-p kept set (vLLM's rule), its tokens sampled from it."""
    w = np.ones(len(run.seq), bool) if where is None else where
    ls = log_softmax(run.zs)
    order = np.argsort(-ls, 1)
    ps = np.take_along_axis(np.exp(ls), order, 1)
    kept_sorted = (np.cumsum(ps, 1) - ps) < p
    kept = np.zeros_like(kept_sorted)
    np.put_along_axis(kept, order, kept_sorted, 1)
    zs = np.where(w[:, None] & ~kept, -np.inf, run.zs)
    return sample(replace(run, zs=zs), rng)


def in_base(cols: dict[str, Any], base: float, side: str = "sampler", where: np.ndarray | None = None) -> dict:
    """One side's logprobs (and its listed ones) written in log ``base``."""
    f = 1 / math.log(base)
    w = np.ones(len(cols["sequence_id"]), bool) if where is None else where
    out = dict(cols)
    out[f"{side}_logprob"] = np.where(w, cols[f"{side}_logprob"] * f, cols[f"{side}_logprob"])
    lists = "sampler_topk_logprobs" if side == "sampler" else "trainer_logprobs_at_sampler_topk"
    if lists in cols:
        out[lists] = np.where(w[:, None], cols[lists] * f, cols[lists])
    return out


def shifted(cols: dict[str, Any], k: int, sequences: np.ndarray | None = None) -> dict:
    """The sampler's record (its value and top-k) of token t written at position t - k, in ``sequences`` (all by
    default); rows left without a value dropped."""
    seq, pos = cols["sequence_id"], cols["position"]
    n = seq.size
    j = np.arange(n) + k
    ok = (j >= 0) & (j < n)
    ok[ok] &= (seq[j[ok]] == seq[ok]) & (pos[j[ok]] == pos[ok] + k)
    inside = np.ones(n, bool) if sequences is None else np.isin(seq, sequences)
    keep = np.flatnonzero(ok | ~inside)
    src = np.where(inside[keep], keep + k, keep)
    moved = {"sampler_logprob", "sampler_topk_ids", "sampler_topk_logprobs", "trainer_logprobs_at_sampler_topk"}
    return {c: (v[src] if c in moved else v[keep]) for c, v in cols.items()}


def padded(cols: dict[str, Any], rows: int, sequences: np.ndarray, rng: np.random.Generator) -> dict:
    """``rows`` pad rows (id 0, the sampler's value 0.0, the trainer's a real logprob of a pad) after each of
    ``sequences``."""
    ends = np.flatnonzero(np.r_[cols["sequence_id"][1:] != cols["sequence_id"][:-1], True])
    ends = ends[np.isin(cols["sequence_id"][ends], sequences)]
    idx = np.repeat(ends, rows)
    extra = {c: v[idx].copy() for c, v in cols.items()}
    extra["position"] = cols["position"][idx] + np.tile(np.arange(1, rows + 1), ends.size)
    extra["token_id"][:] = 0
    extra["sampler_logprob"][:] = 0.0
    extra["trainer_logprob"] = -rng.uniform(6, 12, idx.size)
    out = {c: np.concatenate([cols[c], extra[c]]) for c in cols}
    order = np.lexsort((out["position"], out["sequence_id"]))
    return {c: v[order] for c, v in out.items()}


def misjoined(cols: dict[str, Any], sequences: np.ndarray, rng: np.random.Generator) -> dict:
    """The trainer's side of each of ``sequences`` taken from another sequence (a join on row order)."""
    out = {c: v.copy() for c, v in cols.items()}
    seq = cols["sequence_id"]
    others = np.unique(seq)
    for s in sequences:
        a = np.flatnonzero(seq == s)
        b = np.flatnonzero(seq == rng.choice(others[~np.isin(others, sequences)]))
        src = b[np.arange(a.size) % b.size]
        out["trainer_logprob"][a] = cols["trainer_logprob"][src]
        if "trainer_logprobs_at_sampler_topk" in cols:
            out["trainer_logprobs_at_sampler_topk"][a] = cols["trainer_logprobs_at_sampler_topk"][src]
    return out


def write(cols: dict[str, Any], folder: Path, name: str = "run.parquet", meta: dict | None = None) -> str:
    data = {c: ([list(r) for r in v] if isinstance(v, np.ndarray) and v.ndim == 2 else v) for c, v in cols.items()}
    return str(write_table(folder / name, {c: v for c, v in data.items() if not c.startswith("_")}, metadata=meta))
