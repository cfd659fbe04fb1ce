"""The top-k bounds' per-row loop, compiled to machine code once per process (LLVM, through llvmlite).

Why compiled: per row, the bounds add a handful of terms over each list entry
(two ``exp``, a difference, an ``abs``, a product, a compare). As numpy array
operations that is about fourteen passes over the batch per list column; one
loop does it in registers, in little more than the time of its two ``exp``
calls: 0.96 s of CPU against numpy's 1.67 s on ten million tokens with
five-entry lists.

Why llvmlite and not numba: numba's own set-up before a first call (0.4 s of
CPU, cached machine code or not) costs most of what the loop saves on ten
million tokens; importing llvmlite and compiling this one function takes
0.05 s (0.1 s of CPU), in memory, so nothing is cached on disk and a
read-only install works as any. The loop saves about 0.07 s of CPU per
million tokens, so a report of a run over a million tokens gains, and a
report of a small run pays those 0.05 s once.

Why its numbers are numpy's, to the bit: :data:`BOUNDS_ROWS_IR` performs the
float64 operations of the numpy formulas, in their order (each row's list
entries added to 0.0 one by one in list order, then the sampled id, then the
rest bucket; ``maximum``/``minimum`` keep a NaN), with no fast-math flags and
no fused multiply-adds (the IR marks nothing contractible), and ``exp``/``log``
are the C library's, which numpy's float64 ``exp``/``log`` call too on CPUs
without AVX-512 (with it, numpy has its own, which may differ in the last
bit). tests/test_topk_kernel.py checks the loop bit for bit against a
plain-Python reference built on ``math.exp`` and ``math.log``.
"""

from __future__ import annotations

import ctypes
import threading
from collections.abc import Callable

import numpy as np

