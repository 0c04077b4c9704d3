/* merge(run, verify): one run of small batches merged, as batch_merge.scan_runs + RunScan.merge
 * and coalesce's grouping do it in Python (see _native.c for the contract: None = take the Python
 * path).
 *
 * run: a list of RecordBatch, merge-eligible (magic 2, attributes = codec only, contiguous, at
 * least one record) and each following the previous one (no offset gap, same attributes), as
 * coalesce's planning forms runs. Every batch is CRC-checked (verify), its records section
 * decompressed (none or LZ4) and its records' framing read with the checks of
 * record_frames.scan. Then, as coalesce._Builder._groups: a batch whose record offset deltas are
 * not 0..n-1 is cut out of the run; each stretch of two or more batches left is merged unless its
 * timestamps lie too far apart for one batch (RunScan.merge). Steps, in order:
 *
 *   (0, k)                                 batch k passed through as it is
 *   (1, k)                                 batch k passed through: offsets not 0..n-1 (a fallback)
 *   (2, i, j)                              batches i..j-1 passed through: timestamp range (a fallback)
 *   (3, i, j, section, lo, hi, count)      batches i..j-1 merged: the uncompressed records section
 *                                          (offset deltas from 0, timestamp deltas from lo), the
 *                                          smallest and largest timestamp, the records count
 */
#include "_native.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
    uint8_t *p;
    size_t used, cap;
} Buf;

/* room for `need` more bytes; -1 when out of memory */
static int reserve(Buf *b, size_t need) {
    if (b->used + need <= b->cap) return 0;
    size_t cap = b->cap ? b->cap : 65536;
    while (cap < b->used + need) cap *= 2;
    uint8_t *p = realloc(b->p, cap);
    if (!p) return -1;
    b->p = p;
    b->cap = cap;
    return 0;
}

typedef struct {
    size_t tail, end; /* where the record's key starts and where it ends, in the sections */
    int64_t ts;       /* timestamp delta */
    uint8_t attrs;
} Rec;

typedef struct {
    int64_t base_offset, base_ts, ts_min, ts_max;
    int64_t count;
    size_t first; /* its first record in the records array */
    int in_seq;   /* record offset deltas are 0..count-1 */
    uint16_t attrs;
} Bat;

enum { OK = 0, REFUSE = -1, FAILED = -2 /* a Python exception is set */ };

static int lz4_into(Buf *out, const uint8_t *src, size_t n) {
    LZ4F_resetDecompressionContext(mm2py_dctx);
    for (;;) {
        if (reserve(out, 65536) < 0) return FAILED;
        size_t room = out->cap - out->used, took = n;
        size_t r = LZ4F_decompress(mm2py_dctx, out->p + out->used, &room, src, &took, NULL);
        if (LZ4F_isError(r)) return REFUSE;
        out->used += room;
        src += took;
        n -= took;
        if (r == 0) return n == 0 ? OK : REFUSE; /* one frame, nothing after it */
        if (n == 0 && room == 0) return REFUSE;  /* the frame is cut short */
    }
}

/* an unsigned varint of at most `max` bytes that ends before `lim`: its size, 0 when not */
static inline int varint(const uint8_t *p, const uint8_t *lim, int max, uint64_t *out) {
    uint64_t r = 0;
    for (int i = 0; i < max && p + i < lim; i++) {
        r |= (uint64_t)(p[i] & 0x7F) << (7 * i);
        if (p[i] < 0x80) {
            *out = r;
            return i + 1;
        }
    }
    return 0;
}

static inline int64_t unzigzag(uint64_t u) { return (int64_t)(u >> 1) ^ -(int64_t)(u & 1); }

