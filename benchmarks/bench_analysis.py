"""Benchmark: ``report``, ``compare-masks`` and ``doctor`` as a user runs them, against DuckDB doing the same work.

For each size (``--tokens``, default 10 and 100 million) two files of the same
token pairs are written once into a cache folder outside the repository
(``--cache``, default ``$TMPDIR/mismatchscope-bench``; 10 million tokens take
1.0 GB written now and 0.8 GB written before) and reused: 100-token sequences, top-k 5 columns, page
checksums (:func:`make_file`):

  written now      as every writer of a run writes a shard today: with the
                   per-token top-k summaries (``analysis.summaries``) beside
                   the lists, float32 values as float32, every column in LZ4.
  written before   the same values as runs were written before the summaries:
                   the lists alone, float64, zstd.

Then, in one run, best of ``--repeat`` interleaved repeats (a busy moment hits
every row alike), each row a fresh process with its own peak RSS, warm (the
file in the page cache) and, with ``--cold``, cold (the file's pages dropped
from the cache with ``posix_fadvise`` before each run; no root needed):

  compare-masks   ``mismatchscope compare-masks FILE --format json`` (every
                  default rule): Python start-up, imports, the pass, the output.
  report          ``mismatchscope report FILE --format json``, the same way.
  doctor          ``mismatchscope doctor FILE --format json``.
  DuckDB, compare-masks' aggregates   one process (``python -c``: start-up,
                  ``import duckdb``, the queries): the token aggregates (k1,
                  k2, k3, TV, chi2, |l|), the ratio quantiles, min and max,
                  every default token rule's rejections by sampler-probability
                  bucket and by the sign of p - q, and the per-sequence
                  aggregates with the sequence rules' counts; it decodes the
                  columns compare-masks decodes.
  DuckDB, report's aggregates         one process: the token aggregates, the
                  seven exact ratio quantiles (``quantile_cont``, linear
                  interpolation, as report prints them), the tails, the
                  breakdowns by sampler probability, entropy and position, the
                  top-k bounds' means and maxima, the score-centering
                  statistics' means and quantiles, and the per-sequence sums;
                  from the summaries in a file written now and from the lists
                  (list lambdas) in one written before, decoding what report
                  decodes.
  DuckDB, report's columns decoded    the floor under the row above: every
                  value of report's columns summed, nothing else.

The package's bytecode is compiled once before the runs (``compileall``), as
``pip install`` leaves it. Each command runs with the threads it picks by
default (one per core), DuckDB with its own default (one per core). Ratios are
whole process over whole process (the DuckDB rows' query-alone times are
printed beside them). Targets: report and compare-masks at or below
1.0x their DuckDB peers at 10 million tokens (warm, best of 3) and 1.2x at 100
million; doctor at or below 1.3x report; peak RSS under 1 GB. With
``--before DIR`` (a checkout of the code before the summaries), the JSON of
report, compare-masks and doctor on the file written before is compared byte
for byte with that code's.

Run: python benchmarks/bench_analysis.py [--tokens 10000000 100000000] [--repeat 3] [--cold]
     [--cache DIR] [--before DIR] [--results benchmarks/RESULTS.md]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

Q = "[0.001, 0.01, 0.05, 0.5, 0.95, 0.99, 0.999]"
Q_EDGES = (0.0, 1e-3, 1e-2, 0.1, 0.5, 0.9)
H_EDGES = (0.0, 0.1, 0.5, 1.0, 2.0, 4.0)
POS_EDGES = tuple(range(0, 100, 10))
"""report's buckets: sampler probability, trainer entropy, position (100-token sequences: ten of ten)."""


