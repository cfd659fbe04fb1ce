"""The analysis pass's compiled loops (``analysis/_loops.c``): the top-k bounds' per-row loop against a
reference written out in Python, bit for bit, and against the numpy code it stands in for, within a
tolerance no CPU's exp and log can break (see ``assert_paths_agree``).

The reference does the arithmetic of docs/analysis.md ("Top-k lower bounds") one row at a time with
Python floats: ``math.exp`` and ``math.log`` are the C library's, as the compiled loop's are, and every
``+``, ``*`` and ``abs`` is one IEEE double operation in the order written. So the loop must equal it
exactly, on lists chosen to hit every branch: the sampled id listed or not, zero probabilities, an
infinite KL term, list masses above 1, empty and ragged lists, float32 values and 64-bit offsets.
"""

from __future__ import annotations

import json
import math
import platform

import numpy as np
import pyarrow as pa
import pytest

from mismatchscope.analysis import compiled
from mismatchscope.analysis.compiled import COMPILED_ENV
from mismatchscope.analysis.topk import REST_EPS, TAIL_EMPTY, topk_bounds
from tests.helpers import REPO, cli_no_engine


def _np_max(a: float, b: float) -> float:
    return a if (a > b or math.isnan(a)) else b  # numpy's maximum: a NaN wins; of equal values, the second


def _np_min(a: float, b: float) -> float:
    return a if (a < b or math.isnan(a)) else b


def test_the_reference_maximum_and_minimum_are_numpys():
    # the loop's np_max and np_min follow these: a NaN wins, and of 0.0 and -0.0 numpy returns the second on
    # x86-64 (its vector code elsewhere may not; no operand of the loop's can be -0.0, so no output depends on it)
    nan = float("nan")
    cases = [(nan, 1.0), (1.0, nan), (2.0, 1.0), (1.0, 2.0)]
    if platform.machine().lower() in ("x86_64", "amd64"):
        cases += [(0.0, -0.0), (-0.0, 0.0)]
    for a, b in cases:
        for ours, theirs in ((_np_max, np.maximum), (_np_min, np.minimum)):
            want = float(theirs(np.float64(a), np.float64(b)))
            got = ours(a, b)
            assert (math.isnan(got) and math.isnan(want)) or (
                got == want and math.copysign(1, got) == math.copysign(1, want)
            )


def reference_row(tok, lq, lp, q, p, ids, slp, tlp) -> tuple[float, ...]:
    """(TV bound, KL bound, sum_K q, sum_K p, tail ratio, empty sampler tail, empty trainer tail) of one row,
    K = the listed ids plus the sampled id if unlisted."""
    q_sum = p_sum = abs_sum = kl_in = 0.0
    listed = False
    for i, s, t in zip(ids, slp, tlp, strict=True):
        qi, pi = math.exp(s), math.exp(t)
        q_sum += qi
        p_sum += pi
        abs_sum += abs(pi - qi)
        kl_in += 0.0 if qi == 0.0 else (s - t) * qi  # 0 log 0 = 0, whatever p is
        listed = listed or i == tok
    extra_q, extra_p = (0.0, 0.0) if listed else (q, p)
    q_sum += extra_q
    p_sum += extra_p
    abs_sum += abs(extra_p - extra_q)
    tv = 0.5 * (abs_sum + abs(q_sum - p_sum))
    kl_in += 0.0 if (listed or extra_q <= 0.0) else extra_q * (lq - lp)
    q_rest, p_rest = _np_max(1.0 - q_sum, 0.0), _np_max(1.0 - p_sum, REST_EPS)
    kl_rest = q_rest * (math.log(q_rest) - math.log(p_rest)) if q_rest > REST_EPS else 0.0
    q_tail, p_tail = 1.0 - q_sum, 1.0 - p_sum
    empty_q, empty_p = q_tail < TAIL_EMPTY, p_tail < TAIL_EMPTY
    rho = math.nan if (empty_q or empty_p) else q_tail / p_tail
    return _np_min(tv, 1.0), _np_max(kl_in + kl_rest, 0.0), q_sum, p_sum, rho, float(empty_q), float(empty_p)