BOUNDS_ROWS_IR = r"""
declare double @exp(double)
declare double @log(double)
declare double @llvm.fabs.f64(double)

define void @bounds_rows(i64 %n, ptr noalias %ends, ptr noalias %token_id, ptr noalias %sampler_lp,
                         ptr noalias %trainer_lp, ptr noalias %q_T, ptr noalias %p_T,
                         ptr noalias %ids, ptr noalias %slp, ptr noalias %tlp,
                         ptr noalias %tv_out, ptr noalias %kl_out, ptr noalias %q_mass_out,
                         ptr noalias %p_mass_out, double %rest_eps) {
entry:
  %any = icmp sgt i64 %n, 0
  br i1 %any, label %row, label %done

row:                                      ; one token: sum its list, then its tail
  %i = phi i64 [ 0, %entry ], [ %i_next, %store ]
  %i_next = add i64 %i, 1
  %a_ptr = getelementptr i64, ptr %ends, i64 %i
  %a = load i64, ptr %a_ptr
  %b_ptr = getelementptr i64, ptr %ends, i64 %i_next
  %b = load i64, ptr %b_ptr
  %tok_ptr = getelementptr i64, ptr %token_id, i64 %i
  %tok = load i64, ptr %tok_ptr
  %has_list = icmp slt i64 %a, %b
  br i1 %has_list, label %entry_loop, label %tail

entry_loop:                               ; each list entry, in list order, added to sums that start at 0.0
  %j = phi i64 [ %a, %row ], [ %j_next, %entry_loop ]
  %q_acc = phi double [ 0.0, %row ], [ %q_acc1, %entry_loop ]
  %p_acc = phi double [ 0.0, %row ], [ %p_acc1, %entry_loop ]
  %abs_acc = phi double [ 0.0, %row ], [ %abs_acc1, %entry_loop ]
  %kl_acc = phi double [ 0.0, %row ], [ %kl_acc1, %entry_loop ]
  %hit_acc = phi i1 [ false, %row ], [ %hit_acc1, %entry_loop ]
  %s_ptr = getelementptr double, ptr %slp, i64 %j
  %s = load double, ptr %s_ptr
  %t_ptr = getelementptr double, ptr %tlp, i64 %j
  %t = load double, ptr %t_ptr
  %id_ptr = getelementptr i64, ptr %ids, i64 %j
  %id = load i64, ptr %id_ptr
  %qj = call double @exp(double %s)
  %pj = call double @exp(double %t)
  %q_acc1 = fadd double %q_acc, %qj
  %p_acc1 = fadd double %p_acc, %pj
  %pq = fsub double %pj, %qj
  %abs_pq = call double @llvm.fabs.f64(double %pq)
  %abs_acc1 = fadd double %abs_acc, %abs_pq
  %st = fsub double %s, %t
  %kl_j = fmul double %st, %qj
  %q_zero = fcmp oeq double %qj, 0.0        ; 0 log 0 = 0, whatever p is
  %kl_term = select i1 %q_zero, double 0.0, double %kl_j
  %kl_acc1 = fadd double %kl_acc, %kl_term
  %hit = icmp eq i64 %id, %tok
  %hit_acc1 = or i1 %hit_acc, %hit
  %j_next = add i64 %j, 1
  %more = icmp slt i64 %j_next, %b
  br i1 %more, label %entry_loop, label %tail

tail:                                     ; the sampled id when the list lacks it, tv, the rest bucket
  %q_list = phi double [ 0.0, %row ], [ %q_acc1, %entry_loop ]
  %p_list = phi double [ 0.0, %row ], [ %p_acc1, %entry_loop ]
  %abs_list = phi double [ 0.0, %row ], [ %abs_acc1, %entry_loop ]
  %kl_list = phi double [ 0.0, %row ], [ %kl_acc1, %entry_loop ]
  %listed = phi i1 [ false, %row ], [ %hit_acc1, %entry_loop ]
  %qi_ptr = getelementptr double, ptr %q_T, i64 %i
  %qi = load double, ptr %qi_ptr
  %pi_ptr = getelementptr double, ptr %p_T, i64 %i
  %pi = load double, ptr %pi_ptr
  %extra_q = select i1 %listed, double 0.0, double %qi
  %extra_p = select i1 %listed, double 0.0, double %pi
  %q_sum = fadd double %q_list, %extra_q
  %p_sum = fadd double %p_list, %extra_p
  %extra_pq = fsub double %extra_p, %extra_q
  %abs_extra = call double @llvm.fabs.f64(double %extra_pq)
  %abs_sum = fadd double %abs_list, %abs_extra
  %mass_gap = fsub double %q_sum, %p_sum
  %abs_gap = call double @llvm.fabs.f64(double %mass_gap)
  %tv_twice = fadd double %abs_sum, %abs_gap
  %tv = fmul double 0.5, %tv_twice
  %q_nonpos = fcmp ole double %extra_q, 0.0  ; false for NaN, as numpy's extra_q <= 0
  %skip_extra = or i1 %listed, %q_nonpos
  %lq_ptr = getelementptr double, ptr %sampler_lp, i64 %i
  %lq = load double, ptr %lq_ptr
  %lp_ptr = getelementptr double, ptr %trainer_lp, i64 %i
  %lp = load double, ptr %lp_ptr
  %lqp = fsub double %lq, %lp
  %kl_extra0 = fmul double %extra_q, %lqp
  %kl_extra = select i1 %skip_extra, double 0.0, double %kl_extra0
  %kl_in = fadd double %kl_list, %kl_extra
  %q_rest0 = fsub double 1.0, %q_sum
  %q_rest_neg = fcmp olt double %q_rest0, 0.0  ; maximum(x, 0.0): NaN stays NaN
  %q_rest = select i1 %q_rest_neg, double 0.0, double %q_rest0
  %p_rest0 = fsub double 1.0, %p_sum
  %p_rest_low = fcmp olt double %p_rest0, %rest_eps  ; maximum(x, REST_EPS)
  %p_rest = select i1 %p_rest_low, double %rest_eps, double %p_rest0
  %rest_mass = fcmp ogt double %q_rest, %rest_eps
  br i1 %rest_mass, label %rest_log, label %store

rest_log:                                 ; logarithms only where the rest bucket holds sampler mass
  %log_q = call double @log(double %q_rest)
  %log_p = call double @log(double %p_rest)
  %log_qp = fsub double %log_q, %log_p
  %kl_rest0 = fmul double %q_rest, %log_qp
  br label %store

store:
  %kl_rest = phi double [ 0.0, %tail ], [ %kl_rest0, %rest_log ]
  %kl = fadd double %kl_in, %kl_rest
  %kl_neg = fcmp olt double %kl, 0.0
  %kl_low = select i1 %kl_neg, double 0.0, double %kl
  %tv_big = fcmp ogt double %tv, 1.0
  %tv_low = select i1 %tv_big, double 1.0, double %tv
  %tv_ptr = getelementptr double, ptr %tv_out, i64 %i
  store double %tv_low, ptr %tv_ptr
  %kl_ptr = getelementptr double, ptr %kl_out, i64 %i
  store double %kl_low, ptr %kl_ptr
  %qm_ptr = getelementptr double, ptr %q_mass_out, i64 %i
  store double %q_sum, ptr %qm_ptr
  %pm_ptr = getelementptr double, ptr %p_mass_out, i64 %i
  store double %p_sum, ptr %pm_ptr
  %next_row = icmp slt i64 %i_next, %n
  br i1 %next_row, label %row, label %done

done:
  ret void
}
"""
"""``bounds_rows(n, ends, token_id, sampler_lp, trainer_lp, q, p, ids, slp, tlp, tv_out, kl_out, q_mass_out,
p_mass_out, rest_eps)``: per row i, its list is entries ``ends[i]:ends[i + 1]`` of ``ids``/``slp``/``tlp``;
``tv_out``, ``kl_out``, ``q_mass_out``, ``p_mass_out`` receive what ``topk.TopkBounds`` holds."""

