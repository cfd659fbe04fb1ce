/* The audit's binary-KL statistics, the arithmetic between numpy's logarithms (audit/kl.py says when it runs).
 *
 * kpop's max(D(q||p), D(p||q)) and dppo-kl's D(q||p) are a dozen numpy passes each over every token the audit
 * writes. These loops do the clamps, sums, products and maxima of divergence.binary_kl_logs_both and
 * rules.token.dppo_binary_kl in one pass before the logarithms and one after, the same floating-point
 * operations in the same order, so every value is numpy's bit for bit (tests/audit/test_kl.py holds them to each
 * other). The logarithms and exponentials stay numpy's: on CPUs with AVX-512 numpy's own vector log can differ
 * from the C library's in the last bit, and the statistic must be the number the rule compared.
 *
 *   - maximum, minimum and clip propagate NaN as numpy's do, and of two equal values maximum returns the second,
 *     as numpy's does on x86-64;
 *   - the build turns off floating-point contraction (-ffp-contract=off): no a * b + c becomes a fused
 *     multiply-add, and a build that allows value-changing optimisations is refused below.
 *
 * The GIL is released inside the loops.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>

#if defined(_MSC_VER) && !defined(restrict)
#define restrict __restrict /* MSVC's C before C11 knows only its own spelling */
#endif

#if defined(__FAST_MATH__) || __FINITE_MATH_ONLY__ || defined(__NO_SIGNED_ZEROS__)
#error "the audit's loops must round as numpy does: build them without -ffast-math or its parts"
#endif

/* Written without branches (| where || would be), so the compiler can turn each loop into vector blends. */
static inline double np_max(double a, double b)
{
    const double r = a > b ? a : b;
    return a != a ? a : r;
}
/* np.clip(x, lo, hi) for float64: min(max(x, lo), hi), a NaN kept. */
static inline double np_clip(double x, double lo, double hi)
{
    const double m = x > lo ? x : lo, c = m < hi ? m : hi;
    return x != x ? x : c;
}

/* Each loop is built for AVX-512, AVX2 and the baseline, picked at load time by the CPU it runs on: the same
 * operations either way (contraction stays off), only wider. */
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__linux__)
#define WIDE __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define WIDE
#endif

/* The loops. */

WIDE static void max_prepare(Py_ssize_t n, const double *restrict lq, const double *restrict lp,
                             const double *restrict q1, const double *restrict p1, double *restrict la,
                             double *restrict lb, double *restrict a1, double *restrict b1, double eps, double lo,
                             double hi, Py_ssize_t *moved)
{
    const double top = 1.0 - eps;
    Py_ssize_t ma = 0, mb = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        const double x = np_clip(lq[i], lo, hi), y = np_clip(lp[i], lo, hi);
        ma += x != lq[i];
        mb += y != lp[i];
        la[i] = x;
        lb[i] = y;
        a1[i] = np_clip(q1[i], eps, top);
        b1[i] = np_clip(p1[i], eps, top);
    }
    moved[0] = ma;
    moved[1] = mb;
}

WIDE static void max_finish(Py_ssize_t n, const double *restrict la, const double *restrict lb,
                            const double *restrict a, const double *restrict b, const double *restrict a1,
                            const double *restrict b1, const double *restrict la1, const double *restrict lb1,
                            double *restrict out)
{
    for (Py_ssize_t i = 0; i < n; i++) {
        const double dl = la[i] - lb[i], dl1 = la1[i] - lb1[i];
        const double ab1 = a[i] * dl, ab2 = a1[i] * dl1;
        const double ba1 = b[i] * -dl, ba2 = b1[i] * -dl1;
        const double ab = ab1 + ab2, ba = ba1 + ba2;
        out[i] = np_max(np_max(ab, 0.0), np_max(ba, 0.0));
    }
}

