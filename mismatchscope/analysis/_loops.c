/* The analysis pass's compiled loops (mismatchscope/analysis/compiled.py says when they run).
 *
 * topk_bounds   the top-k bounds' per-row loop (analysis/topk.py). numpy computes the bounds a column of
 *               the [n, k] table at a time: a dozen passes over row-sized arrays for each of the k columns.
 *
 * It makes one pass and does exactly the floating-point operations of the numpy code, in the same order,
 * so its results are numpy's bit for bit (tests/test_compiled_loops.py holds them to each other and to a
 * reference in Python):
 *
 *   - every sum starts at 0.0 and adds its values in list order;
 *   - exp and log are the C library's, which is what numpy calls for float64 on CPUs without AVX-512 (on
 *     those with it, numpy's own vector exp can differ from the C library's in the last bit; this loop
 *     stays with libm);
 *   - maximum and minimum propagate NaN as numpy's do;
 *   - the build turns off floating-point contraction (-ffp-contract=off), so no a * b + c becomes one fused
 *     multiply-add with a different rounding.
 *
 * The GIL is released inside the loop, so the analysis threads run them side by side.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>

static inline double np_max(double a, double b) { return (a >= b || isnan(a)) ? a : b; }
static inline double np_min(double a, double b) { return (a <= b || isnan(a)) ? a : b; }

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

/* The element kind of a buffer from its struct format: 'i' for a signed integer, 'f' for a float, 'b' for
 * a bool, 0 for anything else (the item size is checked apart). */
static char kind(const Py_buffer *b)
{
    const char *f = b->format ? b->format : "B";
    if (*f == '@' || *f == '=' || *f == '<') f++;
    if (f[0] == '\0' || f[1] != '\0') return 0;
    switch (f[0]) {
    case 'i': case 'l': case 'q': return 'i';
    case 'f': case 'd': return 'f';
    case '?': return 'b';
    default: return 0;
    }
}

#define N_ARGS 16
#define FIRST_OUT 9

static PyObject *topk_bounds(PyObject *self, PyObject *args)
{
    (void)self;
    static const char *names[N_ARGS] = {"offsets",   "ids",       "slp",        "tlp",       "token_id", "lq_T",
                                        "lp_T",      "q_T",       "p_T",        "tv_out",    "kl_out",   "qmass_out",
                                        "pmass_out", "rho_out",   "empty_q_out", "empty_p_out"};
    PyObject *obj[N_ARGS];
    double rest_eps, tail_empty;
    if (!PyArg_ParseTuple(args, "OOOOOOOOOOOOOOOOdd:topk_bounds", &obj[0], &obj[1], &obj[2], &obj[3], &obj[4], &obj[5],
                          &obj[6], &obj[7], &obj[8], &obj[9], &obj[10], &obj[11], &obj[12], &obj[13], &obj[14],
                          &obj[15], &rest_eps, &tail_empty))
        return NULL;
    Py_buffer b[N_ARGS];
    int got = 0;
    PyObject *result = NULL;
    for (; got < N_ARGS; got++) {
        int flags = PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | (got >= FIRST_OUT ? PyBUF_WRITABLE : 0);
        if (PyObject_GetBuffer(obj[got], &b[got], flags) < 0) goto done;
    }
    /* expected (kind, item size; 0: 4 or 8) of each argument */
    static const char want_kind[N_ARGS] = {'i', 'i', 'f', 'f', 'i', 'f', 'f', 'f', 'f', 'f', 'f', 'f', 'f', 'f', 'b', 'b'};
    static const int want_size[N_ARGS] = {0, 8, 0, 0, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 1, 1};
    for (int a = 0; a < N_ARGS; a++) {
        Py_ssize_t size = b[a].itemsize;
        if (kind(&b[a]) != want_kind[a] || (want_size[a] ? size != want_size[a] : (size != 4 && size != 8))) {
            PyErr_Format(PyExc_TypeError, "topk_bounds: %s has element format %s", names[a],
                         b[a].format ? b[a].format : "B");
            goto done;
        }
    }
    const Py_ssize_t n = b[4].len / 8;
    const Py_ssize_t n_values = b[1].len / 8;
    if (b[0].len / b[0].itemsize != n + 1 || b[2].len / b[2].itemsize != n_values ||
        b[3].len / b[3].itemsize != n_values || b[2].itemsize != b[3].itemsize) {
        PyErr_SetString(PyExc_ValueError, "topk_bounds: the offsets and the list values do not match the rows");
        goto done;
    }
    for (int a = 5; a < N_ARGS; a++) {
        if (b[a].len / b[a].itemsize != n) {
            PyErr_Format(PyExc_ValueError, "topk_bounds: %s has %zd values for %zd rows", names[a],
                         b[a].len / b[a].itemsize, n);
            goto done;
        }
    }
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
    for (int a = 0; a < got; a++) PyBuffer_Release(&b[a]);
    return result;
}


static PyMethodDef methods[] = {
    {"topk_bounds", topk_bounds, METH_VARARGS,
     "topk_bounds(offsets, ids, slp, tlp, token_id, lq_T, lp_T, q_T, p_T, tv_out, kl_out, qmass_out, pmass_out, "
     "rho_out, empty_q_out, empty_p_out, rest_eps, tail_empty): the top-k bounds and tails of every row, written "
     "into the seven output arrays."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_loops", NULL, 0, methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__loops(void) { return PyModule_Create(&module); }