_TOKEN_SQL = """WITH t AS (
  SELECT sequence_id, position, trainer_logprob - sampler_logprob AS l, exp(trainer_logprob) AS p,
         exp(sampler_logprob) AS q, trainer_entropy AS h, tvk, klk, ms, mt, rho
  FROM ({source})
), u AS (SELECT *, exp(l) AS r, abs(p - q) AS tv FROM t)
SELECT count(*), avg(tv), max(tv), avg(abs(l)), max(abs(l)), avg(-l), avg(0.5 * l * l), avg(r - 1 - l),
       avg(r * l - (r - 1)), avg(r * r) - 1, min(r), max(r), quantile_cont(r, {q}),
       count_if(r > 1.25), count_if(r > 2), count_if(r > 5), count_if(r > 10),
       count_if(r < 0.8), count_if(r < 0.5), count_if(r < 0.2), count_if(r < 0.1),
       avg(tvk), max(tvk), avg(klk), max(klk),
       avg(ms), quantile_cont(ms, {q}), avg(mt), quantile_cont(mt, {q}), avg(rho), quantile_cont(rho, {q}),
       count_if(rho IS NULL)
FROM u"""
"""the token aggregates: report's metrics, the exact ratio quantiles, the tails, the top-k bounds and the
score-centering statistics (means and quantiles)."""

_BREAKDOWN_SQL = """WITH u AS (
  SELECT position, trainer_logprob - sampler_logprob AS l, exp(trainer_logprob) AS p, exp(sampler_logprob) AS q,
         exp(trainer_logprob - sampler_logprob) AS r, trainer_entropy AS h
  FROM read_parquet('{path}')
)
SELECT {qb} AS qb, {hb} AS hb, position // 10 AS pb, count(*), sum(abs(p - q)), sum(abs(l)), sum(-l),
       sum(0.5 * l * l), sum(r - 1 - l), sum(r * l - (r - 1)), sum(r * r)
FROM u GROUP BY ALL"""
"""report's three breakdowns (sampler probability, entropy, position) from one grouping by all three: every
bucket's count and sums, whose marginals are the breakdowns."""

_SEQUENCE_SQL = """SELECT count(*), avg(S), avg(exp(m)), sum(adv), min(lo), max(hi), max(np) FROM (
  SELECT sum(trainer_logprob - sampler_logprob) AS S, avg(trainer_logprob - sampler_logprob) AS m,
         sum(advantage) AS adv, min(position) AS lo, max(position) AS hi, count(*) AS np
  FROM read_parquet('{path}') GROUP BY sequence_id)"""

_SUMMARIES = """
    SELECT *, topk_tv_lower AS tvk, topk_kl_lower AS klk, 1 - topk_sampler_rest AS ms, 1 - topk_trainer_rest AS mt,
           CASE WHEN topk_sampler_rest < 1e-6 OR topk_trainer_rest < 1e-6 THEN NULL
                ELSE topk_sampler_rest / topk_trainer_rest END AS rho
    FROM read_parquet('{path}')"""
"""report's top-k numbers from the summaries of a file written now."""

_LISTS = """
    SELECT *, CASE WHEN 1 - ms < 1e-6 OR 1 - mt < 1e-6 THEN NULL ELSE (1 - ms) / (1 - mt) END AS rho FROM (
      SELECT *, least(0.5 * (abs_in + abs(xp - xq) + abs((1 - ms) - (1 - mt))), 1.0) AS tvk,
             greatest(kl_in + CASE WHEN xq > 0 THEN xq * (sampler_logprob - trainer_logprob) ELSE 0 END
                      + CASE WHEN 1 - ms > 1e-12
                             THEN (1 - ms) * (ln(1 - ms) - ln(greatest(1 - mt, 1e-12))) ELSE 0 END,
                      0.0) AS klk
      FROM (
        SELECT *, qs + xq AS ms, ps + xp AS mt FROM (
          SELECT *, CASE WHEN listed THEN 0 ELSE exp(sampler_logprob) END AS xq,
                    CASE WHEN listed THEN 0 ELSE exp(trainer_logprob) END AS xp
          FROM (
            SELECT sequence_id, position, sampler_logprob, trainer_logprob, trainer_entropy,
                   list_contains(sampler_topk_ids, token_id) AS listed,
                   list_sum(list_transform(sampler_topk_logprobs, lambda x: exp(x))) AS qs,
                   list_sum(list_transform(trainer_logprobs_at_sampler_topk, lambda x: exp(x))) AS ps,
                   list_sum(list_transform(list_zip(sampler_topk_logprobs, trainer_logprobs_at_sampler_topk),
                                           lambda z: abs(exp(z[2]) - exp(z[1])))) AS abs_in,
                   list_sum(list_transform(list_zip(sampler_topk_logprobs, trainer_logprobs_at_sampler_topk),
                                           lambda z: exp(z[1]) * (z[1] - z[2]))) AS kl_in
            FROM read_parquet('{path}')))))"""
