/* plan(batches, threshold, limit, cuts) -> [(start, end, bytes), ...] | None
 *
 * coalesce's planning loop, compiled: which consecutive batches of one partition form a run to
 * merge and which pass through alone. It reads each batch's header from its bytes (RecordBatch.buf),
 * so a batch view from split needs no header tuple on the small-batch path.
 *
 * The segments cover the input in order: [start, end) with the sum of its batches' sizes. A batch
 * joins the open run when it is smaller than threshold and merge-eligible (magic 2, no attribute
 * bit but the codec, codec <= zstd, recordsCount == lastOffsetDelta + 1 >= 1), follows the previous
 * batch (base offset = previous last offset + 1, the same attributes) and the run stays within
 * limit bytes; a run also ends after a batch whose last offset is in cuts. Any other batch ends the
 * open run and passes through alone.
 *
 * None ("take the Python path", which raises its ValueError) for batches out of offset order, an
 * offset beyond int64, or an item that is not a RecordBatch view of at least a header.
 */
#include "_native.h"

static int emit(PyObject *out, Py_ssize_t start, Py_ssize_t end, long long bytes) {
    PyObject *seg = Py_BuildValue("(nnL)", start, end, bytes);
    if (!seg || PyList_Append(out, seg) < 0) {
        Py_XDECREF(seg);
        return -1;
    }
    Py_DECREF(seg);
    return 0;
}

/* 1: in cuts, 0: not, -1: error */
static int is_cut(PyObject *cuts, int64_t last) {
    PyObject *key = PyLong_FromLongLong(last);
    if (!key) return -1;
    int rc = PySequence_Contains(cuts, key);
    Py_DECREF(key);
    return rc;
}

PyObject *mm2py_plan(PyObject *self, PyObject *args) {
    PyObject *batches, *cuts;
    long long threshold, limit;
    if (!PyArg_ParseTuple(args, "O!LLO", &PyList_Type, &batches, &threshold, &limit, &cuts)) return NULL;
    Py_ssize_t ncuts = PyObject_Length(cuts);
    if (ncuts < 0) return NULL;
    PyObject *out = PyList_New(0);
    if (!out) return NULL;
    Py_ssize_t n = PyList_GET_SIZE(batches), run = -1; /* run: start of the open run, -1 if none */
    long long run_bytes = 0;
    int64_t prev_last = -1;
    int prev_attrs = -1;
    for (Py_ssize_t i = 0; i < n; i++) {
        uint8_t h[HEADER];
        if (!mm2py_batch_header(PyList_GET_ITEM(batches, i), h)) goto refuse;
        int64_t base = (int64_t)be64(h), last_delta = (int32_t)be32(h + 23);
        int attrs = (int16_t)be16(h + ATTRS_AT);
        int64_t count = (int32_t)be32(h + 57);
        long long size = (long long)(int32_t)be32(h + 8) + LOG_OVERHEAD;
        if (base <= prev_last) goto refuse; /* out of offset order: the Python path says so */
        if (last_delta > 0 && base > INT64_MAX - last_delta) goto refuse;
        int joins = base == prev_last + 1 && attrs == prev_attrs;
        prev_last = base + last_delta;
        prev_attrs = attrs;
        int eligible = h[MAGIC_AT] == 2 && (attrs & ~7) == 0 && attrs <= 4 && count >= 1 &&
                       count == last_delta + 1;
        if (size < threshold && eligible) {
            if (run >= 0 && run_bytes + size <= limit && joins) {
                run_bytes += size;
            } else {
                if (run >= 0 && emit(out, run, i, run_bytes) < 0) goto fail;
                run = i;
                run_bytes = size;
            }
            if (ncuts > 0) {
                int cut = is_cut(cuts, prev_last);
                if (cut < 0) goto fail;
                if (cut) {
                    if (emit(out, run, i + 1, run_bytes) < 0) goto fail;
                    run = -1;
                }
            }
            continue;
        }
        if (run >= 0) {
            if (emit(out, run, i, run_bytes) < 0) goto fail;
            run = -1;
        }
        if (emit(out, i, i + 1, size) < 0) goto fail;
    }
    if (run >= 0 && emit(out, run, n, run_bytes) < 0) goto fail;
    return out;
refuse:
    Py_DECREF(out);
    Py_RETURN_NONE;
fail:
    Py_DECREF(out);
    return NULL;
}
