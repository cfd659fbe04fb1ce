"""doctor's calibration corpus: clean runs from several generators, every cause injected at three severities,
alone and in pairs, and the confusion table docs/doctor.md shows.

The generators share nothing with the detectors: they draw logits and noise, sample tokens from the
sampler's own distribution, and write what a sampler and a trainer would record. Each varies the things a
detector could be tuned to by accident:

* ``logits``: a vocabulary of 1k to 150k ids (a head of explicit logits, the rest a flat tail), peaked and
  flat positions mixed, sequences of 4 to 4,096 tokens; the sampler's logits carry noise of one of five
  families (Gaussian, Student-t with 3 degrees of freedom, Laplace, bfloat16 rounding of the logits,
  MoE-like flips: a few positions perturbed by O(1)), at a scale from float32's to bfloat16's, and the
  scale itself differs from sequence to sequence (log-normal with a SD of 0, 0.5 or 1 on the log scale) and,
  in some runs, drifts along the tokens (a log-AR(1) process, stationary SD 0.32);
* ``gaussian``: the benchmarks' pairs (``bench_analysis.make_file``'s model): a Gaussian gap with a 1%
  heavy tail and top-k lists unrelated to the sampled token;
* ``simulated``: ``sample_data/simulate_pairs.py`` with other seeds (bfloat16 logits, 3% routing flips);
* ``real``: probe runs of the bundled models (tiny-qwen3 and tiny-qwen3-moe) with the vLLM sampler at
  float16 and float32 and the transformers sampler at float16, bfloat16 and float32 (vLLM's CPU build
  cannot run bfloat16: its worker dies), made by ``--real DIR`` (see ``probe_runs``).

Causes are injected into ``logits`` runs (and, for those that need no full distribution, into real ones)
as a pipeline bug would make them: a temperature or a kept set changes the sampler's distribution and
the tokens are sampled from it, a log base or a rounding changes what is written, a shift or a misjoin
moves one side's records, pad rows are appended. The table: false alarms per detector on the clean runs
(a detected cause; exit 1), top-1 and top-2 accuracy per cause and severity, and the estimate's error.

Run: python benchmarks/doctor_corpus.py [--real DIR] [--out RESULTS.json] [--docs docs/doctor.md]
     python benchmarks/doctor_corpus.py --slice 12      # a small slice (what the test runs)
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

HEAD = 48
"""explicit logits per position; the rest of the vocabulary is a flat tail."""


# -- the form every generator produces --------------------------------------------------------------------------


@dataclass
class Run:
    """Per-position distributions of both sides (head logits, a flat tail), the sampled tokens, and extras."""

    name: str
    family: str
    seq: np.ndarray
    pos: np.ndarray
    ids: np.ndarray  # [N, H] vocabulary ids of the head
    zt: np.ndarray  # [N, H] trainer logits
    zs: np.ndarray  # [N, H] sampler logits
    tail_n: np.ndarray  # [N] ids in the tail
    tail_t: np.ndarray  # [N] each tail id's trainer logit
    tail_s: np.ndarray  # [N] each tail id's sampler logit
    k: int  # ids the sampler lists (0: no top-k columns)
    extras: dict[str, np.ndarray] = field(default_factory=dict)
    meta: dict[str, Any] = field(default_factory=dict)
    vocab: int = 0
    # recorded values, set by ``record`` (and changed by injections that act on what is written)
    cols: dict[str, Any] | None = None


def _lse(z: np.ndarray, tail_n: np.ndarray, tail_z: np.ndarray) -> np.ndarray:
    m = np.maximum(z.max(1), np.where(tail_n > 0, tail_z, -np.inf))
    tail = np.where(tail_n > 0, tail_n * np.exp(tail_z - m), 0.0)
    return m + np.log(np.exp(z - m[:, None]).sum(1) + tail)


def logprobs(z: np.ndarray, tail_n: np.ndarray, tail_z: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(head logprobs [N, H], each tail id's logprob [N])."""
    lse = _lse(z, tail_n, tail_z)
    return z - lse[:, None], tail_z - lse


def sample_tokens(rng: np.random.Generator, run: Run, ls: np.ndarray, tail_ls: np.ndarray) -> np.ndarray:
    """Index into the head of each sampled token, or -1 for a tail token (drawn from the sampler's distribution)."""
    p = np.exp(ls)
    tail_mass = np.clip(run.tail_n * np.exp(tail_ls), 0, None)
    total = p.sum(1) + tail_mass
    u = rng.random(p.shape[0]) * total
    c = np.cumsum(p, 1)
    idx = (c < u[:, None]).sum(1)
    return np.where(idx >= p.shape[1], -1, idx)


