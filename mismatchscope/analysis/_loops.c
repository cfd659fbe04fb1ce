/* The analysis pass's compiled loops (mismatchscope/analysis/compiled.py says when they run).
 *
 * topk_bounds   the top-k bounds' per-row loop (analysis/topk.py). numpy computes the bounds a column of
 *               the [n, k] table at a time: a dozen passes over row-sized arrays for each of the k columns.
 * count_codes   counts of small integer codes (the exact quantiles' bins): np.bincount would first copy
 *               the codes to a 64-bit array and the counts to a fresh one, every batch.
 *
 * The top-k loop does exactly the floating-point operations of the numpy code, in the same order, so its
 * results are numpy's bit for bit (tests/analysis/test_compiled.py holds them to each other and to a
 * reference in Python):
 *
 *   - every sum starts at 0.0 and adds its values in list order;
 *   - exp and log are the C library's, which is what numpy calls for float64 on CPUs without AVX-512 (on
 *     those with it, numpy's own vector exp can differ from the C library's in the last bit; this loop
 *     stays with libm);
 *   - maximum and minimum propagate NaN as numpy's do, and of two equal values return the second, as
 *     numpy's do on x86-64 (no operand of theirs here can be -0.0, so the sign of a zero never depends on
 *     it);
 *   - the build turns off floating-point contraction (-ffp-contract=off), so no a * b + c becomes one fused
 *     multiply-add with a different rounding, and a build that allows value-changing optimisations
 *     (-ffast-math, -funsafe-math-optimizations, -ffinite-math-only) is refused below.
 *
 * count_codes checks every code before it counts any, so a refused call leaves the counts as they were.
 *
 * The GIL is released inside the loops, so the analysis threads run them side by side.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>

#if defined(__FAST_MATH__) || __FINITE_MATH_ONLY__ || defined(__NO_SIGNED_ZEROS__)
#error "the analysis loops must round as numpy does: build them without -ffast-math or its parts"
#endif

static inline double np_max(double a, double b) { return (a > b || isnan(a)) ? a : b; }
static inline double np_min(double a, double b) { return (a < b || isnan(a)) ? a : b; }

/* One row's list: the sums of q, p, |p - q| and q (log q - log p), and whether it names the sampled id;
 * then the row's bounds and the rest bucket's tail ratio, as topk._bounds_block computes them. */
#define DEFINE_ROWS(NAME, OFF_T, VAL_T)                                                                     \
    static int NAME(Py_ssize_t n, const OFF_T *off, Py_ssize_t n_values, const int64_t *ids,                 \
                    const VAL_T *slp, const VAL_T *tlp, const int64_t *tok, const double *lq_T,              \
                    const double *lp_T, const double *q_T, const double *p_T, double rest_eps,               \
                    double tail_empty, double *tv_out, double *kl_out, double *qm_out, double *pm_out,       \
                    double *rho_out, char *empty_q_out, char *empty_p_out)                                  \
    {                                                                                                        \
        for (Py_ssize_t i = 0; i < n; i++) {                                                                 \
            const int64_t lo = (int64_t)off[i], hi = (int64_t)off[i + 1];                                    \
            if (lo < 0 || hi < lo || hi > (int64_t)n_values) return -1;                                      \
            double q_sum = 0.0, p_sum = 0.0, abs_sum = 0.0, kl_in = 0.0;                                     \
            int listed = 0;                                                                                  \
            for (int64_t e = lo; e < hi; e++) {                                                              \
                const double s = (double)slp[e], t = (double)tlp[e];                                         \
                const double q = exp(s), p = exp(t);                                                         \
                q_sum += q;                                                                                  \
                p_sum += p;                                                                                  \
                abs_sum += fabs(p - q);                                                                      \
                double kl = (s - t) * q;                                                                     \
                if (q == 0.0) kl = 0.0; /* 0 log 0 = 0, whatever p is */                                     \
                kl_in += kl;                                                                                 \
                listed |= ids[e] == tok[i];                                                                  \
            }                                                                                                \
            const double extra_q = listed ? 0.0 : q_T[i], extra_p = listed ? 0.0 : p_T[i];                   \
            q_sum += extra_q;                                                                                \
            p_sum += extra_p;                                                                                \
            abs_sum += fabs(extra_p - extra_q);                                                              \
            const double tv = 0.5 * (abs_sum + fabs(q_sum - p_sum));                                         \
            kl_in += (listed || extra_q <= 0.0) ? 0.0 : extra_q * (lq_T[i] - lp_T[i]);                       \
            const double q_rest = np_max(1.0 - q_sum, 0.0), p_rest = np_max(1.0 - p_sum, rest_eps);         \
            const double kl_rest = q_rest > rest_eps ? q_rest * (log(q_rest) - log(p_rest)) : 0.0;           \
            tv_out[i] = np_min(tv, 1.0);                                                                     \
            kl_out[i] = np_max(kl_in + kl_rest, 0.0);                                                        \
            qm_out[i] = q_sum;                                                                               \
            pm_out[i] = p_sum;                                                                               \
            const double q_tail = 1.0 - q_sum, p_tail = 1.0 - p_sum;                                         \
            const int empty_q = q_tail < tail_empty, empty_p = p_tail < tail_empty;                          \
            empty_q_out[i] = (char)empty_q;                                                                  \
            empty_p_out[i] = (char)empty_p;                                                                  \
            rho_out[i] = (empty_q || empty_p) ? (double)NAN : q_tail / p_tail;                               \
        }                                                                                                    \
        return 0;                                                                                            \
    }

