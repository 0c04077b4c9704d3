/* mm2py.protocol._native: the per-batch hot path of the raw mirror, compiled.
 *
 * Five functions, each an exact stand-in for a pure-Python path of mm2py.protocol on the input it
 * accepts, and a refusal (None) on anything else:
 *
 *   split(view, RecordBatch, verify) -> (batches, trailing_bytes, flags) | None
 *       records.split_record_set plus RecordBatch.verify on every batch. flags: 1 = a control
 *       batch was seen, 2 = a transactional one, 4 = a batch that does not start after the
 *       previous one's last offset.
 *   merge(run, verify) -> (steps, decompressions) | None
 *       batch_merge.scan_runs + RunScan.merge for one run of merge-eligible batches that follow
 *       each other (coalesce's planning decides the run), as the steps coalesce emits.
 *   batch_ages(batches, now, bounds) -> (counts, total) | None
 *       latency.observe_fetch's per-batch age histogram (bucket counts and the sum of the ages).
 *   plan(batches, threshold, limit, cuts) -> [(start, end, bytes), ...] | None
 *       coalesce's planning loop: runs to merge and batches passed through (_native_plan.c).
 *   lz4_frame(data) -> bytes
 *       compression._lz4_frame in LZ4's fast mode: the same frame, compressed without the GIL.
 *
 * None means "take the Python path": it is returned for every input the Python path would reject
 * (a CRC mismatch, a header that cannot be valid, a records section that does not decompress or
 * does not hold exactly its records) and for input this file does not handle (codecs other than
 * none and LZ4, values outside int64). The Python path then raises its own, precise error, or
 * does the work. So this file decides nothing the Python code does not decide the same way;
 * tests/unit/test_native.py checks that property over random and corrupted input.
 *
 * The GIL is held throughout (the LZ4 decompression context is one per process), except while
 * lz4_frame compresses.
 * Formats: Kafka's DefaultRecordBatch / DefaultRecord (KIP-98), LZ4 frames (lz4frame.h).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <lz4.h>
#include <lz4frame.h>
#include <stdint.h>
#include <string.h>

#include "_native.h"

#if defined(__x86_64__)
#include <nmmintrin.h>
#endif

/* ----------------------------------------------------------------------------- CRC-32C */
static uint32_t crc_table[256];
static int have_sse42;

static void crc_init(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = (c >> 1) ^ (0x82F63B78u & (0u - (c & 1u)));
        crc_table[i] = c;
    }
#if defined(__x86_64__)
    __builtin_cpu_init();
    have_sse42 = __builtin_cpu_supports("sse4.2");
#endif
}

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) static uint32_t crc_hw(uint32_t crc, const uint8_t *p, size_t n) {
    uint64_t c = crc;
    while (n >= 8) {
        uint64_t v;
        memcpy(&v, p, 8);
        c = _mm_crc32_u64(c, v);
        p += 8;
        n -= 8;
    }
    uint32_t c32 = (uint32_t)c;
    while (n--) c32 = _mm_crc32_u8(c32, *p++);
    return c32;
}
#endif

uint32_t mm2py_crc32c(const uint8_t *p, size_t n) {
    uint32_t crc = 0xFFFFFFFFu;
#if defined(__x86_64__)
    if (have_sse42) return ~crc_hw(crc, p, n);
#endif
    while (n--) crc = (crc >> 8) ^ crc_table[(crc ^ *p++) & 0xFF];
    return ~crc;
}

LZ4F_dctx *mm2py_dctx;
PyObject *mm2py_s_buf;

/* Where a class keeps a __slots__ attribute (its member descriptor's offset), or -1 if it is not a
 * plain object slot. RecordBatch's two slots are written there directly: setattr's lookup through
 * the type costs more than the rest of building a batch view. */
static Py_ssize_t slot_offset(PyTypeObject *cls, PyObject *name) {
    PyObject *d = PyDict_GetItemWithError(cls->tp_dict, name);
    if (!d || Py_TYPE(d) != &PyMemberDescr_Type) return -1;
    PyMemberDef *m = ((PyMemberDescrObject *)d)->d_member;
    return (m->type == T_OBJECT_EX && !(m->flags & READONLY)) ? m->offset : -1;
}

static PyTypeObject *slots_of; /* the class the offsets below are for (not a reference: a type is
                                  compared by address only, and the offsets re-read for another) */
static Py_ssize_t buf_at = -1;

static int set_slot(PyObject *obj, Py_ssize_t at, PyObject *name, PyObject *value) {
    if (at < 0) {
        int rc = PyObject_SetAttr(obj, name, value);
        Py_DECREF(value);
        return rc;
    }
    PyObject **slot = (PyObject **)((char *)obj + at);
    Py_XSETREF(*slot, value); /* steals value */
    return 0;
}

