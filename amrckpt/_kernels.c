/* amrckpt's compiled loops: one pass over the leaves or values where numpy needs many, without the interpreter lock.
 *
 * An optional extension (pyproject.toml): without a C compiler at install, the numpy code beside each caller runs,
 * with the same result bit for bit (tests/test_kernels.py compares the two), a NaN aside: where two NaNs meet in an
 * add, which of them comes out is the instruction's choice, in numpy's loops as here.
 *
 * family_means: amrckpt.adapt._transfer._average_runs, the means of an hp field's families on coarsening.  Value k of
 * family j's parent is
 *
 *     (sum over the children r = 0 .. F-1 of values[fo[j] + r pc[j] + k], pairwise in child order) * scale
 *
 * in the values' own precision: ((a0 + a1) + (a2 + a3)) for F = 4, and the two halves of F = 8 summed so, then
 * added, then one multiply by scale (1/F, exact), as numpy's elementwise adds and multiply give it.  No
 * contraction into fused multiply-adds (there is no a*b + c here, and the build passes -ffp-contract=off).
 *
 * repeat_runs: amrckpt.adapt._transfer._inject_runs, an hp field's runs on refinement: leaf j's run of counts[j] values
 * from offsets[j], copied F times in a row where mask[j] (its children's, by injection), once elsewhere; bytes as
 * they are, of any dtype.
 *
 * tiled_families: amrckpt.sfc._adapt.family_starts, whether leaves F i .. F i + F - 1 are a family for every i
 * (p4est's p4est_quadrant_is_familypv on each row), read through the strides of the forest's arrays (views of the
 * file's records): the same test as _families, with numpy's int32 arithmetic (wrapping adds, a shift past the
 * width giving 0).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <float.h>
#include <stdint.h>
#include <string.h>

#if !defined(FLT_EVAL_METHOD) || FLT_EVAL_METHOD != 0
/* float sums in wider registers (x87) would not be numpy's: no build here, and numpy's loops run */
#error "amrckpt._kernels needs FLT_EVAL_METHOD 0"
#endif

#define MEANS(T)                                                                                                   \
    static void means_##T(const T *v, const int64_t *fo, const int64_t *pc, Py_ssize_t n, int F, T scale, T *out) \
    {                                                                                                              \
        for (Py_ssize_t j = 0; j < n; j++) {                                                                       \
            const int64_t c = pc[j];                                                                               \
            const T *a = v + fo[j];                                                                                \
            if (F == 2) {                                                                                          \
                for (int64_t k = 0; k < c; k++) out[k] = (a[k] + a[c + k]) * scale;                                \
            } else if (F == 4) {                                                                                   \
                for (int64_t k = 0; k < c; k++)                                                                    \
                    out[k] = ((a[k] + a[c + k]) + (a[2 * c + k] + a[3 * c + k])) * scale;                          \
            } else {                                                                                               \
                for (int64_t k = 0; k < c; k++) {                                                                  \
                    T lo = (a[k] + a[c + k]) + (a[2 * c + k] + a[3 * c + k]);                                      \
                    T hi = (a[4 * c + k] + a[5 * c + k]) + (a[6 * c + k] + a[7 * c + k]);                          \
                    out[k] = (lo + hi) * scale;                                                                    \
                }                                                                                                  \
            }                                                                                                      \
            out += c;                                                                                              \
        }                                                                                                          \
    }

MEANS(double)
MEANS(float)

static int is_int64(const Py_buffer *b) { return b->itemsize == 8 && b->format && strchr("lq", b->format[0]) && !b->format[1]; }