DEFINE_ROWS(rows_i32_f64, int32_t, double)
DEFINE_ROWS(rows_i32_f32, int32_t, float)
DEFINE_ROWS(rows_i64_f64, int64_t, double)
DEFINE_ROWS(rows_i64_f32, int64_t, float)

/* Add each code's occurrences to counts[code]; -1, with nothing counted, where a code is beyond the counts. */
#define DEFINE_COUNT(NAME, CODE_T)                                                                          \
    static int NAME(Py_ssize_t n, const CODE_T *codes, int64_t *counts, Py_ssize_t n_counts)                \
    {                                                                                                        \
        CODE_T top = 0;                                                                                      \
        for (Py_ssize_t i = 0; i < n; i++) top = codes[i] > top ? codes[i] : top;                           \
        if (n && (Py_ssize_t)top >= n_counts) return -1;                                                     \
        for (Py_ssize_t i = 0; i < n; i++) counts[codes[i]]++;                                               \
        return 0;                                                                                            \
    }

DEFINE_COUNT(count_u8, uint8_t)
DEFINE_COUNT(count_u16, uint16_t)

/* The element kind of a buffer from its struct format: 'i' for a signed integer, 'u' for an unsigned one,
 * 'f' for a float, 'b' for a bool, 0 for anything else (the item size is checked apart). */
static char kind(const Py_buffer *b)
{
    const char *f = b->format ? b->format : "B";
    if (*f == '@' || *f == '=' || *f == '<') f++;
    if (f[0] == '\0' || f[1] != '\0') return 0;
    switch (f[0]) {
    case 'b': case 'h': case 'i': case 'l': case 'q': return 'i';
    case 'B': case 'H': case 'I': case 'L': case 'Q': return 'u';
    case 'f': case 'd': return 'f';
    case '?': return 'b';
    default: return 0;
    }
}

/* What a function takes in one argument: its name, element kind, the element sizes it reads (a bit per size
 * in bytes), and whether it is written. */
typedef struct {
    const char *name;
    char kind;
    unsigned sizes;
    int out;
} Arg;

#define B1 (1u << 1)
#define B2 (1u << 2)
#define B4 (1u << 4)
#define B8 (1u << 8)

/* Take the buffers of n arguments, checked against their specs; on failure, release those taken, set the
 * error and return -1. */
static int take(const char *fn, const Arg *spec, PyObject *const *obj, Py_buffer *b, int n)
{
    for (int a = 0; a < n; a++) {
        int flags = PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | (spec[a].out ? PyBUF_WRITABLE : 0);
        if (PyObject_GetBuffer(obj[a], &b[a], flags) < 0) {
            for (int r = 0; r < a; r++) PyBuffer_Release(&b[r]);
            return -1;
        }
        const Py_ssize_t size = b[a].itemsize;
        if (kind(&b[a]) != spec[a].kind || size < 1 || size > 8 || !(spec[a].sizes & (1u << size))) {
            PyErr_Format(PyExc_TypeError, "%s: %s has element format %s", fn, spec[a].name,
                         b[a].format ? b[a].format : "B");
            for (int r = 0; r <= a; r++) PyBuffer_Release(&b[r]);
            return -1;
        }
    }
    return 0;
}

static void release(Py_buffer *b, int n)
{
    for (int a = 0; a < n; a++) PyBuffer_Release(&b[a]);
}

static Py_ssize_t items(const Py_buffer *b) { return b->len / b->itemsize; }

/* Whether buffers [from, to) all hold n items; else the error is set. */
static int all_hold(const char *fn, const Arg *spec, const Py_buffer *b, int from, int to, Py_ssize_t n)
{
    for (int a = from; a < to; a++) {
        if (items(&b[a]) != n) {
            PyErr_Format(PyExc_ValueError, "%s: %s has %zd values for %zd rows", fn, spec[a].name, items(&b[a]), n);
            return 0;
        }
    }
    return 1;
}