/* A RecordBatch view: buf = view[pos:stop]; its header tuple (_h) is left for RecordBatch to
 * unpack when something reads it (most small batches only go through plan and merge, which read
 * their bytes). */
static PyObject *make_batch(PyTypeObject *cls, PyObject *view, Py_ssize_t pos, Py_ssize_t stop) {
    if (cls != slots_of) {
        buf_at = slot_offset(cls, mm2py_s_buf);
        if (PyErr_Occurred()) return NULL;
        slots_of = cls;
    }
    PyObject *obj = cls->tp_alloc(cls, 0);
    if (!obj) return NULL;
    PyObject *slice = PySequence_GetSlice(view, pos, stop);
    if (!slice || set_slot(obj, buf_at, mm2py_s_buf, slice) < 0) {
        Py_DECREF(obj);
        return NULL;
    }
    return obj; /* _h unset: RecordBatch unpacks the header on first use */
}

int mm2py_batch_header(PyObject *batch, uint8_t *h) {
    PyObject *view;
    if (Py_TYPE(batch) == slots_of && buf_at >= 0) {
        view = *(PyObject **)((char *)batch + buf_at);
        if (!view) return 0;
        Py_INCREF(view);
    } else {
        view = PyObject_GetAttr(batch, mm2py_s_buf);
        if (!view) {
            PyErr_Clear();
            return 0;
        }
    }
    Py_buffer v;
    int rc = PyObject_GetBuffer(view, &v, PyBUF_SIMPLE);
    Py_DECREF(view);
    if (rc < 0) {
        PyErr_Clear();
        return 0;
    }
    rc = v.len >= HEADER;
    if (rc) memcpy(h, v.buf, HEADER);
    PyBuffer_Release(&v);
    return rc;
}

static PyObject *split(PyObject *self, PyObject *args) {
    PyObject *view;
    PyTypeObject *cls;
    int verify;
    if (!PyArg_ParseTuple(args, "OO!p", &view, &PyType_Type, &cls, &verify)) return NULL;
    Py_buffer in;
    if (PyObject_GetBuffer(view, &in, PyBUF_SIMPLE) < 0) return NULL;
    const uint8_t *d = in.buf;
    Py_ssize_t end = in.len, pos = 0;
    int flags = 0;
    int64_t prev_last = INT64_MIN;
    PyObject *out = PyList_New(0);
    if (!out) goto fail;
    while (end - pos >= LOG_OVERHEAD) {
        const uint8_t *b = d + pos;
        int32_t length = (int32_t)be32(b + 8);
        if (length < 14) goto refuse; /* not even a legacy entry: the Python path says why */
        if (end - pos <= MAGIC_AT) break;
        if (b[MAGIC_AT] != 2 || length < HEADER - LOG_OVERHEAD) goto refuse;
        Py_ssize_t stop = pos + (Py_ssize_t)length + LOG_OVERHEAD;
        if (stop > end) break; /* a truncated trailing batch, as brokers may send */
        if (verify && mm2py_crc32c(b + ATTRS_AT, (size_t)(stop - pos - ATTRS_AT)) != be32(b + CRC_AT)) goto refuse;
        uint16_t attrs = be16(b + ATTRS_AT);
        if (attrs & 0x20) flags |= 1;
        if (attrs & 0x10) flags |= 2;
        int64_t base = (int64_t)be64(b);
        if (pos > 0 && base <= prev_last) flags |= 4;
        prev_last = (int64_t)((uint64_t)base + (uint64_t)(int64_t)(int32_t)be32(b + 23));
        PyObject *batch = make_batch(cls, view, pos, stop);
        if (!batch || PyList_Append(out, batch) < 0) {
            Py_XDECREF(batch);
            goto fail;
        }
        Py_DECREF(batch);
        pos = stop;
    }
    PyBuffer_Release(&in);
    return Py_BuildValue("(Nni)", out, end - pos, flags);
refuse:
    PyBuffer_Release(&in);
    Py_DECREF(out);
    Py_RETURN_NONE;
fail:
    PyBuffer_Release(&in);
    Py_XDECREF(out);
    return NULL;
}

/* batch_ages(batches, now, bounds) -> (counts, total) | None: latency.observe_fetch's age
 * histogram. For each batch whose maxTimestamp (header field 8) is >= 0: age = now - ts / 1000 s,
 * at least 0, counted in the first bucket whose bound is >= it (bisect_left; the last count is
 * past every bound); total is the sum of the ages. None: an item that is not a RecordBatch view.
 * The timestamp is read from the batch's bytes (its header tuple may not be unpacked yet). */
enum { MAX_BOUNDS = 64 };