/* the framing of batch t's records in sec[start:end): OK or REFUSE (record_frames.scan's checks) */
static int scan(const Buf *sec, size_t start, size_t end, Bat *t, Rec **recs, size_t *nrec, size_t *rcap) {
    const uint8_t *base = sec->p, *lim = sec->p + end;
    size_t pos = start;
    t->in_seq = 1;
    for (int64_t k = 0; k < t->count; k++) {
        uint64_t raw;
        const uint8_t *p = base + pos;
        int n = varint(p, lim, 5, &raw);
        if (!n) return REFUSE;
        int64_t length = unzigzag(raw & 0xFFFFFFFFu);
        const uint8_t *q = p + n;
        if (length < 1 || length > lim - q) return REFUSE;
        const uint8_t *stop = q + length;
        uint64_t raw_ts, raw_off;
        int nts = varint(q + 1, stop, 10, &raw_ts);
        if (!nts) return REFUSE;
        int noff = varint(q + 1 + nts, stop, 5, &raw_off);
        if (!noff) return REFUSE;
        if (*nrec == *rcap) {
            size_t cap = *rcap ? *rcap * 2 : 1024;
            Rec *r = realloc(*recs, cap * sizeof(Rec));
            if (!r) return FAILED;
            *recs = r;
            *rcap = cap;
        }
        Rec *r = &(*recs)[(*nrec)++];
        r->tail = (size_t)(q + 1 + nts + noff - base);
        r->end = (size_t)(stop - base);
        r->attrs = *q;
        r->ts = unzigzag(raw_ts);
        if (unzigzag(raw_off & 0xFFFFFFFFu) != k) t->in_seq = 0;
        if (k == 0 || r->ts < t->ts_min) t->ts_min = r->ts;
        if (k == 0 || r->ts > t->ts_max) t->ts_max = r->ts;
        pos = r->end;
    }
    return pos == end ? OK : REFUSE;
}

static inline int put_varint(uint8_t *o, uint64_t u) {
    int n = 0;
    while (u >= 0x80) {
        o[n++] = (uint8_t)((u & 0x7F) | 0x80);
        u >>= 7;
    }
    o[n++] = (uint8_t)u;
    return n;
}

static inline uint64_t zigzag(int64_t v) { return ((uint64_t)v << 1) ^ (uint64_t)(v >> 63); }

/* batches i..j-1 as one records section (RunScan.merge / record_frames.reframe) */
static int merged_step(PyObject *steps, const Buf *sec, const Bat *bt, const Rec *recs, Py_ssize_t i,
                       Py_ssize_t j, Buf *out) {
    __int128 lo = 0, hi = 0, min_base = 0, max_base = 0, count = 0;
    for (Py_ssize_t b = i; b < j; b++) {
        __int128 l = (__int128)bt[b].base_ts + bt[b].ts_min, h = (__int128)bt[b].base_ts + bt[b].ts_max;
        if (b == i || l < lo) lo = l;
        if (b == i || h > hi) hi = h;
        if (b == i || bt[b].base_ts < min_base) min_base = bt[b].base_ts;
        if (b == i || bt[b].base_ts > max_base) max_base = bt[b].base_ts;
        count += bt[b].count;
    }
    PyObject *step;
    if (lo < INT64_MIN || hi - lo > INT64_MAX || max_base - lo > INT64_MAX || min_base - lo < INT64_MIN ||
        count - 1 > INT32_MAX) {
        step = Py_BuildValue("(inn)", 2, i, j);
    } else {
        if (hi > INT64_MAX) return REFUSE; /* the batch cannot hold it; Python says so */
        out->used = 0;
        for (Py_ssize_t b = i; b < j; b++) {
            int64_t ts_shift = (int64_t)((__int128)bt[b].base_ts - lo);
            __int128 off_shift = (__int128)bt[b].base_offset - bt[i].base_offset;
            for (int64_t k = 0; k < bt[b].count; k++) {
                const Rec *r = &recs[bt[b].first + (size_t)k];
                __int128 off = off_shift + k; /* in sequence: the record's offset delta is k */
                if (off < 0 || off > INT32_MAX) return REFUSE;
                size_t tail = r->end - r->tail;
                if (reserve(out, 21 + tail) < 0) return FAILED;
                uint8_t head[16];
                int nts = put_varint(head, zigzag(r->ts + ts_shift));
                int noff = put_varint(head + nts, zigzag((int64_t)off));
                uint64_t size = 1 + (uint64_t)nts + (uint64_t)noff + tail;
                if (size > INT32_MAX) return REFUSE;
                uint8_t *o = out->p + out->used;
                o += put_varint(o, zigzag((int64_t)size));
                *o++ = r->attrs;
                memcpy(o, head, (size_t)(nts + noff));
                o += nts + noff;
                memcpy(o, sec->p + r->tail, tail);
                out->used = (size_t)(o + tail - out->p);
            }
        }
        step = Py_BuildValue("(innNLLL)", 3, i, j,
                             PyBytes_FromStringAndSize((const char *)out->p, (Py_ssize_t)out->used),
                             (long long)lo, (long long)hi, (long long)count);
    }
    if (!step || PyList_Append(steps, step) < 0) {
        Py_XDECREF(step);
        return FAILED;
    }
    Py_DECREF(step);
    return OK;
}

static int pass_step(PyObject *steps, int kind, Py_ssize_t k) {
    PyObject *step = Py_BuildValue("(in)", kind, k);
    if (!step || PyList_Append(steps, step) < 0) {
        Py_XDECREF(step);
        return FAILED;
    }
    Py_DECREF(step);
    return OK;
}