INF = float("inf")
ROWS = [
    # (sampled id, its sampler and trainer logprob, listed ids, sampler list, trainer list)
    (5, math.log(0.3), math.log(0.3), [3, 5], [math.log(0.6), math.log(0.3)], [math.log(0.5), math.log(0.3)]),
    (9, math.log(0.05), math.log(0.1), [3, 5], [math.log(0.6), math.log(0.3)], [math.log(0.5), math.log(0.3)]),
    (1, -0.1, -0.2, [1, 2, 3], [-0.1, -0.5, -0.7], [-0.2, -0.4, -0.9]),  # masses above 1: the rest clips
    (4, -2.0, -2.5, [1, 2], [-INF, -1.0], [-INF, -1.2]),  # q = 0 with p = 0: no KL term, no NaN
    (4, -2.0, -2.5, [1, 2], [-1.0, -3.0], [-INF, -3.1]),  # p = 0 under q > 0: the KL is infinite
    (4, -INF, -1.0, [1, 2], [-1.0, -3.0], [-1.1, -2.0]),  # an unlisted sampled token of q = 0 adds nothing
    (7, -0.7, -0.6, [], [], []),  # an empty list: K is the sampled id alone
    (2, -1e-9, -2e-9, [2, 2], [-1e-9, -1e-9], [-2e-9, -2e-9]),  # an id listed twice counts twice, as written
    (8, -30.0, -29.0, [1, 2, 3, 4, 5, 6], [-0.3, -1.9, -2.0, -3.3, -7.0, -29.5], [-0.31, -1.8, -2.1, -3.0, -8.0, -30]),
]


def _batch(rows, value_type=pa.float64(), list_type=pa.list_):
    tok = np.array([r[0] for r in rows], np.int64)
    lq, lp = np.array([r[1] for r in rows]), np.array([r[2] for r in rows])
    ids = pa.array([r[3] for r in rows], list_type(pa.int64()))
    slp = pa.array([r[4] for r in rows], list_type(value_type))
    tlp = pa.array([r[5] for r in rows], list_type(value_type))
    return tok, lq, lp, ids, slp, tlp


def _bounds(compiled: str, tok, lq, lp, ids, slp, tlp):
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(COMPILED_ENV, compiled)
        with np.errstate(divide="ignore"):
            b = topk_bounds(tok, lq, lp, ids, slp, tlp)
    return np.stack(
        [
            b.tv_lower_T,
            b.kl_lower_T,
            b.sampler_mass_T,
            b.trainer_mass_T,
            b.tail_ratio_T,
            b.empty_sampler_tail_T,
            b.empty_trainer_tail_T,
        ],
        axis=1,
    )