"""report's top-k numbers from the lists of a file written before: the bounds as ``analysis.topk`` takes them
(the sampled id added where the list lacks it, one rest bucket)."""


def _case(expr: str, edges: tuple) -> str:
    """``expr``'s bucket index over ``edges``, the last bucket open above (report's ``bucket_index``)."""
    whens = " ".join(f"WHEN {expr} < {hi} THEN {i}" for i, hi in enumerate(edges[1:]))
    return f"CASE {whens} ELSE {len(edges) - 1} END"


def report_sql(summarised: bool) -> str:
    """report's peer: three queries (DuckDB has no one-pass form of exact quantiles beside groupings), each
    decoding only the columns it needs."""
    token = _TOKEN_SQL.format(source="{source}", q=Q).replace("{source}", _SUMMARIES if summarised else _LISTS)
    breakdown = _BREAKDOWN_SQL.format(path="{path}", qb=_case("q", Q_EDGES), hb=_case("h", H_EDGES))
    return ";\n".join((token, breakdown, _SEQUENCE_SQL))


def floor_sql(summarised: bool) -> str:
    """Every value of report's columns summed: what decoding them costs DuckDB, and nothing else."""
    cols = ["sequence_id", "position", "sampler_logprob", "trainer_logprob", "advantage", "trainer_entropy"]
    if summarised:
        cols += ["topk_tv_lower", "topk_kl_lower", "topk_sampler_rest", "topk_trainer_rest"]
        sums = [f"sum({c})" for c in cols]
    else:
        cols += ["token_id"]
        sums = [f"sum({c})" for c in cols] + [
            f"sum(list_sum({c}))"
            for c in ("sampler_topk_ids", "sampler_topk_logprobs", "trainer_logprobs_at_sampler_topk")
        ]
    return f"SELECT count(*), {', '.join(sums)} FROM read_parquet('{{path}}')"


_KPOP_Q = "least(greatest(q, 1e-6), 1 - 1e-6)"
_KPOP_P = "least(greatest(p, 1e-6), 1 - 1e-6)"
_MASKS_TOKEN_RULES = {
    "icepop": "r < 0.5 OR r > 5",
    "ipo": "abs(p - q) > 0.3",
    "kpop": f"greatest({_KPOP_Q} * ln({_KPOP_Q} / {_KPOP_P}) + (1 - {_KPOP_Q}) * ln((1 - {_KPOP_Q}) / (1 - {_KPOP_P})), "
    f"{_KPOP_P} * ln({_KPOP_P} / {_KPOP_Q}) + (1 - {_KPOP_P}) * ln((1 - {_KPOP_P}) / (1 - {_KPOP_Q}))) > 0.1",
    "dppo_tv": "(adv > 0 AND p - q > 0.15) OR (adv <= 0 AND p - q < -0.15)",
    "dppo_kl": "((adv > 0 AND p > q) OR (adv <= 0 AND p < q)) "
    "AND q * ln(q / p) + (1 - q) * ln((1 - q + 1e-8) / (1 - p + 1e-8)) > 0.05",
    "tis": "r > 2",
    "token_mask": "r < 0.5 OR r > 2",
    "cispo": "r < 0 OR r > 5",
    "ppo_clip": "(adv > 0 AND r > 1.28) OR (adv < 0 AND r < 0.8)",
}
"""compare-masks' default token rules, each as the condition under which it rejects (or reweights) a token."""