_BOUNDS_ARGS = (ctypes.c_int64,) + (ctypes.c_void_p,) * 13 + (ctypes.c_double,)

_lock = threading.Lock()
_compiled: dict[str, tuple[Callable[..., None], object]] = {}
"""function name -> (its ctypes entry point, the execution engine that owns its machine code)."""


def _function(name: str, ir: str, argtypes: tuple) -> Callable[..., None]:
    """The compiled function ``name`` of ``ir``, compiled on first use (once per process, thread-safe)."""
    with _lock:
        if name not in _compiled:
            import llvmlite.binding as llvm  # only a pass that needs the loop pays for LLVM

            llvm.initialize_native_target()
            llvm.initialize_native_asmprinter()
            module = llvm.parse_assembly(ir)
            module.verify()
            machine = llvm.Target.from_default_triple().create_target_machine(opt=2)
            engine = llvm.create_mcjit_compiler(module, machine)
            engine.finalize_object()
            entry = ctypes.CFUNCTYPE(None, *argtypes)(engine.get_function_address(name))
            _compiled[name] = (entry, engine)
        return _compiled[name][0]


def bounds_rows(
    ends: np.ndarray,
    token_id_T: np.ndarray,
    sampler_logprob_T: np.ndarray,
    trainer_logprob_T: np.ndarray,
    q_T: np.ndarray,
    p_T: np.ndarray,
    ids: np.ndarray,
    slp: np.ndarray,
    tlp: np.ndarray,
    rest_eps: float,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(tv, kl, sum_K q, sum_K p) per row, as ``topk.topk_bounds`` defines them.

    ``ends``: the n + 1 list offsets from 0; row i's list is ``ids[ends[i]:ends[i + 1]]`` and the same
    slice of ``slp`` (sampler logprobs) and ``tlp`` (trainer logprobs). The loop indexes raw memory, so
    every length is checked here first.
    """
    n = token_id_T.shape[0]
    ends = np.ascontiguousarray(ends, np.int64)
    n_list = int(ends[-1]) if ends.size else 0
    if ends.shape != (n + 1,) or (n and (ends[0] != 0 or (np.diff(ends) < 0).any())):
        raise ValueError("list offsets must be n + 1 non-decreasing values from 0")
    rows = [
        np.ascontiguousarray(a, dt)
        for a, dt in (
            (token_id_T, np.int64),
            (sampler_logprob_T, np.float64),
            (trainer_logprob_T, np.float64),
            (q_T, np.float64),
            (p_T, np.float64),
        )
    ]
    flat = [
        np.ascontiguousarray(ids, np.int64),
        np.ascontiguousarray(slp, np.float64),
        np.ascontiguousarray(tlp, np.float64),
    ]
    if any(a.shape != (n,) for a in rows) or any(a.shape != (n_list,) for a in flat):
        raise ValueError("per-row arrays must hold n values and the list arrays ends[-1]")
    out = tuple(np.empty(n) for _ in range(4))
    if n:
        arrays = (ends, *rows, *flat, *out)
        _function("bounds_rows", BOUNDS_ROWS_IR, _BOUNDS_ARGS)(n, *(a.ctypes.data for a in arrays), rest_eps)
    return out  # pyright: ignore[reportReturnType] - four arrays