def record(rng: np.random.Generator, run: Run, token: np.ndarray | None = None) -> Run:
    """The columns a sampler and a trainer would write for this run (sampling the tokens unless given)."""
    lt, tail_lt = logprobs(run.zt, run.tail_n, run.tail_t)
    ls, tail_ls = logprobs(run.zs, run.tail_n, run.tail_s)
    if token is None:
        token = sample_tokens(rng, run, ls, tail_ls)
    rows = np.arange(token.size)
    head = token >= 0
    tok_id = np.where(
        head,
        run.ids[rows, np.maximum(token, 0)],
        run.vocab - 1 - rng.integers(0, 1000, token.size) % max(run.vocab - HEAD, 1),
    )
    lp = np.where(head, lt[rows, np.maximum(token, 0)], tail_lt)
    lq = np.where(head, ls[rows, np.maximum(token, 0)], tail_ls)
    cols: dict[str, Any] = {
        "sequence_id": run.seq,
        "position": run.pos,
        "token_id": tok_id.astype(np.int64),
        "sampler_logprob": np.minimum(lq, 0.0),
        "trainer_logprob": np.minimum(lp, 0.0),
    }
    if run.k:
        order = np.argsort(-ls, 1)[:, : run.k]
        cols["sampler_topk_ids"] = np.take_along_axis(run.ids, order, 1)
        cols["sampler_topk_logprobs"] = np.minimum(np.take_along_axis(ls, order, 1), 0.0)
        cols["trainer_logprobs_at_sampler_topk"] = np.minimum(np.take_along_axis(lt, order, 1), 0.0)
    h = -(np.exp(lt) * lt).sum(1) - run.tail_n * np.exp(tail_lt) * tail_lt
    cols["trainer_entropy"] = np.maximum(h, 0.0)
    if run.meta.get("_sharpening"):
        # the sampler's error is larger where the model is confident: a gap flat within each entropy bucket
        sigma = 0.005 * (1 + 3 * np.exp(-cols["trainer_entropy"]))
        cols["sampler_logprob"] = np.minimum(cols["sampler_logprob"] + rng.normal(0, 1, sigma.size) * sigma, 0.0)
        if "sampler_topk_logprobs" in cols:
            v = cols["sampler_topk_logprobs"]
            cols["sampler_topk_logprobs"] = np.minimum(v + rng.normal(0, 1, v.shape) * sigma[:, None], v)
    cols.update({k: v for k, v in run.extras.items() if not k.startswith("_")})
    return replace(run, cols=cols, extras={**run.extras, "_token": token})


# -- generators of clean runs -----------------------------------------------------------------------------------

NOISE = ("gauss", "student", "laplace", "bf16", "moe")


def _noise(rng: np.random.Generator, family: str, shape: tuple[int, ...], scale: np.ndarray) -> np.ndarray:
    s = scale.reshape(-1, *([1] * (len(shape) - 1)))
    if family == "gauss":
        return rng.normal(0, 1, shape) * s
    if family == "student":
        return rng.standard_t(3, shape) / math.sqrt(3) * s
    if family == "laplace":
        return rng.laplace(0, 1 / math.sqrt(2), shape) * s
    if family == "moe":
        flip = rng.random(shape[0]) < 0.03
        base = rng.normal(0, 1, shape) * s
        return base + np.where(flip.reshape(-1, *([1] * (len(shape) - 1))), rng.normal(0, 1.0, shape), 0.0)
    raise ValueError(family)


def bf16(x: np.ndarray) -> np.ndarray:
    b = x.astype(np.float32).view(np.uint32).astype(np.uint64)
    b = (b + 0x7FFF + ((b >> 16) & 1)) >> 16 << 16
    return b.astype(np.uint32).view(np.float32).astype(np.float64)


def fp16(x: np.ndarray) -> np.ndarray:
    return x.astype(np.float16).astype(np.float64)


def lengths(rng: np.random.Generator, tokens: int, long: bool) -> np.ndarray:
    out, total = [], 0
    while total < tokens:
        n = int(np.clip(rng.lognormal(math.log(600 if long else 60), 0.8), 4, 4096))
        out.append(n)
        total += n
    return np.array(out)