static PyObject *batch_ages(PyObject *self, PyObject *args) {
    PyObject *batches, *bounds_t;
    double now;
    if (!PyArg_ParseTuple(args, "O!dO!", &PyList_Type, &batches, &now, &PyTuple_Type, &bounds_t)) return NULL;
    Py_ssize_t nb = PyTuple_GET_SIZE(bounds_t);
    if (nb > MAX_BOUNDS) Py_RETURN_NONE;
    double bounds[MAX_BOUNDS];
    Py_ssize_t counts[MAX_BOUNDS + 1] = {0};
    for (Py_ssize_t i = 0; i < nb; i++) {
        bounds[i] = PyFloat_AsDouble(PyTuple_GET_ITEM(bounds_t, i));
        if (bounds[i] == -1.0 && PyErr_Occurred()) return NULL;
    }
    double total = 0.0;
    for (Py_ssize_t k = 0; k < PyList_GET_SIZE(batches); k++) {
        uint8_t h[HEADER];
        if (!mm2py_batch_header(PyList_GET_ITEM(batches, k), h)) Py_RETURN_NONE;
        long long ts = (long long)(int64_t)be64(h + 35);
        if (ts < 0) continue;
        double age = now - (double)ts / 1000.0;
        if (!(age > 0.0)) age = 0.0;
        Py_ssize_t i = 0;
        while (i < nb && bounds[i] < age) i++;
        counts[i]++;
        total += age;
    }
    PyObject *out = PyList_New(nb + 1);
    if (!out) return NULL;
    for (Py_ssize_t i = 0; i <= nb; i++) {
        PyObject *c = PyLong_FromSsize_t(counts[i]);
        if (!c) {
            Py_DECREF(out);
            return NULL;
        }
        PyList_SET_ITEM(out, i, c);
    }
    return Py_BuildValue("(Nd)", out, total);
}

/* lz4_frame(data) -> bytes: compression._lz4_frame in LZ4's fast mode (level < 3), the same bytes:
 * the frame header Kafka's clients write, independent blocks of at most 64 KiB compressed with
 * LZ4_compress_default (a block that does not shrink stored as it is, the high bit of its size
 * set), the end mark. The GIL is released while it compresses. */
static const uint8_t KAFKA_LZ4_HEAD[7] = {0x04, 0x22, 0x4d, 0x18, 0x60, 0x40, 0x82};
enum { LZ4_BLOCK = 64 * 1024 };

static void le32(uint8_t *p, uint32_t v) {
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
    p[2] = (uint8_t)(v >> 16);
    p[3] = (uint8_t)(v >> 24);
}

static PyObject *lz4_frame(PyObject *self, PyObject *args) {
    Py_buffer in;
    if (!PyArg_ParseTuple(args, "y*", &in)) return NULL;
    size_t n = (size_t)in.len, blocks = (n + LZ4_BLOCK - 1) / LZ4_BLOCK;
    size_t cap = sizeof KAFKA_LZ4_HEAD + blocks * (4 + (size_t)LZ4_compressBound(LZ4_BLOCK)) + 4;
    PyObject *out = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)cap);
    if (!out) {
        PyBuffer_Release(&in);
        return NULL;
    }
    uint8_t *o = (uint8_t *)PyBytes_AS_STRING(out);
    const char *src = in.buf;
    size_t pos = sizeof KAFKA_LZ4_HEAD;
    memcpy(o, KAFKA_LZ4_HEAD, pos);
    Py_BEGIN_ALLOW_THREADS
    for (size_t at = 0; at < n; at += LZ4_BLOCK) {
        int len = (int)(n - at < LZ4_BLOCK ? n - at : LZ4_BLOCK);
        int room = (int)(cap - pos - 4);
        int c = LZ4_compress_default(src + at, (char *)o + pos + 4, len, room);
        if (c > 0 && c < len) {
            le32(o + pos, (uint32_t)c);
            pos += 4 + (size_t)c;
        } else {
            le32(o + pos, (uint32_t)len | 0x80000000u);
            memcpy(o + pos + 4, src + at, (size_t)len);
            pos += 4 + (size_t)len;
        }
    }
    le32(o + pos, 0);
    pos += 4;
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&in);
    if (_PyBytes_Resize(&out, (Py_ssize_t)pos) < 0) return NULL;
    return out;
}

/* The raw CRC-32C register `value` after n zero bytes: value * x^(8n) modulo the polynomial, in the
 * reflected form the table uses (bit 31 holds x^0). pow2[k] is x^(2^k); n's set bits pick the
 * factors, so the cost is one multiplication per set bit of n, whatever n. */
static uint32_t pow2[67];