static PyObject *family_means(PyObject *self, PyObject *args)
{
    Py_buffer v = {0}, fo = {0}, pc = {0}, out = {0};
    int F;
    double scale;
    PyObject *ret = NULL;
    (void)self;
    PyObject *ov, *ofo, *opc, *oout;
    if (!PyArg_ParseTuple(args, "OOOOid", &ov, &ofo, &opc, &oout, &F, &scale)) return NULL;
    const int ro = PyBUF_C_CONTIGUOUS | PyBUF_FORMAT;
    if (PyObject_GetBuffer(ov, &v, ro) || PyObject_GetBuffer(ofo, &fo, ro) || PyObject_GetBuffer(opc, &pc, ro) ||
        PyObject_GetBuffer(oout, &out, ro | PyBUF_WRITABLE))
        goto done;
    Py_ssize_t n = fo.len / 8, nv = v.len / (v.itemsize ? v.itemsize : 1), nout = out.len / (out.itemsize ? out.itemsize : 1);
    char kind = v.format ? v.format[0] : 0;
    if (!(kind == 'd' || kind == 'f') || v.format[1] || !out.format || out.format[0] != kind || out.format[1]) {
        PyErr_SetString(PyExc_TypeError, "family_means: values and out must be float64 or float32, the same");
        goto done;
    }
    if (!is_int64(&fo) || !is_int64(&pc) || pc.len != fo.len || !(F == 2 || F == 4 || F == 8)) {
        PyErr_SetString(PyExc_TypeError, "family_means: fo and pc must be int64 of one length, F 2, 4 or 8");
        goto done;
    }
    const int64_t *f = fo.buf, *c = pc.buf;
    int64_t total = 0;
    for (Py_ssize_t j = 0; j < n; j++) { /* every read and write in range, checked before the loop */
        if (c[j] < 0 || f[j] < 0 || f[j] > nv || c[j] > (nv - f[j]) / F) {
            PyErr_Format(PyExc_ValueError, "family_means: family %zd (start %lld, count %lld) is out of the %zd values", j,
                         (long long)f[j], (long long)c[j], nv);
            goto done;
        }
        total += c[j];
    }
    if (total != nout) {
        PyErr_Format(PyExc_ValueError, "family_means: the families hold %lld values, out %zd", (long long)total, nout);
        goto done;
    }
    Py_BEGIN_ALLOW_THREADS
    if (kind == 'd')
        means_double(v.buf, f, c, n, F, scale, out.buf);
    else
        means_float(v.buf, f, c, n, F, (float)scale, out.buf);
    Py_END_ALLOW_THREADS
    ret = Py_None;
    Py_INCREF(ret);
done: /* a buffer not taken has obj NULL: PyBuffer_Release skips it */
    PyBuffer_Release(&v);
    PyBuffer_Release(&fo);
    PyBuffer_Release(&pc);
    PyBuffer_Release(&out);
    return ret;
}

static int get_flat(PyObject *o, Py_buffer *b, int writable)
{
    return PyObject_GetBuffer(o, b, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | (writable ? PyBUF_WRITABLE : 0));
}

static PyObject *repeat_runs(PyObject *self, PyObject *args)
{
    Py_buffer v = {0}, off = {0}, cnt = {0}, mask = {0}, out = {0};
    PyObject *ov, *ooff, *ocnt, *omask, *oout, *ret = NULL;
    int F;
    Py_ssize_t isz;
    (void)self;
    if (!PyArg_ParseTuple(args, "OOOOOin", &ov, &ooff, &ocnt, &omask, &oout, &F, &isz)) return NULL;
    if (get_flat(ov, &v, 0) || get_flat(ooff, &off, 0) || get_flat(ocnt, &cnt, 0) ||
        (omask != Py_None && get_flat(omask, &mask, 0)) || get_flat(oout, &out, 1))
        goto done;
    const Py_ssize_t n = off.len / 8;
    if (!is_int64(&off) || !is_int64(&cnt) || cnt.len != off.len || (omask != Py_None && (mask.itemsize != 1 || mask.len != n)) ||
        F < 1 || isz < 1) {
        PyErr_SetString(PyExc_TypeError, "repeat_runs: int64 offsets and counts of one length, a bool mask of it or None");
        goto done;
    }
    const int64_t *o = off.buf, *c = cnt.buf;
    const uint8_t *mk = omask != Py_None ? mask.buf : NULL;
    const int64_t nv = v.len / isz;
    int64_t total = 0;
    for (Py_ssize_t j = 0; j < n; j++) { /* every read and write in range, checked before the loop */
        if (c[j] < 0 || o[j] < 0 || o[j] > nv || c[j] > nv - o[j]) {
            PyErr_Format(PyExc_ValueError, "repeat_runs: run %zd (offset %lld, count %lld) is out of the %lld values", j,
                         (long long)o[j], (long long)c[j], (long long)nv);
            goto done;
        }
        total += c[j] * (!mk || mk[j] ? F : 1);
    }
    if (total * isz != out.len) {
        PyErr_Format(PyExc_ValueError, "repeat_runs: the runs hold %lld values, out %zd", (long long)total, out.len / isz);
        goto done;
    }
    Py_BEGIN_ALLOW_THREADS
    const char *src = v.buf;
    char *dst = out.buf;
    for (Py_ssize_t j = 0; j < n; j++) {
        const size_t len = (size_t)(c[j] * isz);
        const char *run = src + o[j] * isz;
        for (int r = (!mk || mk[j]) ? F : 1; r > 0; r--) {
            memcpy(dst, run, len);
            dst += len;
        }
    }
    Py_END_ALLOW_THREADS
    ret = Py_None;
    Py_INCREF(ret);
done:
    PyBuffer_Release(&v);
    PyBuffer_Release(&off);
    PyBuffer_Release(&cnt);
    PyBuffer_Release(&mask);
    PyBuffer_Release(&out);
    return ret;
}