def masks_sql() -> str:
    """compare-masks' peer: one grouping of the tokens by sampler-probability bucket, sign of p - q, sign of the
    advantage and each token rule's verdict (every rule's counts by bucket, by either sign, and the rules'
    agreement are its marginals), and the per-sequence aggregates with the sequence rules' counts and each token
    rule's sequences with a rejection (compare-masks' ``sequences_with_rejection``)."""
    flags = ", ".join(f"({cond}) AS {name}" for name, cond in _MASKS_TOKEN_RULES.items())
    token = f"""WITH u AS (
  SELECT position, advantage AS adv, trainer_logprob - sampler_logprob AS l, exp(trainer_logprob) AS p,
         exp(sampler_logprob) AS q, exp(trainer_logprob - sampler_logprob) AS r
  FROM read_parquet('{{path}}')
)
SELECT {_case("q", Q_EDGES)} AS qb, sign(p - q) AS s, sign(adv) AS a, {flags}, count(*), max(position), sum(l),
       sum(0.5 * l * l), sum(r - 1 - l), sum(abs(p - q)), sum(r * r)
FROM u GROUP BY ALL"""
    any_rule = ", ".join(f"bool_or({cond}) AS {name}" for name, cond in _MASKS_TOKEN_RULES.items())
    rule_seqs = ", ".join(f"count_if({name})" for name in _MASKS_TOKEN_RULES)
    seq = f"""SELECT count(*), count_if(S < ln(0.5) OR S > ln(2)), count_if(S > ln(2)),
       count_if(m < ln(0.999) OR m > ln(1.001)), count_if(k3 > 0.01), count_if(lo < ln(0.0001)),
       count_if(a < 0 AND -m > 0.0001), max(hi), {rule_seqs}
FROM (SELECT sum(l) AS S, avg(l) AS m, avg(r - 1 - l) AS k3, min(l) AS lo, max(position) AS hi, avg(adv) AS a,
             {any_rule}
      FROM (SELECT sequence_id, position, advantage AS adv, trainer_logprob - sampler_logprob AS l,
                   exp(trainer_logprob) AS p, exp(sampler_logprob) AS q, exp(trainer_logprob - sampler_logprob) AS r
            FROM read_parquet('{{path}}'))
      GROUP BY sequence_id)"""
    return token + ";\n" + seq


DUCKDB_CHILD = r"""
import json, sys, time
t0 = time.perf_counter()
import duckdb
con = duckdb.connect()
con.execute("SET enable_progress_bar = false")
t1 = time.perf_counter()
for stmt in sys.argv[2].split(";"):
    if stmt.strip():
        con.execute(stmt.replace("{path}", sys.argv[1])).fetchall()
print(json.dumps({"query": time.perf_counter() - t1}))
"""

SUMMARY_COLUMNS = ("topk_tv_lower", "topk_kl_lower", "topk_sampler_rest", "topk_trainer_rest")
RSS_LIMIT_MB = 1000
TARGETS = {10_000_000: 1.0, 100_000_000: 1.2}
"""report and compare-masks over their DuckDB peers, whole process over whole process."""
DOCTOR_TARGET = 1.3