/* batch k of the run read into sec and bt[k]: OK, REFUSE or FAILED */
static int read_batch(PyObject *item, int verify, Py_ssize_t k, Bat *bt, Buf *sec, Rec **recs,
                      size_t *nrec, size_t *rcap, long *decompressions) {
    PyObject *view = PyObject_GetAttr(item, mm2py_s_buf);
    if (!view) return FAILED;
    Py_buffer v;
    int rc = PyObject_GetBuffer(view, &v, PyBUF_SIMPLE);
    Py_DECREF(view);
    if (rc < 0) return FAILED;
    const uint8_t *b = v.buf;
    size_t len = (size_t)v.len;
    rc = REFUSE;
    if (len < HEADER || b[MAGIC_AT] != 2 || (int64_t)(int32_t)be32(b + 8) + LOG_OVERHEAD != (int64_t)len) goto done;
    if (verify && mm2py_crc32c(b + ATTRS_AT, len - ATTRS_AT) != be32(b + CRC_AT)) goto done;
    uint16_t attrs = be16(b + ATTRS_AT);
    int64_t last_delta = (int32_t)be32(b + 23), count = (int32_t)be32(b + 57);
    Bat *t = &bt[k];
    t->base_offset = (int64_t)be64(b);
    t->base_ts = (int64_t)be64(b + 27);
    t->count = count;
    t->first = *nrec;
    t->attrs = attrs;
    if ((attrs & ~7u) || count < 1 || count != last_delta + 1) goto done; /* not merge-eligible */
    if (k > 0) { /* must follow the previous batch: no offset gap, the same attributes */
        const Bat *p = &bt[k - 1];
        if (t->base_offset != p->base_offset + p->count || attrs != p->attrs) goto done;
    }
    size_t start = sec->used;
    if ((attrs & 7) == 0) {
        if (reserve(sec, len - HEADER) < 0) {
            rc = FAILED;
            goto done;
        }
        memcpy(sec->p + sec->used, b + HEADER, len - HEADER);
        sec->used += len - HEADER;
    } else if ((attrs & 7) == 3) {
        rc = lz4_into(sec, b + HEADER, len - HEADER);
        if (rc != OK) goto done;
        (*decompressions)++;
    } else {
        goto done; /* gzip, snappy, zstd: the Python path */
    }
    rc = scan(sec, start, sec->used, t, recs, nrec, rcap);
done:
    PyBuffer_Release(&v);
    if (rc == FAILED && !PyErr_Occurred()) PyErr_NoMemory();
    return rc;
}

PyObject *mm2py_merge(PyObject *self, PyObject *args) {
    PyObject *run;
    int verify;
    if (!PyArg_ParseTuple(args, "O!p", &PyList_Type, &run, &verify)) return NULL;
    Py_ssize_t n = PyList_GET_SIZE(run);
    Bat *bt = calloc((size_t)(n ? n : 1), sizeof(Bat));
    Buf sec = {0}, out = {0};
    Rec *recs = NULL;
    size_t nrec = 0, rcap = 0;
    long decompressions = 0;
    PyObject *steps = NULL;
    int rc = bt ? OK : FAILED;
    for (Py_ssize_t k = 0; k < n && rc == OK; k++) {
        rc = read_batch(PyList_GET_ITEM(run, k), verify, k, bt, &sec, &recs, &nrec, &rcap, &decompressions);
    }
    if (rc == OK && !(steps = PyList_New(0))) rc = FAILED;
    /* the groups of coalesce._Builder._groups: cut around batches not in sequence */
    Py_ssize_t i = 0;
    for (Py_ssize_t k = 0; k <= n && rc == OK; k++) {
        if (k < n && bt[k].in_seq) continue;
        if (k - i > 1)
            rc = merged_step(steps, &sec, bt, recs, i, k, &out);
        else if (k - i == 1)
            rc = pass_step(steps, 0, i);
        if (rc == OK && k < n) rc = pass_step(steps, 1, k);
        i = k + 1;
    }
    free(bt);
    free(sec.p);
    free(out.p);
    free(recs);
    if (rc == FAILED) {
        Py_XDECREF(steps);
        if (!PyErr_Occurred()) PyErr_NoMemory();
        return NULL;
    }
    if (rc == REFUSE) {
        Py_XDECREF(steps);
        Py_RETURN_NONE;
    }
    return Py_BuildValue("(Nl)", steps, decompressions);
}