static int get_1d(PyObject *o, Py_buffer *b, Py_ssize_t itemsize, const char *what)
{
    if (PyObject_GetBuffer(o, b, PyBUF_STRIDES | PyBUF_FORMAT)) return -1;
    if (b->ndim != 1 || b->itemsize != itemsize) {
        PyErr_Format(PyExc_TypeError, "amrckpt._kernels: %s must be 1-D of %zd-byte integers", what, itemsize);
        return -1;
    }
    return 0;
}

#define AT(b, T, i) (*(const T *)((const char *)(b).buf + (i) * (b).strides[0]))

static PyObject *tiled_families(PyObject *self, PyObject *args)
{
    Py_buffer tree = {0}, level = {0}, co[3] = {{0}, {0}, {0}};
    PyObject *otree, *olevel, *ocoords, *ret = NULL;
    int maxlevel, all = 1;
    (void)self;
    if (!PyArg_ParseTuple(args, "OOOi", &otree, &olevel, &ocoords, &maxlevel)) return NULL;
    if (!PyTuple_Check(ocoords) || PyTuple_GET_SIZE(ocoords) < 2 || PyTuple_GET_SIZE(ocoords) > 3) {
        PyErr_SetString(PyExc_TypeError, "tiled_families: coords must be a tuple of 2 or 3 arrays");
        return NULL;
    }
    const int d = (int)PyTuple_GET_SIZE(ocoords), F = 1 << d;
    if (get_1d(otree, &tree, 4, "tree") || get_1d(olevel, &level, 1, "level")) goto done;
    for (int a = 0; a < d; a++)
        if (get_1d(PyTuple_GET_ITEM(ocoords, a), &co[a], 4, "a coordinate")) goto done;
    const Py_ssize_t n = level.shape[0];
    int bad_len = tree.shape[0] != n || n % F;
    for (int a = 0; a < d; a++) bad_len |= co[a].shape[0] != n;
    if (bad_len) {
        PyErr_SetString(PyExc_ValueError, "tiled_families: the arrays must have one length, a multiple of 2**dim");
        goto done;
    }
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n && all; i += F) {
        const int8_t l0 = AT(level, int8_t, i);
        const int32_t t0 = AT(tree, int32_t, i);
        const uint32_t s = (uint32_t)(maxlevel - (int32_t)l0);
        const uint32_t h = s < 32 ? (uint32_t)1 << s : 0;
        uint32_t c0[3] = {0, 0, 0};
        int ok = l0 >= 1;
        for (int a = 0; a < d; a++) {
            c0[a] = (uint32_t)AT(co[a], int32_t, i);
            ok &= (c0[a] & h) == 0;
        }
        for (int c = 1; c < F; c++) {
            ok &= AT(level, int8_t, i + c) == l0 && AT(tree, int32_t, i + c) == t0;
            for (int a = 0; a < d; a++) ok &= (uint32_t)AT(co[a], int32_t, i + c) == c0[a] + (((c >> a) & 1) ? h : 0);
        }
        all = ok;
    }
    Py_END_ALLOW_THREADS
    ret = PyBool_FromLong(all);
done:
    PyBuffer_Release(&tree);
    PyBuffer_Release(&level);
    for (int a = 0; a < 3; a++) PyBuffer_Release(&co[a]);
    return ret;
}

static PyMethodDef methods[] = {
    {"family_means", family_means, METH_VARARGS,
     "family_means(values, fo, pc, out, F, scale): out[k-th value of family j] = pairwise sum over r of "
     "values[fo[j] + r pc[j] + k], times scale. float64 or float32 values and out, int64 fo and pc. Releases the GIL."},
    {"repeat_runs", repeat_runs, METH_VARARGS,
     "repeat_runs(values, offsets, counts, mask, out, F, itemsize): run j (counts[j] items of itemsize bytes from "
     "item offsets[j]) into out F times where mask[j] (or everywhere for None), once elsewhere. Releases the GIL."},
    {"tiled_families", tiled_families, METH_VARARGS,
     "tiled_families(tree, level, coords, maxlevel): whether leaves F i .. F i + F - 1 are a family for every i (F = "
     "2**len(coords)). 1-D int32 tree and coordinates, int8 level, any strides. Releases the GIL."},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_kernels", "amrckpt's compiled loops (amrckpt/_kernels.c).", -1, methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__kernels(void) { return PyModule_Create(&module); }