WIDE static void qp_prepare(Py_ssize_t n, const double *restrict q1, const double *restrict p1,
                            double *restrict s1, double *restrict s2, double eps)
{
    for (Py_ssize_t i = 0; i < n; i++) {
        s1[i] = q1[i] + eps;
        s2[i] = p1[i] + eps;
    }
}

WIDE static void qp_finish(Py_ssize_t n, const double *restrict lq, const double *restrict lp,
                           const double *restrict q, const double *restrict q1, const double *restrict ls1,
                           const double *restrict ls2, double *restrict out)
{
    for (Py_ssize_t i = 0; i < n; i++) {
        const double x = q[i] * (lq[i] - lp[i]), y = q1[i] * (ls1[i] - ls2[i]);
        const double a = q[i] > 0 ? x : 0.0, c = q1[i] > 0 ? y : 0.0;
        out[i] = np_max(a + c, 0.0);
    }
}

/* Up to 9 float64 arguments, C-contiguous, all of n items; outputs writable. */
static int take(const char *fn, PyObject *const *obj, Py_buffer *b, int n_args, int first_out, Py_ssize_t *n)
{
    for (int a = 0; a < n_args; a++) {
        int flags = PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | (a >= first_out ? PyBUF_WRITABLE : 0);
        if (PyObject_GetBuffer(obj[a], &b[a], flags) < 0) {
            for (int r = 0; r < a; r++) PyBuffer_Release(&b[r]);
            return -1;
        }
        const char *f = b[a].format ? b[a].format : "B";
        if (*f == '@' || *f == '=' || *f == '<') f++;
        const Py_ssize_t items = b[a].itemsize ? b[a].len / b[a].itemsize : -1;
        if (f[0] != 'd' || f[1] != '\0' || b[a].itemsize != 8 || (a > 0 && items != *n)) {
            PyErr_Format(PyExc_TypeError, "%s: argument %d is not float64 of the first's length", fn, a + 1);
            for (int r = 0; r <= a; r++) PyBuffer_Release(&b[r]);
            return -1;
        }
        if (a == 0) *n = items;
    }
    return 0;
}

static void release(Py_buffer *b, int n)
{
    for (int a = 0; a < n; a++) PyBuffer_Release(&b[a]);
}

/* kl_max_prepare(lq, lp, q1, p1, la, lb, a1, b1, eps, lo, hi) -> (moved_a, moved_b): the clamped logs and
 * complements, and how many of each side's logs the clamp moved (their exponentials are numpy's to take). */
static PyObject *kl_max_prepare(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *obj[8];
    double eps, lo, hi;
    if (!PyArg_ParseTuple(args, "OOOOOOOOddd:kl_max_prepare", &obj[0], &obj[1], &obj[2], &obj[3], &obj[4], &obj[5],
                          &obj[6], &obj[7], &eps, &lo, &hi))
        return NULL;
    Py_buffer b[8];
    Py_ssize_t n = 0;
    if (take("kl_max_prepare", obj, b, 8, 4, &n) < 0) return NULL;
    const double *lq = b[0].buf, *lp = b[1].buf, *q1 = b[2].buf, *p1 = b[3].buf;
    double *la = b[4].buf, *lb = b[5].buf, *a1 = b[6].buf, *b1 = b[7].buf;
    Py_ssize_t moved[2] = {0, 0};
    Py_BEGIN_ALLOW_THREADS
    max_prepare(n, lq, lp, q1, p1, la, lb, a1, b1, eps, lo, hi, moved);
    Py_END_ALLOW_THREADS
    const Py_ssize_t moved_a = moved[0], moved_b = moved[1];
    release(b, 8);
    return Py_BuildValue("nn", moved_a, moved_b);
}

/* kl_max_finish(la, lb, a, b, a1, b1, la1, lb1, out): max(max(a dl + a1 dl1, 0), max(b (-dl) + b1 (-dl1), 0)),
 * dl = la - lb, dl1 = la1 - lb1 (la1, lb1: numpy's logs of a1, b1). */