def logits_run(seed: int, **over: Any) -> Run:
    """A clean run of the ``logits`` generator; ``over`` fixes any of its random choices."""
    rng = np.random.default_rng(seed)
    p = {
        "vocab": int(rng.choice([1000, 8000, 32000, 150000])),
        "peaked": float(rng.choice([0.5, 0.7, 0.9])),
        "noise": str(rng.choice(NOISE)),
        "scale": float(10 ** rng.uniform(-3.5, -1.2)),
        "seq_sigma": float(rng.choice([0.0, 0.5, 1.0])),
        "ar": bool(rng.random() < 0.3),
        "both": bool(rng.random() < 0.3),
        "k": int(rng.choice([0, 5, 5, 20])),
        "long": bool(rng.random() < 0.2),
        "tokens": int(rng.choice([3000, 8000, 20000])),
        "advantage": bool(rng.random() < 0.5),
        "steps": int(rng.choice([0, 0, 8, 12])),
    }
    p.update(over)
    lens = lengths(rng, p["tokens"], p["long"])
    n_seq = lens.size
    seq = np.repeat(np.arange(n_seq) + 1000 * (seed % 7), lens)
    pos = np.concatenate([np.arange(n) for n in lens])
    n = seq.size
    head = min(HEAD, p["vocab"])
    # peaked positions: one dominant logit; flat ones: spread
    peaked = rng.random(n) < p["peaked"]
    width = np.where(peaked, rng.uniform(4, 12, n), rng.uniform(0.5, 2.5, n))
    zt = np.sort(rng.gumbel(0, 1, (n, head)), 1)[:, ::-1] * width[:, None]
    tail_n = np.full(n, p["vocab"] - head)
    tail_t = zt[:, -1] - rng.uniform(0.5, 3.0, n) - np.log(np.maximum(tail_n, 1)) * rng.uniform(0.0, 0.6, n)
    ids = (rng.permutation(p["vocab"])[:head][None, :] + rng.integers(0, p["vocab"], (n, 1))) % p["vocab"]
    seq_scale = np.exp(rng.normal(0, p["seq_sigma"], n_seq))[np.searchsorted(np.unique(seq), seq)]
    scale = p["scale"] * seq_scale
    if p["ar"]:  # the noise scale drifts along the tokens: log-AR(1), stationary SD 0.32 (a factor 1.4 either way)
        drift = np.zeros(n)
        steps = rng.normal(0, 0.1, n)
        for i in range(1, n):
            drift[i] = 0.95 * drift[i - 1] + steps[i]
        scale = scale * np.exp(drift)
    if p["noise"] == "bf16":
        zs = bf16(zt * (1 + rng.normal(0, 1, (n, 1)) * 1e-3)) + _noise(rng, "gauss", zt.shape, scale * 0.1)
    else:
        zs = zt + _noise(rng, p["noise"], zt.shape, scale)
    if p["both"]:
        zt = zt + _noise(rng, "gauss", zt.shape, scale * 0.5)
    tail_s = tail_t + _noise(rng, "gauss", (n,), scale)
    extras: dict[str, np.ndarray] = {}
    uniq = np.unique(seq)
    where = np.searchsorted(uniq, seq)
    if p["advantage"]:
        extras["advantage"] = rng.normal(0, 1, uniq.size)[where]
    if p["steps"]:
        extras["step"] = (np.arange(uniq.size) * p["steps"] // uniq.size)[where].astype(np.int64)
    meta: dict[str, Any] = {}
    dtype = {True: "float32", False: "bfloat16"}[p["scale"] < 3e-3] if rng.random() < 0.5 else None
    if dtype:
        meta = {"sampler": {"dtype": dtype}, "trainer": {"dtype": "float32"}}
    run = Run(
        f"logits-{seed}", "logits", seq, pos, ids, zt, zs, tail_n, tail_t, tail_s, p["k"], extras, meta, p["vocab"]
    )
    run.meta["_params"] = dict(p.items())
    return record(rng, run)


def gaussian_run(seed: int) -> dict[str, Any]:
    """bench_analysis.make_file's model, small."""
    rng = np.random.default_rng(10_000 + seed)
    seqs, per = int(rng.choice([100, 300])), int(rng.choice([20, 100]))
    n, k = seqs * per, 5
    lq = -rng.exponential(0.8, n)
    lp = np.minimum(lq + rng.normal(0, 0.02, n) * (1 + 10 * (rng.random(n) < 0.01)), 0.0)
    top = np.sort(-rng.exponential(2.0, (n, k)), axis=1)[:, ::-1]
    top[:, 0] = np.maximum(top[:, 0], lq)
    return {
        "sequence_id": np.repeat(np.arange(seqs), per),
        "position": np.tile(np.arange(per), seqs),
        "token_id": rng.integers(0, 150_000, n),
        "sampler_logprob": lq,
        "trainer_logprob": lp,
        "advantage": np.repeat(rng.normal(0, 1, seqs), per),
        "trainer_entropy": rng.exponential(1.0, n),
        "sampler_topk_ids": rng.integers(0, 150_000, (n, k)),
        "sampler_topk_logprobs": top,
        "trainer_logprobs_at_sampler_topk": np.minimum(top + rng.normal(0, 0.02, (n, k)), 0.0),
    }


def simulated_run(seed: int) -> dict[str, Any]:
    sys.path.insert(0, str(ROOT / "sample_data"))
    from simulate_pairs import simulate

    return {k: np.asarray(v) for k, v in simulate(seed).items()}


# -- real probe runs ------------------------------------------------------------------------------------------

REAL_CONFIGS = (
    ("vllm", "float16", "float32"),
    ("vllm", "float32", "float32"),
    ("hf", "float16", "float32"),
    ("hf", "bfloat16", "float32"),
    ("hf", "float32", "float32"),
    ("hf", "bfloat16", "bfloat16"),
)
"""(sampler, sampler dtype, trainer dtype): vLLM's CPU build cannot run bfloat16 (its worker dies), so bfloat16
samples come from the transformers sampler."""


def real_runs(folder: Path) -> list[tuple[str, Path]]:
    """The complete probe runs under ``folder`` (made by ``probe_runs``)."""
    out = []
    for d in sorted(folder.iterdir()) if folder.is_dir() else []:
        m = d / "manifest.json"
        if m.is_file() and json.loads(m.read_text()).get("status") == "complete":
            out.append((d.name, d))
    return out


def read_run(path: Path) -> dict[str, Any]:
    import pyarrow.parquet as pq

    tables = [pq.read_table(f) for f in sorted((path / "tokens").glob("*.parquet"))]
    import pyarrow as pa

    t = pa.concat_tables(tables)
    order = np.lexsort((t["position"].to_numpy(), t["sequence_id"].to_numpy()))
    t = t.take(order)
    cols: dict[str, Any] = {}
    for c in (
        "sequence_id",
        "position",
        "token_id",
        "sampler_logprob",
        "trainer_logprob",
        "prompt_id",
        "advantage",
        "sampler_topk_ids",
        "sampler_topk_logprobs",
        "trainer_logprobs_at_sampler_topk",
    ):
        if c in t.column_names:
            v = t[c].to_pylist() if "topk" in c else t[c].to_numpy()
            cols[c] = np.asarray(v, dtype=np.float64 if "logprob" in c else None) if "topk" in c else v
    cols["_meta"] = json.loads((path / "manifest.json").read_text())
    return cols


# -- injections ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Injection:
    cause: str
    severity: str  # weak, middle, strong
    param: float


SEVERITIES: dict[str, tuple[float, float, float]] = {
    "temperature": (0.9, 0.7, 1.3),
    "truncation": (0.95, 0.9, 0.7),
    "shifted": (1, 2, -1),
    "log_base": (-2, 2, 10),  # -2: the trainer in log2; 2: the sampler in log2; 10: the sampler in log10
    "misaligned_sequences": (0.01, 0.05, 0.2),
    "padding": (1, 5, 20),
    "prompt_boundary": (1, 2, 4),
    "low_precision": (16, 7, -7),  # float16 grid, bfloat16 grid on the sampler; -7: bfloat16 on both sides
    "policy_lag": (0.05, 0.2, 0.5),
    "step_jump": (0.3, 1.0, 3.0),  # the trainer's logits of one step perturbed by this (nats, per logit)
    "off_policy_minibatches": (2, 4, 8),
    "sharpening": (0.3, 0.6, 0.85),
}
NO_TOPK = {"temperature": 0.7, "truncation": 0.9}
"""the same causes in runs without top-k columns: a rough reading, shown as rows of their own."""


def levels(cause: str) -> list[tuple[str, float]]:
    """Each severity of a cause with its parameter (and the no-top-k row where there is one)."""
    out = list(zip(("weak", "middle", "strong"), SEVERITIES[cause], strict=True))
    return out + ([("no-topk", NO_TOPK[cause])] if cause in NO_TOPK else [])


EXPECTED_PIPELINE = {"policy_lag": True, "off_policy_minibatches": False, "sharpening": False}
"""the verdict each cause should give when injected alone: pipeline except where the run declares it."""


def inject(rng: np.random.Generator, run: Run, inj: Injection) -> Run:
    """``run`` with one cause injected (the recorded columns made again where the distributions change)."""
    c, x = inj.cause, inj.param
    token = run.extras.get("_token")
    if c == "temperature":
        return record(rng, replace(run, zs=run.zs / x, tail_s=run.tail_s / x))
    if c == "truncation":
        ls, _tail_ls = logprobs(run.zs, run.tail_n, run.tail_s)
        order = np.argsort(-ls, 1)
        p_sorted = np.take_along_axis(np.exp(ls), order, 1)
        before = np.cumsum(p_sorted, 1) - p_sorted
        kept_sorted = before < x
        kept = np.zeros_like(kept_sorted)
        np.put_along_axis(kept, order, kept_sorted, 1)
        keep_tail = p_sorted.sum(1) < x  # the head alone does not reach p: the tail is kept too
        zs = np.where(kept, run.zs, -np.inf)
        tail_s = np.where(keep_tail, run.tail_s, -np.inf)
        out = record(rng, replace(run, zs=zs, tail_s=tail_s))
        cols = dict(out.cols or {})
        for name in ("sampler_topk_logprobs",):
            if name in cols:
                cols[name] = np.where(np.isfinite(cols[name]), cols[name], -np.inf)
        return replace(out, cols=cols)
    if c == "prompt_boundary":
        n = int(x)
        lead = run.pos < n
        zt = run.zt + np.where(lead[:, None], rng.normal(0, 0.8 * n, run.zt.shape), 0.0)
        return record(rng, replace(run, zt=zt), token)
    if c == "policy_lag":
        adv = run.extras.get("advantage")
        if adv is None:
            adv = np.repeat(
                rng.normal(0, 1, np.unique(run.seq).size), np.bincount(np.searchsorted(np.unique(run.seq), run.seq))
            )
        zt = run.zt + rng.normal(0, x, run.zt.shape)
        tok = np.maximum(token, 0)
        rows = np.arange(tok.size)
        zt[rows, tok] += x * np.sign(adv) * (token >= 0)
        return record(rng, replace(run, zt=zt, extras={**run.extras, "advantage": adv}), token)
    if c == "step_jump":
        steps = run.extras.get("step")
        if steps is None:
            uniq = np.unique(run.seq)
            steps = (np.arange(uniq.size) * 10 // uniq.size)[np.searchsorted(uniq, run.seq)].astype(np.int64)
        bad = steps == np.unique(steps)[len(np.unique(steps)) // 2]
        zt = run.zt + np.where(bad[:, None], rng.normal(0, x, run.zt.shape), 0.0)
        return record(rng, replace(run, zt=zt, extras={**run.extras, "step": steps}), token)
    if c == "off_policy_minibatches":
        m = int(x)
        uniq = np.unique(run.seq)
        where = np.searchsorted(uniq, run.seq)
        steps = (np.arange(uniq.size) * 6 // uniq.size)[where].astype(np.int64)
        mb = (np.arange(uniq.size) % m)[where]
        zt = run.zt + rng.normal(0, 1, run.zt.shape) * (0.15 * mb)[:, None]
        steps = run.extras.get("step", steps)  # a run with steps keeps them: its minibatches are within them
        extras = {**run.extras, "step": steps, "minibatch": mb.astype(np.int32)}
        return record(rng, replace(run, zt=zt, extras=extras), token)
    if c == "sharpening":
        uniq = np.unique(run.seq)
        where = np.searchsorted(uniq, run.seq)
        steps = (np.arange(uniq.size) * 10 // uniq.size)[where].astype(np.int64)
        sharpen = 1 + x * 3 * steps / 9  # logits grow over the steps: the entropy falls
        zt = run.zt * sharpen[:, None]
        sharp = replace(
            run,
            zt=zt,
            zs=zt,
            tail_t=run.tail_t * sharpen,
            tail_s=run.tail_t * sharpen,
            extras={**run.extras, "step": steps},
            meta={**run.meta, "_sharpening": True},
        )
        return record(rng, sharp)
    return replace(run, cols=inject_columns(rng, dict(run.cols or {}), inj))


def inject_columns(rng: np.random.Generator, cols: dict[str, Any], inj: Injection) -> dict[str, Any]:
    """Causes that act on what is written: any run, real ones included."""
    c, x = inj.cause, inj.param
    seq = np.asarray(cols["sequence_id"])
    if c == "log_base":
        f = 1 / math.log(abs(x))
        side = "trainer" if x < 0 else "sampler"
        cols[f"{side}_logprob"] = np.asarray(cols[f"{side}_logprob"]) * f
        lists = "sampler_topk_logprobs" if side == "sampler" else "trainer_logprobs_at_sampler_topk"
        if lists in cols:
            cols[lists] = _map_lists(cols[lists], lambda v: v * f)
        return cols
    if c == "low_precision":
        grid = fp16 if abs(x) == 16 else bf16
        for side in ("sampler",) if x > 0 else ("sampler", "trainer"):
            cols[f"{side}_logprob"] = grid(np.asarray(cols[f"{side}_logprob"]))
        return cols
    if c == "shifted":
        k = int(x)
        pos = np.asarray(cols["position"])
        n = seq.size
        j = np.arange(n) + k
        ok = (j >= 0) & (j < n)
        ok[ok] &= (seq[j[ok]] == seq[ok]) & (pos[j[ok]] == pos[ok] + k)
        keep = np.flatnonzero(ok)
        moved = ("sampler_logprob", "sampler_topk_ids", "sampler_topk_logprobs", "trainer_logprobs_at_sampler_topk")
        out = {}
        for name, v in cols.items():
            out[name] = _take(v, keep + k) if name in moved else _take(v, keep)
        return out
    if c == "misaligned_sequences":
        uniq = np.unique(seq)
        n_bad = max(1, int(round(x * uniq.size)))
        bad = rng.choice(uniq, size=n_bad, replace=False)
        lp = np.asarray(cols["trainer_logprob"]).copy()
        lists = cols.get("trainer_logprobs_at_sampler_topk")
        lists = None if lists is None else _copy_lists(lists)
        for s in bad:
            a = np.flatnonzero(seq == s)
            other = rng.choice(uniq[uniq != s])
            b = np.flatnonzero(seq == other)
            src = b[np.arange(a.size) % b.size]
            lp[a] = np.asarray(cols["trainer_logprob"])[src]
            if lists is not None:
                for i, j in zip(a, src, strict=True):
                    n_i = len(lists[i])
                    v = np.asarray(cols["trainer_logprobs_at_sampler_topk"][j])
                    lists[i] = np.resize(v, n_i)
        cols["trainer_logprob"] = lp
        if lists is not None:
            cols["trainer_logprobs_at_sampler_topk"] = lists
        return cols
    if c == "padding":
        rows = int(x)
        uniq = np.unique(seq)
        padded = rng.choice(uniq, size=max(2, int(len(uniq) * (0.25 if rows < 20 else 0.5))), replace=False)
        ends = np.flatnonzero(np.r_[seq[1:] != seq[:-1], True])
        take = [i for i in ends if seq[i] in set(padded.tolist())]
        extra: dict[str, list] = {k: [] for k in cols}
        for i in take:
            for r in range(rows):
                for k, v in cols.items():
                    extra[k].append(v[i])
                extra["position"][-1] = cols["position"][i] + 1 + r
                extra["token_id"][-1] = 0
                extra["sampler_logprob"][-1] = 0.0
                extra["trainer_logprob"][-1] = -float(rng.uniform(6, 14))
        out = {}
        for k, v in cols.items():
            if isinstance(v, np.ndarray) and v.ndim == 1:
                out[k] = np.concatenate([v, np.asarray(extra[k], dtype=v.dtype)])
            else:
                out[k] = list(v) + list(extra[k])
        order = np.lexsort((np.asarray(out["position"]), np.asarray(out["sequence_id"])))
        return {k: _take(v, order) for k, v in out.items()}
    raise ValueError(c)


def _take(v: Any, idx: np.ndarray) -> Any:
    if isinstance(v, np.ndarray):
        return v[idx]
    return [v[i] for i in idx]


def _copy_lists(v: Any) -> list:
    return [np.array(x, dtype=np.float64) for x in v]


def _map_lists(v: Any, f) -> Any:
    if isinstance(v, np.ndarray):
        return f(v)
    return [f(np.asarray(x, dtype=np.float64)) for x in v]


# -- writing and examining ---------------------------------------------------------------------------------------


def write(cols: dict[str, Any], path: Path, meta: dict[str, Any] | None = None) -> str:
    from mismatchscope.schema import write_table

    data = {}
    for k, v in cols.items():
        if k.startswith("_"):
            continue
        if isinstance(v, np.ndarray) and v.ndim == 2:
            data[k] = [list(r) for r in v]
        elif isinstance(v, list):
            data[k] = [list(np.asarray(r, dtype=np.float64 if "logprob" in k else np.int64)) for r in v]
        else:
            data[k] = v
    write_table(path, data, metadata={k: v for k, v in (meta or {}).items() if not k.startswith("_")})
    return str(path)


@dataclass
class Case:
    name: str
    generator: str
    cols: dict[str, Any]
    meta: dict[str, Any]
    injected: tuple[Injection, ...] = ()


def examine_case(case: Case, folder: Path) -> dict[str, Any]:
    from mismatchscope.doctor import doctor

    path = write(case.cols, folder / f"{case.name}.parquet", case.meta)
    t0 = time.perf_counter()
    doc = doctor(path)
    detected = [f for f in doc.findings if f.status == "detected" and f.cause != "numerics"]
    major = [f.cause for f in detected if not f.minor]
    out = {
        "name": case.name,
        "generator": case.generator,
        "injected": [[i.cause, i.severity, i.param] for i in case.injected],
        "verdict": doc.verdict,
        "top": doc.top.cause,
        "ranked": major + [f.cause for f in detected if f.minor],
        "detected": [f.cause for f in detected],
        "estimates": {f.cause: {k: v for k, v in f.estimate.items() if isinstance(v, (int, float))} for f in detected},
        "seconds": time.perf_counter() - t0,
        "tokens": doc.tokens,
    }
    Path(path).unlink()
    return out


# -- the corpus ---------------------------------------------------------------------------------------------------


def clean_cases(real: Path | None, n_logits: int, n_gaussian: int = 20, n_simulated: int = 10) -> Iterator[Case]:
    """The clean runs, made one at a time."""
    for seed in range(n_logits):
        r = logits_run(seed)
        yield Case(f"clean-logits-{seed}", "logits", r.cols or {}, r.meta)
    for seed in range(n_gaussian):
        yield Case(f"clean-gaussian-{seed}", "gaussian", gaussian_run(seed), {})
    for seed in range(n_simulated):
        yield Case(f"clean-simulated-{seed}", "simulated", simulated_run(seed + 1), {})
    if real is not None:
        for name, path in real_runs(real):
            cols = read_run(path)
            meta = cols.pop("_meta")
            yield Case(f"clean-real-{name}", "real", cols, _run_meta(meta))


def _run_meta(manifest: dict[str, Any]) -> dict[str, Any]:
    keep = {}
    for k in ("sampler", "trainer", "sampling", "semantics"):
        if k in manifest:
            keep[k] = manifest[k]
    return keep


ORDER = (
    "sharpening",
    "temperature",
    "truncation",
    "prompt_boundary",
    "policy_lag",
    "step_jump",
    "off_policy_minibatches",
    "log_base",
    "low_precision",
    "misaligned_sequences",
    "shifted",
    "padding",
)
"""the order injections are made in: what redraws the distributions first, what moves records last."""


def _base_for(injs: tuple[Injection, ...], rng: np.random.Generator, i: int) -> Run:
    """A clean logits run suited to the injections: one each cause can be seen in at all."""
    over: dict[str, Any] = {"tokens": 6000, "k": int(rng.choice([5, 20]))}
    causes = {j.cause for j in injs}
    if causes - {"shifted", "temperature", "truncation", "log_base", "low_precision"}:
        over["long"] = False  # causes read across sequences or steps need more than a handful of sequences
    if "low_precision" in causes:
        over.update(scale=float(10 ** rng.uniform(-4.5, -3.5)), noise="gauss")
    if "policy_lag" in causes:
        over["advantage"] = True
    if "sharpening" in causes:
        over.update(scale=1e-4, tokens=12000, peaked=0.2)  # a policy with entropy left to lose
    if any(j.severity == "no-topk" for j in injs):
        over["k"] = 0
    return logits_run(5000 + i, **over)


def injected_cases(replicas: int, pairs: bool, seed: int = 0) -> Iterator[Case]:
    """Every cause at each severity (``replicas`` runs each), then every two at the middle one; made one at a time."""
    rng = np.random.default_rng(seed)
    i = 0
    for cause in SEVERITIES:
        for sev, x in levels(cause):
            for r in range(replicas):
                inj = Injection(cause, sev, float(x))
                base = _base_for((inj,), rng, i)
                out = inject(rng, base, inj)
                yield Case(f"{cause}-{sev}-{r}", "logits", out.cols or {}, out.meta, (inj,))
                i += 1
    if pairs:
        names = list(SEVERITIES)
        for a in range(len(names)):
            for b in range(a + 1, len(names)):
                ia = Injection(names[a], "middle", float(SEVERITIES[names[a]][1]))
                ib = Injection(names[b], "middle", float(SEVERITIES[names[b]][1]))
                base = _base_for((ia, ib), rng, i)
                i += 1
                out = base
                for inj in sorted((ia, ib), key=lambda j: ORDER.index(j.cause)):
                    out = inject(rng, out, inj)
                yield Case(f"pair-{names[a]}-{names[b]}", "logits", out.cols or {}, out.meta, (ia, ib))


def small_slice(clean: int = 6, seed: int = 1) -> Iterator[Case]:
    """A few clean runs of two generators and each cause once at its middle severity: what the test runs."""
    for i in range(clean):
        r = logits_run(900 + i, tokens=3000)
        yield Case(f"clean-logits-{900 + i}", "logits", r.cols or {}, r.meta)
    yield Case("clean-gaussian-0", "gaussian", gaussian_run(0), {})
    rng = np.random.default_rng(seed)
    for j, cause in enumerate(SEVERITIES):
        inj = Injection(cause, "middle", float(SEVERITIES[cause][1]))
        out = inject(rng, _base_for((inj,), rng, 7000 + j), inj)
        yield Case(f"{cause}-middle", "logits", out.cols or {}, out.meta, (inj,))


# -- the table ----------------------------------------------------------------------------------------------------


def table(results: list[dict[str, Any]]) -> str:
    clean = [r for r in results if not r["injected"]]
    single = [r for r in results if len(r["injected"]) == 1]
    pair = [r for r in results if len(r["injected"]) == 2]
    lines = []
    gens: dict[str, int] = {}
    for r in clean:
        gens[r["generator"]] = gens.get(r["generator"], 0) + 1
    alarms = sum(r["verdict"] == "pipeline" for r in clean)
    lines += [
        f"Clean runs: {len(clean)} ({', '.join(f'{g} {n}' for g, n in sorted(gens.items()))}); "
        f"exit 1 on {alarms}; verdicts: "
        + ", ".join(
            f"{v} {sum(r['verdict'] == v for r in clean)}" for v in ("numerics", "inconclusive", "expected", "pipeline")
        ),
        "",
        "| detector | clean runs where it fired |",
        "|---|---:|",
    ]
    from mismatchscope.doctor import cause_names

    for c in cause_names():
        if c == "numerics":
            continue
        n = sum(c in r["detected"] for r in clean)
        lines.append(f"| `{c}` | {n} of {len(clean)} |")
    lines += [
        "",
        "| cause | severity | files | top-1 | top-2 | verdict as expected | estimate error (median) |",
        "|---|---|---:|---:|---:|---:|---|",
    ]
    for cause in SEVERITIES:
        for sev, x in levels(cause):
            rs = [r for r in single if r["injected"][0][0] == cause and r["injected"][0][1] == sev]
            if not rs:
                continue
            top1 = sum(r["ranked"][:1] == [cause] for r in rs)
            top2 = sum(cause in r["ranked"][:2] for r in rs)
            want = "pipeline" if EXPECTED_PIPELINE.get(cause, True) else "expected"
            ok = sum(r["verdict"] == want for r in rs)
            lines.append(f"| `{cause}` | {sev} ({x:g}) | {len(rs)} | {top1} | {top2} | {ok} | {_error(cause, x, rs)} |")
    both = sum(all(i[0] in r["detected"] for i in r["injected"]) for r in pair)
    lines += ["", f"Pairs (middle severity, every two causes): {len(pair)} files; both causes detected in {both}."]
    missed = [
        r["name"] + " (" + ", ".join(r["detected"]) + ")"
        for r in pair
        if not all(i[0] in r["detected"] for i in r["injected"])
    ]
    if missed:
        lines.append("Pairs where one was missed: " + "; ".join(missed) + ".")
    return "\n".join(lines)


def _error(cause: str, x: float, rs: list[dict[str, Any]]) -> str:
    """Median relative error of the cause's own size estimate, where it has one."""
    key, truth = {
        "temperature": ("temperature", x),
        "misaligned_sequences": ("share", x),
        "shifted": ("k", -x),
        "log_base": ("factor", {-2: math.log(2), 2: 1 / math.log(2), 10: 1 / math.log(10)}.get(int(x), 1.0)),
        "prompt_boundary": ("positions_affected", x),
    }.get(cause, (None, None))
    if key is None:
        return "-"
    errs = [
        abs(r["estimates"][cause][key] - truth) / abs(truth)
        for r in rs
        if cause in r["estimates"] and key in r["estimates"][cause]
    ]
    return f"{np.median(errs):.1%} ({key})" if errs else "-"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--real", type=Path, default=None, help="folder of probe runs of the bundled models")
    ap.add_argument("--logits", type=int, default=180, help="clean runs of the logits generator")
    ap.add_argument("--replicas", type=int, default=6)
    ap.add_argument("--slice", type=int, default=0, help="run only every n-th case (a quick check)")
    ap.add_argument("--out", type=Path, default=None, help="write every case's result as JSON")
    ap.add_argument("--docs", type=Path, default=None, help="replace the table in this Markdown file")
    args = ap.parse_args()
    cases = itertools.chain(clean_cases(args.real, args.logits), injected_cases(args.replicas, pairs=True))
    if args.slice:
        cases = itertools.islice(cases, 0, None, args.slice)
    results = []
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        for i, case in enumerate(cases):
            results.append(examine_case(case, Path(tmp)))
            r = results[-1]
            print(f"[{i + 1}] {r['name']}: {r['verdict']} top {r['top']} detected {r['detected']}", flush=True)
    text = table(results)
    print(text)
    print(f"{len(results)} cases in {time.perf_counter() - t0:.0f} s")
    if args.out:
        args.out.write_text(json.dumps(results, indent=1))
    if args.docs:
        doc = args.docs.read_text()
        a, b = "<!-- corpus table -->", "<!-- /corpus table -->"
        head, _, rest = doc.partition(a)
        _, _, tail = rest.partition(b)
        args.docs.write_text(f"{head}{a}\n{text}\n{b}{tail}")


if __name__ == "__main__":
    main()