def _bits(x: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(x, dtype=np.float64).view(np.int64)


# The compiled loop and numpy's code do the same IEEE operations in the same order but for exp and log: the loop
# calls the C library's, numpy its own, which on a CPU with AVX-512 are vector routines that may round the last
# bit or two the other way (on other CPUs numpy calls the C library too, and the two paths agree bit for bit).
# Neither library rounds exp and log correctly, but both stay within a few ULPs (2**-52 relative each), so the
# paths are compared with a tolerance derived from the arithmetic, far above any such rounding and far below
# any real mistake:
#  - every bound, mass and flag is a sum of at most 8 terms (a list of up to 7 ids and the sampled id) of
#    magnitude at most 30 (a logprob difference times a probability, or a probability), or 1 minus such a sum:
#    8 terms * 30 * 4 ULPs * 2**-52 < 2e-13, so ABS_TOL = 1e-11 leaves a margin of 50;
#  - the tail ratio divides two tails each at least TAIL_EMPTY = 1e-6 (below it the ratio is NaN), each off by
#    at most 2e-13 in absolute terms, so its relative error is under 2 * 2e-13 / 1e-6 = 4e-7: REL_TOL = 1e-5.
# NaNs, infinities and the empty-tail flags must agree exactly (no input here puts a tail within 1e-11 of
# TAIL_EMPTY, checked below, so rounding cannot flip a flag).
ABS_TOL = 1e-11
REL_TOL = 1e-5
TAIL_RATIO = 4


def assert_paths_agree(a: np.ndarray, b: np.ndarray) -> None:
    """The two paths' [n, 7] outputs agree: non-finite values and flags exactly, the rest within the tolerance."""
    assert a.shape == b.shape
    assert np.array_equal(np.isnan(a), np.isnan(b)) and np.array_equal(np.isinf(a), np.isinf(b))
    assert np.array_equal(a[np.isinf(a)], b[np.isinf(b)])
    assert np.array_equal(a[:, 5:], b[:, 5:])  # the empty-tail flags
    tails = np.abs(1.0 - a[:, 2:4][np.isfinite(a[:, 2:4])] - TAIL_EMPTY)
    assert (tails > ABS_TOL).all()  # no tail on the flag's threshold
    finite = np.isfinite(a)
    ratio = np.zeros_like(finite)
    ratio[:, TAIL_RATIO] = True
    assert np.allclose(a[finite & ~ratio], b[finite & ~ratio], rtol=0.0, atol=ABS_TOL)
    assert np.allclose(a[finite & ratio], b[finite & ratio], rtol=REL_TOL, atol=0.0)


def _assert_json_agrees(a, b, where: str = "") -> None:
    """Two reports alike: the same keys, strings and integers, and floats within the tolerance above."""
    if isinstance(a, dict):
        assert isinstance(b, dict) and a.keys() == b.keys(), where
        for k in a:
            _assert_json_agrees(a[k], b[k], f"{where}.{k}")
    elif isinstance(a, list):
        assert isinstance(b, list) and len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            _assert_json_agrees(x, y, f"{where}[{i}]")
    elif isinstance(a, float) and isinstance(b, float):
        assert math.isclose(a, b, rel_tol=REL_TOL, abs_tol=ABS_TOL), (where, a, b)
    else:
        assert a == b, (where, a, b)


def test_the_install_built_the_compiled_loops():
    # the extension is optional (a machine without a C compiler installs without it): a build that failed
    # silently would leave every report on the slower numpy path
    assert compiled.built()
    assert compiled.loops() is compiled._loops


@pytest.mark.parametrize("value_type", [pa.float64(), pa.float32()], ids=["float64", "float32"])
@pytest.mark.parametrize("list_type", [pa.list_, pa.large_list], ids=["offsets32", "offsets64"])
def test_the_compiled_loop_equals_the_reference_bit_for_bit(value_type, list_type):
    tok, lq, lp, ids, slp, tlp = _batch(ROWS, value_type, list_type)
    got = _bounds("1", tok, lq, lp, ids, slp, tlp)
    q, p = np.exp(lq), np.exp(lp)
    with np.errstate(divide="ignore"):
        values = [(slp[i].values.to_numpy(), tlp[i].values.to_numpy()) for i in range(len(ROWS))]
    want = np.array(
        [
            reference_row(r[0], r[1], r[2], float(q[i]), float(p[i]), r[3], map(float, s), map(float, t))
            for i, (r, (s, t)) in enumerate(zip(ROWS, values, strict=True))
        ]
    )
    assert np.array_equal(_bits(got), _bits(want))  # NaN rhos too: both are numpy's quiet NaN
    # and the rows say what the comments above them say
    assert math.isinf(got[4, 1]) and got[4, 1] > 0
    assert got[6, 2] == math.exp(-0.7) and got[6, 3] == math.exp(-0.6)  # K = {sampled id}
    assert got[2, 2] > 1.0 and got[2, 0] <= 1.0
    assert got[2, 5] == 1.0 and math.isnan(got[2, 4])  # no sampler tail: rho undefined
    assert not math.isnan(got[0, 4]) and got[0, 4] == pytest.approx(0.1 / 0.2)  # (1 - 0.9) / (1 - 0.8)


def test_the_numpy_code_agrees_with_the_compiled_loop():
    rng = np.random.default_rng(11)
    n = 3000
    lengths = rng.integers(0, 7, n)
    rows = []
    for i in range(n):
        k = int(lengths[i])
        ids = rng.integers(0, 20, k).tolist()
        slp = np.log(rng.dirichlet(np.ones(k + 2))[:k]).tolist()
        tlp = (np.array(slp) + rng.normal(0, 0.3, k)).clip(max=0.0).tolist()
        rows.append(
            (int(rng.integers(0, 20)), float(np.log(rng.uniform(1e-6, 1))), -float(rng.exponential()), ids, slp, tlp)
        )
    nan = float("nan")
    rows += [  # NaN values (the reader refuses them in a file; the Recorder's callers may still pass them)
        (3, -0.5, -0.6, [3, 4], [nan, -1.0], [-0.4, -1.1]),
        (3, -0.5, -0.6, [1, 4], [-0.9, -1.0], [-0.4, nan]),
        (3, nan, -0.6, [1, 4], [-0.9, -1.0], [-0.4, -1.2]),
    ]
    for value_type in (pa.float64(), pa.float32()):
        batch = _batch(rows, value_type)
        got = _bounds("1", *batch)
        assert np.isnan(got[-3:, 0]).all()  # a NaN anywhere in a row's K makes its TV bound NaN, both ways
        assert_paths_agree(_bounds("0", *batch), got)
        fixed = _batch([r for r in rows if len(r[3]) == 5], value_type)  # numpy's [n, k] table path
        assert_paths_agree(_bounds("0", *fixed), _bounds("1", *fixed))


def test_report_is_the_same_with_and_without_the_compiled_loop(tmp_path):
    path = str(REPO / "sample_data" / "simulated_pairs.parquet")
    outs = []
    for switch in ("1", "0"):
        r = cli_no_engine("report", path, "--format", "json", env={COMPILED_ENV: switch})
        assert r.returncode == 0, r.stderr
        outs.append(json.loads(r.stdout))
    assert outs[0]["topk"]["tokens"] > 0
    _assert_json_agrees(outs[0], outs[1])


def test_the_compiled_topk_loop_refuses_what_it_cannot_read():
    rows = compiled._loops
    assert rows is not None
    n = 2
    f = [np.zeros(n) for _ in range(9)] + [np.zeros(n, bool), np.zeros(n, bool)]
    ok = (np.array([0, 1, 2], np.int32), np.array([1, 2]), np.zeros(2), np.zeros(2), np.array([1, 2]))
    eps = (REST_EPS, TAIL_EMPTY)
    rows.topk_bounds(*ok, *f, *eps)  # the shapes it reads
    with pytest.raises(TypeError, match="token_id"):
        rows.topk_bounds(*ok[:4], np.array([1.0, 2.0]), *f, *eps)
    with pytest.raises(TypeError, match="empty_q_out"):
        rows.topk_bounds(*ok, *f[:9], np.zeros(n), f[10], *eps)
    with pytest.raises(ValueError, match="do not match"):
        rows.topk_bounds(np.array([0, 1], np.int32), *ok[1:], *f, *eps)
    with pytest.raises(ValueError, match="not increasing"):
        rows.topk_bounds(np.array([0, 2, 1], np.int32), *ok[1:], *f, *eps)
    with pytest.raises(ValueError, match="not increasing"):  # an offset beyond the values it indexes
        rows.topk_bounds(np.array([0, 1, 3], np.int32), *ok[1:], *f, *eps)
    with pytest.raises(ValueError, match="not increasing"):
        rows.topk_bounds(np.array([-1, 1, 2], np.int32), *ok[1:], *f, *eps)
    with pytest.raises(ValueError, match="kl_out"):
        rows.topk_bounds(*ok, *f[:5], np.zeros(3), *f[6:], *eps)
    read_only = np.zeros(n)
    read_only.flags.writeable = False
    with pytest.raises((BufferError, ValueError)):  # an output it may not write
        rows.topk_bounds(*ok, *f[:4], read_only, *f[5:], *eps)


def test_lists_of_two_float_types_take_both_paths_alike():
    # a file may store the sampler's list in float32 and the trainer's in float64 (or float16): each is read in
    # its own type, and the compiled loop must get them as numpy does, cast to float64
    tok, lq, lp, ids, slp, tlp = _batch(ROWS)
    for value_type in (pa.float32(), pa.float16()):
        narrow = pa.array([r[4] for r in ROWS], pa.list_(value_type))
        assert_paths_agree(_bounds("1", tok, lq, lp, ids, narrow, tlp), _bounds("0", tok, lq, lp, ids, narrow, tlp))


@pytest.mark.parametrize("code_type", [np.uint8, np.uint16])
def test_count_codes_adds_what_bincount_counts(code_type):
    rng = np.random.default_rng(5)
    top = np.iinfo(code_type).max + 1
    codes = rng.integers(0, top, 10_000).astype(code_type)
    codes[:3] = [0, top - 1, top - 1]  # both ends of the range
    counts = rng.integers(0, 100, top)  # added to, not overwritten
    want = counts + np.bincount(codes, minlength=top)
    compiled._loops.count_codes(codes, counts)
    assert np.array_equal(counts, want)
    compiled._loops.count_codes(codes[:0], counts)  # no codes: nothing added
    assert np.array_equal(counts, want)


def test_count_codes_refuses_what_it_cannot_count():
    c = compiled._loops
    counts = np.zeros(4, np.int64)
    with pytest.raises(ValueError, match="beyond the 4 counts"):
        c.count_codes(np.array([1, 2, 4, 3], np.uint8), counts)
    assert not counts.any()  # a refused call counted nothing, not the codes before the bad one
    codes = np.arange(4, dtype=np.uint8)
    read_only = np.zeros(4, np.int64)
    read_only.flags.writeable = False
    for bad_counts in (np.zeros(8, np.int64)[::2], read_only):  # strided, not writable
        with pytest.raises((BufferError, ValueError, TypeError)):
            c.count_codes(codes, bad_counts)
    with pytest.raises((BufferError, ValueError, TypeError)):
        c.count_codes(np.arange(8, dtype=np.uint8)[::2], counts)  # strided codes
    with pytest.raises(TypeError, match="element format"):
        c.count_codes(codes.astype(">u2"), counts)  # byte-swapped: would be read as other codes
    with pytest.raises(TypeError, match="element format"):
        c.count_codes(codes, np.zeros(4, ">i8"))
    assert not counts.any()
    for codes in (np.array([1], np.int16), np.array([1], np.uint32), np.array([1.0])):
        with pytest.raises(TypeError, match="codes has element format"):
            c.count_codes(codes, counts)
    with pytest.raises(TypeError, match="counts has element format"):
        c.count_codes(np.array([1], np.uint8), np.zeros(4))


def test_a_narrowed_column_keeps_the_same_values_both_ways(monkeypatch):
    # past its limit a column keeps only its window's values (np.take and np.compress pick them); with the
    # compiled counts or numpy's, the same values are kept and the same quantiles come out, equal to np.quantile
    from mismatchscope.analysis.quantiles import ExactQuantiles

    rng = np.random.default_rng(4)
    batches = [rng.normal(0, 0.05, 5000) for _ in range(10)]
    qs = (0.01, 0.5, 0.99)
    got = {}
    for switch in ("1", "0"):
        monkeypatch.setenv(COMPILED_ENV, switch)
        q = ExactQuantiles(limit=20_000, expect=qs)
        for b in batches:
            q.add(b)
        assert q.window is not None and q.covers(qs)  # narrowed, and answers in one pass
        got[switch] = (np.concatenate(q.parts), q.quantiles(qs))
    assert np.array_equal(got["1"][0], got["0"][0]) and got["1"][0].size < 40_000
    assert np.array_equal(got["1"][1], got["0"][1])
    assert np.array_equal(got["1"][1], np.quantile(np.concatenate(batches), qs))


def test_exact_quantiles_count_the_same_bins_both_ways(monkeypatch):
    from mismatchscope.analysis.quantiles import ExactQuantiles

    rng = np.random.default_rng(2)
    values = [rng.normal(0, 0.1, 5000), rng.standard_normal(3000).astype(np.float32), np.array([-0.0, 0.0, 1e-300])]
    got = {}
    for switch in ("1", "off"):
        monkeypatch.setenv(COMPILED_ENV, switch)
        q = ExactQuantiles()
        for v in values[:2]:
            q.add(v.astype(np.float64))
        q.add(values[2])
        got[switch] = (q.counts.copy(), q.quantiles([0.0, 0.001, 0.5, 0.999, 1.0]))
    assert compiled.loops() is None  # "off" turned the loops off
    assert np.array_equal(got["1"][0], got["off"][0]) and got["1"][0].sum() == 8003
    assert np.array_equal(got["1"][1], got["off"][1])


@pytest.mark.parametrize("value", ["0", "false", "No", " OFF "])
def test_the_switch_turns_the_loops_off(monkeypatch, value):
    monkeypatch.setenv(COMPILED_ENV, value)
    assert compiled.loops() is None
    monkeypatch.setenv(COMPILED_ENV, "1")
    assert compiled.loops() is compiled._loops