static PyObject *kl_max_finish(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *obj[9];
    if (!PyArg_ParseTuple(args, "OOOOOOOOO:kl_max_finish", &obj[0], &obj[1], &obj[2], &obj[3], &obj[4], &obj[5],
                          &obj[6], &obj[7], &obj[8]))
        return NULL;
    Py_buffer b[9];
    Py_ssize_t n = 0;
    if (take("kl_max_finish", obj, b, 9, 8, &n) < 0) return NULL;
    const double *la = b[0].buf, *lb = b[1].buf, *a = b[2].buf, *bb = b[3].buf, *a1 = b[4].buf, *b1 = b[5].buf;
    const double *la1 = b[6].buf, *lb1 = b[7].buf;
    double *out = b[8].buf;
    Py_BEGIN_ALLOW_THREADS
    max_finish(n, la, lb, a, bb, a1, b1, la1, lb1, out);
    Py_END_ALLOW_THREADS
    release(b, 9);
    return Py_NewRef(Py_None);
}

/* kl_qp_prepare(q1, p1, s1, s2, eps): s1 = q1 + eps, s2 = p1 + eps (numpy takes their logs in place). */
static PyObject *kl_qp_prepare(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *obj[4];
    double eps;
    if (!PyArg_ParseTuple(args, "OOOOd:kl_qp_prepare", &obj[0], &obj[1], &obj[2], &obj[3], &eps)) return NULL;
    Py_buffer b[4];
    Py_ssize_t n = 0;
    if (take("kl_qp_prepare", obj, b, 4, 2, &n) < 0) return NULL;
    const double *q1 = b[0].buf, *p1 = b[1].buf;
    double *s1 = b[2].buf, *s2 = b[3].buf;
    Py_BEGIN_ALLOW_THREADS
    qp_prepare(n, q1, p1, s1, s2, eps);
    Py_END_ALLOW_THREADS
    release(b, 4);
    return Py_NewRef(Py_None);
}

/* kl_qp_finish(lq, lp, q, q1, ls1, ls2, out): max((q > 0 ? q (lq - lp) : 0) + (q1 > 0 ? q1 (ls1 - ls2) : 0), 0). */
static PyObject *kl_qp_finish(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *obj[7];
    if (!PyArg_ParseTuple(args, "OOOOOOO:kl_qp_finish", &obj[0], &obj[1], &obj[2], &obj[3], &obj[4], &obj[5],
                          &obj[6]))
        return NULL;
    Py_buffer b[7];
    Py_ssize_t n = 0;
    if (take("kl_qp_finish", obj, b, 7, 6, &n) < 0) return NULL;
    const double *lq = b[0].buf, *lp = b[1].buf, *q = b[2].buf, *q1 = b[3].buf, *ls1 = b[4].buf, *ls2 = b[5].buf;
    double *out = b[6].buf;
    Py_BEGIN_ALLOW_THREADS
    qp_finish(n, lq, lp, q, q1, ls1, ls2, out);
    Py_END_ALLOW_THREADS
    release(b, 7);
    return Py_NewRef(Py_None);
}

static PyMethodDef methods[] = {
    {"kl_max_prepare", kl_max_prepare, METH_VARARGS,
     "kl_max_prepare(lq, lp, q1, p1, la, lb, a1, b1, eps, lo, hi) -> (moved_a, moved_b)"},
    {"kl_max_finish", kl_max_finish, METH_VARARGS, "kl_max_finish(la, lb, a, b, a1, b1, la1, lb1, out)"},
    {"kl_qp_prepare", kl_qp_prepare, METH_VARARGS, "kl_qp_prepare(q1, p1, s1, s2, eps)"},
    {"kl_qp_finish", kl_qp_finish, METH_VARARGS, "kl_qp_finish(lq, lp, q, q1, ls1, ls2, out)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_kl", NULL, 0, methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__kl(void) { return PyModule_Create(&module); }