#define TOPK_ARGS 16
static const Arg topk_spec[TOPK_ARGS] = {
    {"offsets", 'i', B4 | B8, 0}, {"ids", 'i', B8, 0},      {"slp", 'f', B4 | B8, 0},  {"tlp", 'f', B4 | B8, 0},
    {"token_id", 'i', B8, 0},     {"lq_T", 'f', B8, 0},     {"lp_T", 'f', B8, 0},      {"q_T", 'f', B8, 0},
    {"p_T", 'f', B8, 0},          {"tv_out", 'f', B8, 1},   {"kl_out", 'f', B8, 1},    {"qmass_out", 'f', B8, 1},
    {"pmass_out", 'f', B8, 1},    {"rho_out", 'f', B8, 1},  {"empty_q_out", 'b', B1, 1}, {"empty_p_out", 'b', B1, 1},
};

static PyObject *topk_bounds(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *obj[TOPK_ARGS];
    double rest_eps, tail_empty;
    if (!PyArg_ParseTuple(args, "OOOOOOOOOOOOOOOOdd:topk_bounds", &obj[0], &obj[1], &obj[2], &obj[3], &obj[4], &obj[5],
                          &obj[6], &obj[7], &obj[8], &obj[9], &obj[10], &obj[11], &obj[12], &obj[13], &obj[14],
                          &obj[15], &rest_eps, &tail_empty))
        return NULL;
    Py_buffer b[TOPK_ARGS];
    if (take("topk_bounds", topk_spec, obj, b, TOPK_ARGS) < 0) return NULL;
    PyObject *result = NULL;
    const Py_ssize_t n = items(&b[4]), n_values = items(&b[1]);
    if (items(&b[0]) != n + 1 || items(&b[2]) != n_values || items(&b[3]) != n_values ||
        b[2].itemsize != b[3].itemsize) {
        PyErr_SetString(PyExc_ValueError, "topk_bounds: the offsets and the list values do not match the rows");
        goto done;
    }
    if (!all_hold("topk_bounds", topk_spec, b, 5, TOPK_ARGS, n)) goto done;
    const int wide_off = b[0].itemsize == 8, wide_val = b[2].itemsize == 8;
    const void *off = b[0].buf, *slp = b[2].buf, *tlp = b[3].buf;
    const int64_t *ids = b[1].buf, *tok = b[4].buf;
    const double *lq = b[5].buf, *lp = b[6].buf, *q = b[7].buf, *p = b[8].buf;
    double *tv = b[9].buf, *kl = b[10].buf, *qm = b[11].buf, *pm = b[12].buf, *rho = b[13].buf;
    char *eq = b[14].buf, *ep = b[15].buf;
    int rc;
    Py_BEGIN_ALLOW_THREADS
#define ROWS_ARGS n, off, n_values, ids, slp, tlp, tok, lq, lp, q, p, rest_eps, tail_empty, tv, kl, qm, pm, rho, eq, ep
    if (wide_off)
        rc = wide_val ? rows_i64_f64(ROWS_ARGS) : rows_i64_f32(ROWS_ARGS);
    else
        rc = wide_val ? rows_i32_f64(ROWS_ARGS) : rows_i32_f32(ROWS_ARGS);
#undef ROWS_ARGS
    Py_END_ALLOW_THREADS
    if (rc < 0) {
        PyErr_SetString(PyExc_ValueError, "topk_bounds: the list offsets are not increasing within the list values");
        goto done;
    }
    result = Py_NewRef(Py_None);
done:
    release(b, TOPK_ARGS);
    return result;
}

static const Arg count_spec[2] = {{"codes", 'u', B1 | B2, 0}, {"counts", 'i', B8, 1}};

static PyObject *count_codes(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *obj[2];
    if (!PyArg_ParseTuple(args, "OO:count_codes", &obj[0], &obj[1])) return NULL;
    Py_buffer b[2];
    if (take("count_codes", count_spec, obj, b, 2) < 0) return NULL;
    const Py_ssize_t n = items(&b[0]), n_counts = items(&b[1]);
    int64_t *counts = b[1].buf;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = b[0].itemsize == 1 ? count_u8(n, b[0].buf, counts, n_counts) : count_u16(n, b[0].buf, counts, n_counts);
    Py_END_ALLOW_THREADS
    release(b, 2);
    if (rc < 0) {
        PyErr_Format(PyExc_ValueError, "count_codes: a code is beyond the %zd counts", n_counts);
        return NULL;
    }
    return Py_NewRef(Py_None);
}

static PyMethodDef methods[] = {
    {"topk_bounds", topk_bounds, METH_VARARGS,
     "topk_bounds(offsets, ids, slp, tlp, token_id, lq_T, lp_T, q_T, p_T, tv_out, kl_out, qmass_out, pmass_out, "
     "rho_out, empty_q_out, empty_p_out, rest_eps, tail_empty): the top-k bounds and tails of every row, written "
     "into the seven output arrays."},
    {"count_codes", count_codes, METH_VARARGS,
     "count_codes(codes, counts): add each code's occurrences (uint8 or uint16 codes) to the int64 counts."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_loops", NULL, 0, methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__loops(void) { return PyModule_Create(&module); }