def make_file(
    path: Path, tokens: int, seqs: int, k: int = 5, seed: int = 0, summarised: bool = False, checksums: bool = False
) -> None:
    """Realistic-enough pairs, written in row groups so generation stays in memory bounds.

    ``summarised``: as a run's writers write a shard now (``schema.write_table`` with
    ``analysis.summaries.add_summaries``): the top-k summaries beside the lists, float32 values stored as
    float32, float columns in LZ4. Otherwise the columns as float64 and zstd, as runs were written before, with
    (``checksums``) or without a CRC on every page. With ``summarised`` the logprobs, entropies and advantages
    are float32 values, as engines and trainers compute them (the file written before holds the same values).
    Written to a temporary name and renamed at the end, so an interrupted run leaves no half file to reuse.
    """
    from mismatchscope.schema import WRITE_OPTIONS, narrowed, token_write_options

    rng = np.random.default_rng(seed)
    per_seq = tokens // seqs
    writer = None
    chunk_seqs = 10_000
    part = path.with_name(path.name + ".part")
    f32 = checksums  # this benchmark's files hold float32 values; the plain file (other benchmarks) as it was

    def values(v: np.ndarray) -> np.ndarray:
        return v.astype(np.float32).astype(np.float64) if f32 else v

    for start in range(0, seqs, chunk_seqs):
        n_seq = min(chunk_seqs, seqs - start)
        n = n_seq * per_seq
        lq = values(-rng.exponential(0.8, n))
        lp = values(np.minimum(lq + rng.normal(0, 0.02, n) * (1 + 10 * (rng.random(n) < 0.01)), 0.0))
        top_lq = np.sort(-rng.exponential(2.0, (n, k)), axis=1)[:, ::-1]
        top_lq[:, 0] = np.maximum(top_lq[:, 0], lq)  # keep lists plausible
        top_lq = values(top_lq)
        offsets = pa.array(np.arange(0, n * k + 1, k, dtype=np.int32))
        cols = {
            "sequence_id": pa.array(np.repeat(np.arange(start, start + n_seq, dtype=np.int64), per_seq)),
            "position": pa.array(np.tile(np.arange(per_seq, dtype=np.int32), n_seq)),
            "token_id": pa.array(rng.integers(0, 150_000, n)),
            "sampler_logprob": pa.array(lq),
            "trainer_logprob": pa.array(lp),
            "advantage": pa.array(np.repeat(values(rng.normal(0, 1, n_seq)), per_seq)),
            "trainer_entropy": pa.array(values(rng.exponential(1.0, n))),
            "sampler_topk_ids": pa.ListArray.from_arrays(offsets, pa.array(rng.integers(0, 150_000, n * k))),
            "sampler_topk_logprobs": pa.ListArray.from_arrays(offsets, pa.array(top_lq.ravel())),
            "trainer_logprobs_at_sampler_topk": pa.ListArray.from_arrays(
                offsets, pa.array(values(np.minimum(top_lq + rng.normal(0, 0.02, (n, k)), 0.0)).ravel())
            ),
        }
        table = pa.table(cols)
        if summarised:
            from mismatchscope.analysis.summaries import add_summaries

            table = narrowed(add_summaries(table))
            options = token_write_options(table.schema)
        else:
            options = WRITE_OPTIONS if checksums else {"compression": "zstd"}
        if writer is None:
            writer = pq.ParquetWriter(part, table.schema, **options)
        writer.write_table(table, row_group_size=1 << 20)
    assert writer is not None  # seqs >= 1
    writer.close()
    part.rename(path)


def bench_file(cache: Path, tokens: int) -> Path:
    """The plain benchmark file of ``tokens`` tokens in ``cache`` (no summaries, no page checksums), written once
    (100-token sequences): the other benchmarks' input."""
    return _cached(cache / f"bench_pairs_{tokens}.parquet", tokens, False, False)


def run_file(cache: Path, tokens: int, summarised: bool) -> Path:
    """This benchmark's file: the pairs as a run's writers write them now (``summarised``) or wrote them before."""
    return _cached(cache / f"run_pairs_{tokens}_{'now' if summarised else 'before'}.parquet", tokens, summarised, True)


def _cached(path: Path, tokens: int, summarised: bool, checksums: bool) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.exists():
        import multiprocessing

        t0 = time.perf_counter()
        # in a process of its own: a child forked from a process that once held the generated data would
        # report that process's peak memory as its own
        writer = multiprocessing.get_context("spawn").Process(
            target=make_file,
            args=(path, tokens, tokens // 100),
            kwargs={"summarised": summarised, "checksums": checksums},
        )
        writer.start()
        writer.join()
        if writer.exitcode != 0:
            raise SystemExit(f"writing {path} failed")
        print(
            f"wrote {path} ({tokens:,} tokens, {path.stat().st_size / 1e9:.2f} GB) in {time.perf_counter() - t0:.0f} s",
            flush=True,
        )
    return path


def drop_cache(path: Path) -> None:
    """The file's pages out of the page cache (clean pages: the file was synced when written)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def measured(argv: list[str], env: dict | None = None) -> dict:
    """Wall, CPU (user + system of the process and its threads) and peak RSS of one fresh process; a DuckDB
    child also reports its query time alone. Its stdout is kept (the JSON a command printed)."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    out = proc.stdout.read() if proc.stdout else b""
    err = proc.stderr.read() if proc.stderr else b""
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    code = os.waitstatus_to_exitcode(status)
    if code not in (0, 1):  # doctor exits 1 for a pipeline verdict
        raise SystemExit(f"{' '.join(argv[:3])} failed ({code}): {err.decode()[-2000:]}")
    row = {"wall": wall, "cpu": usage.ru_utime + usage.ru_stime, "rss_mb": usage.ru_maxrss / 1024, "stdout": out}
    try:
        last = json.loads(out.decode().strip().splitlines()[-1])
        if isinstance(last, dict) and "query" in last:
            row["query"] = last["query"]
    except (ValueError, IndexError):
        pass
    return row


def _cli() -> list[str]:
    """The installed ``mismatchscope`` entry point next to this interpreter, else ``python -m mismatchscope``."""
    exe = Path(sys.executable).with_name("mismatchscope")
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "mismatchscope"]