static uint32_t gf_mul(uint32_t a, uint32_t b) {
    uint32_t product = 0;
    for (int i = 31; i >= 0; i--) {  /* bit i of a: the coefficient of x^(31 - i) */
        if ((a >> i) & 1u) product ^= b;
        b = (b >> 1) ^ (0x82F63B78u & (0u - (b & 1u)));  /* b times x */
    }
    return product;
}

static void shift_init(void) {
    pow2[0] = 1u << 30;  /* x^1 */
    for (int k = 1; k < 67; k++) pow2[k] = gf_mul(pow2[k - 1], pow2[k - 1]);
}

static uint32_t shift_by(uint32_t v, unsigned long long n) {
    for (int k = 3; n && k < 67; k++, n >>= 1)  /* x^(8n): bit j of n is x^(2^(j+3)) */
        if (n & 1u) v = gf_mul(pow2[k], v);
    return v;
}

static PyObject *py_crc32c_shift(PyObject *self, PyObject *args) {
    unsigned long value;
    unsigned long long n;
    if (!PyArg_ParseTuple(args, "kK", &value, &n)) return NULL;
    return PyLong_FromUnsignedLong(shift_by((uint32_t)value, n));
}

/* crc32c_carry(crc, old, new, tail): the CRC of `new` followed by the `tail` bytes that followed
 * `old` (as long as `new`) in the data whose CRC is `crc` (see crc.py) */
static PyObject *py_crc32c_carry(PyObject *self, PyObject *args) {
    unsigned long crc;
    Py_buffer old, new;
    unsigned long long tail;
    if (!PyArg_ParseTuple(args, "ky*y*K", &crc, &old, &new, &tail)) return NULL;
    if (old.len != new.len) {
        PyBuffer_Release(&old);
        PyBuffer_Release(&new);
        PyErr_SetString(PyExc_ValueError, "the two headers differ in length");
        return NULL;
    }
    const uint8_t *a = old.buf, *b = new.buf;
    uint32_t raw = 0;  /* the register after (old xor new) from zero, no inversions */
    int differ = 0;
    for (Py_ssize_t i = 0; i < old.len; i++) {
        uint8_t d = a[i] ^ b[i];
        differ |= d;
        raw = (raw >> 8) ^ crc_table[(raw ^ d) & 0xFFu];
    }
    PyBuffer_Release(&old);
    PyBuffer_Release(&new);
    uint32_t out = (uint32_t)crc;
    if (differ) out ^= shift_by(raw, tail);
    return PyLong_FromUnsignedLong(out);
}

static PyObject *py_crc32c(PyObject *self, PyObject *args) {
    Py_buffer in;
    if (!PyArg_ParseTuple(args, "y*", &in)) return NULL;
    uint32_t crc = mm2py_crc32c(in.buf, (size_t)in.len);
    PyBuffer_Release(&in);
    return PyLong_FromUnsignedLong(crc);
}

static PyMethodDef methods[] = {
    {"split", split, METH_VARARGS,
     "split(view, RecordBatch, verify) -> (batches, trailing, flags) or None (take the Python path)"},
    {"merge", mm2py_merge, METH_VARARGS,
     "merge(run, verify) -> (steps, decompressions) or None (take the Python path)"},
    {"crc32c", py_crc32c, METH_VARARGS, "crc32c(data) -> int: CRC-32C (Castagnoli)"},
    {"crc32c_shift", py_crc32c_shift, METH_VARARGS,
     "crc32c_shift(value, n) -> int: a raw CRC-32C register after n zero bytes"},
    {"crc32c_carry", py_crc32c_carry, METH_VARARGS,
     "crc32c_carry(crc, old, new, tail) -> int: a CRC carried over a header edit"},
    {"plan", mm2py_plan, METH_VARARGS,
     "plan(batches, threshold, limit, cuts) -> [(start, end, bytes)] or None (take the Python path)"},
    {"lz4_frame", lz4_frame, METH_VARARGS, "lz4_frame(data) -> bytes: Kafka's LZ4 frame, fast mode"},
    {"batch_ages", batch_ages, METH_VARARGS,
     "batch_ages(batches, now, bounds) -> (counts, total) or None (take the Python path)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, .m_name = "_native", .m_doc = NULL, .m_size = -1, .m_methods = methods,
};

PyMODINIT_FUNC PyInit__native(void) {
    crc_init();
    shift_init();
    if (LZ4F_isError(LZ4F_createDecompressionContext(&mm2py_dctx, LZ4F_VERSION))) {
        PyErr_SetString(PyExc_ImportError, "LZ4F_createDecompressionContext failed");
        return NULL;
    }
    mm2py_s_buf = PyUnicode_InternFromString("buf");
    if (!mm2py_s_buf) return NULL;
    return PyModule_Create(&module);
}
