/* Shared by the files of mm2py.protocol._native (see _native.c). */
#ifndef MM2PY_NATIVE_H
#define MM2PY_NATIVE_H
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <lz4frame.h>
#include <stdint.h>

/* CRC-32C (Castagnoli) of n bytes, as Kafka's batch CRC */
uint32_t mm2py_crc32c(const uint8_t *p, size_t n);
/* the process's LZ4 frame decompression context (used with the GIL held) */
extern LZ4F_dctx *mm2py_dctx;
/* the interned attribute name "buf" (RecordBatch.buf) */
extern PyObject *mm2py_s_buf;
/* merge(run, verify): see _native.c */
PyObject *mm2py_merge(PyObject *self, PyObject *args);
/* plan(batches, threshold, limit, cuts): see _native_plan.c */
PyObject *mm2py_plan(PyObject *self, PyObject *args);
/* a RecordBatch's first HEADER bytes copied into h: 1, or 0 (no exception set) if it is not a
 * batch view of at least a header */
int mm2py_batch_header(PyObject *batch, uint8_t *h);

/* ----------------------------------------------------------------------------- big-endian fields */
static inline uint64_t be64(const uint8_t *p) {
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) v = (v << 8) | p[i];
    return v;
}
static inline uint32_t be32(const uint8_t *p) {
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}
static inline uint16_t be16(const uint8_t *p) { return (uint16_t)((p[0] << 8) | p[1]); }

/* header offsets of a v2 batch (records.py) */
enum { LOG_OVERHEAD = 12, MAGIC_AT = 16, CRC_AT = 17, ATTRS_AT = 21, HEADER = 61 };

#endif