def commands(path: Path, summarised: bool) -> dict[str, list[str]]:
    cli = _cli()
    duck = [sys.executable, "-c", DUCKDB_CHILD, str(path)]
    return {
        "compare-masks": [*cli, "compare-masks", str(path), "--format", "json"],
        "report": [*cli, "report", str(path), "--format", "json"],
        "doctor": [*cli, "doctor", str(path), "--format", "json"],
        "DuckDB, compare-masks' aggregates": [*duck, masks_sql()],
        "DuckDB, report's aggregates": [*duck, report_sql(summarised)],
        "DuckDB, report's columns decoded": [*duck, floor_sql(summarised)],
    }


def compile_package() -> None:
    """Write the bytecode of the ``mismatchscope`` the commands import, as an install does."""
    where = subprocess.run(
        [sys.executable, "-c", "import mismatchscope, os; print(os.path.dirname(mismatchscope.__file__))"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    subprocess.run([sys.executable, "-m", "compileall", "-q", where], check=True, stdout=subprocess.DEVNULL)


def bench(path: Path, summarised: bool, repeat: int, cold: bool) -> dict[str, list[dict]]:
    cmds = commands(path, summarised)
    runs: dict[str, list[dict]] = {name: [] for name in cmds}
    for _ in range(repeat):
        for name, argv in cmds.items():
            if cold:
                drop_cache(path)
            runs[name].append(measured(argv))
    return runs


def table(title: str, runs: dict[str, list[dict]], tokens: int, load: tuple) -> tuple[list[str], dict]:
    best = {name: min(rs, key=lambda r: r["wall"]) for name, rs in runs.items()}
    out = [
        title,
        "",
        "| | wall (s) | CPU (s) | cores used | peak RSS (MiB) | query alone (s) | all walls (s) |",
        "|---|---:|---:|---:|---:|---:|---|",
    ]
    for name, r in best.items():
        walls = ", ".join(f"{x['wall']:.2f}" for x in runs[name])
        query = f"{r['query']:.2f}" if "query" in r else ""
        out.append(
            f"| {name} | {r['wall']:.2f} | {r['cpu']:.2f} | {r['cpu'] / r['wall']:.2f} | {r['rss_mb']:.0f} | {query} "
            f"| {walls} |"
        )
    out.append("")
    target = TARGETS.get(tokens, 1.2)
    ratios = {
        "report": best["report"]["wall"] / best["DuckDB, report's aggregates"]["wall"],
        "compare-masks": best["compare-masks"]["wall"] / best["DuckDB, compare-masks' aggregates"]["wall"],
        "doctor / report": best["doctor"]["wall"] / best["report"]["wall"],
        "report / DuckDB's decode alone": best["report"]["wall"] / best["DuckDB, report's columns decoded"]["wall"],
    }
    for what, x in ratios.items():
        if what in ("report", "compare-masks"):
            verdict = f" (target <= {target}x: {'met' if x <= target else 'NOT met'})"
            out.append(f"- {what}: {x:.2f}x its DuckDB peer, whole process over whole process{verdict}")
        elif what == "doctor / report":
            verdict = f" (target <= {DOCTOR_TARGET}x: {'met' if x <= DOCTOR_TARGET else 'NOT met'})"
            out.append(f"- doctor: {x:.2f}x report{verdict}")
        else:
            out.append(f"- report: {x:.2f}x DuckDB only decoding report's columns (no target: the floor)")
    for name in ("compare-masks", "report", "doctor"):
        ok = best[name]["rss_mb"] < RSS_LIMIT_MB
        out.append(f"- {name}: peak RSS {best[name]['rss_mb']:.0f} MiB (target < 1 GB: {'met' if ok else 'NOT met'})")
    out.append(
        f"- machine: {os.cpu_count()} cores ({len(os.sched_getaffinity(0))} usable), load average "
        f"{'/'.join(f'{x:.1f}' for x in load)} before"
    )
    return out, ratios


def compare_before(path: Path, before: Path, runs: dict[str, list[dict]]) -> list[str]:
    """The JSON of report, compare-masks and doctor on a file written before, against the code before's."""
    out = []
    env = {**os.environ, "PYTHONPATH": str(before)}
    for name in ("report", "compare-masks", "doctor"):
        old = measured([sys.executable, "-m", "mismatchscope", name, str(path), "--format", "json"], env)["stdout"]
        same = all(r["stdout"] == old for r in runs[name])
        out.append(
            f"- {name} JSON on the file written before, against the code before: "
            f"{'byte-identical' if same else 'DIFFERENT'} ({len(old):,} bytes)"
        )
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tokens", type=int, nargs="+", default=[10_000_000, 100_000_000])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--cold", action="store_true", help="also run every row with the file dropped from the cache")
    ap.add_argument("--cache", type=Path, default=Path(os.environ.get("TMPDIR") or "/tmp") / "mismatchscope-bench")
    ap.add_argument("--before", type=Path, default=None, help="a checkout of the code before, for the JSON check")
    ap.add_argument("--only", choices=["now", "before"], default=None, help="one of the two files")
    ap.add_argument("--results", type=Path, default=None, help="append a Markdown section to this file")
    args = ap.parse_args()
    compile_package()
    sections = []
    for tokens in args.tokens:
        for summarised in (True, False):
            if args.only and (args.only == "now") != summarised:
                continue
            path = run_file(args.cache, tokens, summarised)
            kind = "written now (summaries)" if summarised else "written before (lists only)"
            for cold in (False, True) if args.cold else (False,):
                load = os.getloadavg()
                runs = bench(path, summarised, args.repeat, cold)
                title = f"### {tokens:,} tokens, {kind}, {'cold' if cold else 'warm'} cache"
                lines, _ = table(title, runs, tokens, load)
                if args.before is not None and not summarised and not cold:
                    lines += compare_before(path, args.before, runs)
                print("\n".join(lines) + "\n", flush=True)
                sections.append(lines)
    if args.results:
        _append(args.results, args, sections)


def _append(results: Path, args, sections: list[list[str]]) -> None:
    import duckdb

    text = [
        f"\n## analysis: report, compare-masks and doctor vs DuckDB on the same work ({datetime.date.today()})\n",
        f"`python benchmarks/bench_analysis.py --tokens {' '.join(map(str, args.tokens))} --repeat {args.repeat}"
        f"{' --cold' if args.cold else ''}`: 100-token sequences, top-k 5 columns, page checksums; the file "
        "written now as every writer stores a shard (summaries, float32, LZ4), the one written before as runs were "
        "(lists alone, float64, zstd) (`make_file`). Every row is one fresh process, start-up included; best of the interleaved repeats; CPU is "
        "user + system of the whole process.\n",
    ]
    for lines in sections:
        text += [*lines, ""]
    text.append(
        f"Python {platform.python_version()}, numpy {np.__version__}, pyarrow {pa.__version__}, "
        f"duckdb {duckdb.__version__}.\n"
    )
    with results.open("a") as f:
        f.write("\n".join(text))


if __name__ == "__main__":
    main()
