/* Wire events of a whole Arrow batch in one call: the compiled twin of arrow_encoder's
 * payloads + frame_events, which stay its reference (arrow_frames.py says which it takes;
 * tests compare both). Each column comes as its Arrow buffers, already cast by the caller
 * to what its Avro wire form reads: int64 for longs and decimals' unscaled values, float64
 * for doubles, binary for text and bytes. A payload is an insert's (no before image, the
 * row as the after image); its event's hash is the CRC-32 of the row's key text.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "../_native/crc32.h"

enum { W_LONG = 1, W_DOUBLE = 2, W_DECIMAL = 3, W_BYTES = 4 };
#define HEADER_SIZE 12

typedef struct {
    int wire, nullable;
    Py_ssize_t offset;
    Py_buffer valid, values, data;  /* valid/data .buf NULL when absent */
} Col;

static void release(Col *cols, int n) {
    for (int i = 0; i < n; i++) {
        if (cols[i].valid.obj) PyBuffer_Release(&cols[i].valid);
        if (cols[i].values.obj) PyBuffer_Release(&cols[i].values);
        if (cols[i].data.obj) PyBuffer_Release(&cols[i].data);
    }
}

static int get(PyObject *obj, Py_buffer *view) {
    memset(view, 0, sizeof(*view));
    if (obj == Py_None) return 0;
    return PyObject_GetBuffer(obj, view, PyBUF_SIMPLE);
}

static inline int is_valid(const Py_buffer *v, Py_ssize_t i) {
    return !v->buf || (((const uint8_t *)v->buf)[i >> 3] >> (i & 7) & 1);
}

static inline uint8_t *varint(uint8_t *w, uint64_t z) {
    while (z >= 0x80) { *w++ = (uint8_t)(z | 0x80); z >>= 7; }
    *w++ = (uint8_t)z;
    return w;
}

typedef struct {
    uint8_t *p;
    Py_ssize_t cap;
} Scratch;

static uint8_t *room(Scratch *s, uint8_t *w, Py_ssize_t extra) {
    Py_ssize_t used = w - s->p;
    if (used + extra <= s->cap) return w;
    Py_ssize_t cap = s->cap ? s->cap : 1024;
    while (cap < used + extra) cap *= 2;
    uint8_t *p = PyMem_Realloc(s->p, cap);
    if (!p) { PyErr_NoMemory(); return NULL; }
    s->p = p;
    s->cap = cap;
    return p + used;
}

/* frames(columns, rows, keys, ops, source, version) -> list of wire events.
 * columns: (wire, nullable, offset, validity, values, data) per column; keys: below;
 * ops: one byte per row. */
static PyObject *frames(PyObject *self, PyObject *args) {
    PyObject *columns, *keys;
    Py_ssize_t rows;
    Py_buffer ops, source;
    int version;
    if (!PyArg_ParseTuple(args, "O!nO!y*y*i", &PyList_Type, &columns, &rows, &PyTuple_Type,
                          &keys, &ops, &source, &version))
        return NULL;
    Py_ssize_t ncols = PyList_GET_SIZE(columns);
    Col *cols = PyMem_Calloc(ncols ? ncols : 1, sizeof(Col));
    PyObject *out = NULL;
    Scratch s = {0};
    Col key = {0};
    struct { Py_ssize_t col; const char *prefix; Py_ssize_t len; } ints[16];
    int nints = 0;
    if (!cols) { PyErr_NoMemory(); goto done; }
    if (ops.len < rows || source.len > 255 || version < 0 || version > 65535) {
        PyErr_SetString(PyExc_ValueError, "an op per row, a source of at most 255 bytes");
        goto done;
    }
    for (Py_ssize_t i = 0; i < ncols; i++) {
        PyObject *valid, *values, *data;
        Col *c = &cols[i];
        if (!PyArg_ParseTuple(PyList_GET_ITEM(columns, i), "iinOOO", &c->wire, &c->nullable,
                              &c->offset, &valid, &values, &data) ||
            get(valid, &c->valid) < 0 || get(values, &c->values) < 0 || get(data, &c->data) < 0)
            goto done;
        Py_ssize_t width = c->wire == W_BYTES ? 4 : 8, need = (c->offset + rows) * width;
        if (c->wire == W_BYTES) need += 4;
        if (c->values.len < need || (c->wire == W_BYTES && !c->data.buf && rows) ||
            (c->valid.buf && c->valid.len * 8 < c->offset + rows)) {
            PyErr_Format(PyExc_ValueError, "column %zd: buffers shorter than its rows", i);
            goto done;
        }
    }
    /* keys: ("text", offset, validity, offsets, data) of the key texts, or ("ints",
     * ((column, prefix), ...)): integer key columns, whose text is written here */
    PyObject *kvalid, *koffsets, *kdata, *parts = NULL;
    const char *form;
    if (PyTuple_GET_SIZE(keys) < 1 || !PyUnicode_Check(PyTuple_GET_ITEM(keys, 0)) ||
        !(form = PyUnicode_AsUTF8(PyTuple_GET_ITEM(keys, 0)))) {
        PyErr_SetString(PyExc_ValueError, "keys: (\"text\", ...) or (\"ints\", parts)");
        goto done;
    }
    if (strcmp(form, "ints") == 0) {
        if (!PyArg_ParseTuple(keys, "sO", &form, &parts)) goto done;
        if (!parts || !PyTuple_Check(parts) || PyTuple_GET_SIZE(parts) > 16) {
            PyErr_SetString(PyExc_ValueError, "ints: up to 16 (column, prefix) pairs");
            goto done;
        }
        nints = (int)PyTuple_GET_SIZE(parts);
        for (int k = 0; k < nints; k++) {
            if (!PyArg_ParseTuple(PyTuple_GET_ITEM(parts, k), "ny#", &ints[k].col,
                                  &ints[k].prefix, &ints[k].len))
                goto done;
            if (ints[k].col < 0 || ints[k].col >= ncols || cols[ints[k].col].wire != W_LONG ||
                ints[k].len > 512) {
                PyErr_SetString(PyExc_ValueError, "an integer key part names no long column");
                goto done;
            }
        }
    } else {
        if (!PyArg_ParseTuple(keys, "snOOO", &form, &key.offset, &kvalid, &koffsets, &kdata) ||
            get(kvalid, &key.valid) < 0 || get(koffsets, &key.values) < 0 ||
            get(kdata, &key.data) < 0)
            goto done;
        if (key.values.len < (key.offset + rows + 1) * 4) {
            PyErr_SetString(PyExc_ValueError, "key offsets shorter than the rows");
            goto done;
        }
    }
    out = PyList_New(rows);
    if (!out) goto done;
    const uint8_t *opb = ops.buf;
    for (Py_ssize_t r = 0; r < rows; r++) {
        uint8_t *w = room(&s, s.p, 2);
        if (!w) goto fail;
        *w++ = 0;  /* no before image */
        *w++ = 2;  /* the after image */
        for (Py_ssize_t i = 0; i < ncols; i++) {
            Col *c = &cols[i];
            Py_ssize_t at = c->offset + r;
            if (!(w = room(&s, w, 24))) goto fail;
            if (c->nullable) {
                if (!is_valid(&c->valid, at)) { *w++ = 0; continue; }
                *w++ = 2;
            }
            switch (c->wire) {
            case W_LONG: {
                int64_t v = ((const int64_t *)c->values.buf)[at];
                w = varint(w, ((uint64_t)v << 1) ^ (uint64_t)(v >> 63));
                break;
            }
            case W_DOUBLE:
                memcpy(w, (const char *)c->values.buf + at * 8, 8);
                w += 8;
                break;
            case W_DECIMAL: {
                int64_t v = ((const int64_t *)c->values.buf)[at];
                uint64_t m = v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
                int bits = m ? 64 - __builtin_clzll(m) : 0;
                int n = (bits + 8) >> 3;
                if (n > 8) n = 8;
                *w++ = (uint8_t)(n << 1);
                for (int b = n - 1; b >= 0; b--) *w++ = (uint8_t)((uint64_t)v >> (8 * b));
                break;
            }
            default: {
                const int32_t *off = (const int32_t *)c->values.buf;
                int32_t start = off[at], end = off[at + 1];
                Py_ssize_t n = end - start;
                if (start < 0 || n < 0 || end > c->data.len) {
                    PyErr_Format(PyExc_ValueError, "column %zd: a bad offset", i);
                    goto fail;
                }
                if (!(w = room(&s, w, n + 10))) goto fail;
                w = varint(w, (uint64_t)n << 1);
                memcpy(w, (const char *)c->data.buf + start, n);
                w += n;
            }
            }
        }
        Py_ssize_t payload = w - s.p;
        uint32_t hash;
        if (nints) {  /* {"a":1,"b":2}, as ArrowEncoder.keys writes it */
            char text[16 * (512 + 24) + 2], *t = text;
            for (int k = 0; k < nints; k++) {
                Col *c = &cols[ints[k].col];
                Py_ssize_t at = c->offset + r;
                memcpy(t, ints[k].prefix, ints[k].len);
                t += ints[k].len;
                if (is_valid(&c->valid, at))
                    t += sprintf(t, "%lld", (long long)((const int64_t *)c->values.buf)[at]);
                else { memcpy(t, "null", 4); t += 4; }
            }
            *t++ = '}';
            hash = crc32_of((const uint8_t *)text, t - text);
        } else {
            const int32_t *koff = (const int32_t *)key.values.buf;
            int32_t ks = koff[key.offset + r], ke = koff[key.offset + r + 1];
            if (ks < 0 || ke < ks || ke > key.data.len) {
                PyErr_SetString(PyExc_ValueError, "a bad key offset");
                goto fail;
            }
            hash = crc32_of((const uint8_t *)key.data.buf + ks, ke - ks);
        }
        Py_ssize_t size = HEADER_SIZE + source.len + payload;
        PyObject *event = PyBytes_FromStringAndSize(NULL, size);
        if (!event) goto fail;
        uint8_t *e = (uint8_t *)PyBytes_AS_STRING(event);
        for (int b = 0; b < 4; b++) e[b] = (uint8_t)((uint32_t)size >> (8 * b));
        for (int b = 0; b < 4; b++) e[4 + b] = (uint8_t)(hash >> (8 * b));
        e[8] = opb[r];
        e[9] = (uint8_t)source.len;
        e[10] = (uint8_t)version;
        e[11] = (uint8_t)(version >> 8);
        memcpy(e + HEADER_SIZE, source.buf, source.len);
        memcpy(e + HEADER_SIZE + source.len, s.p, payload);
        PyList_SET_ITEM(out, r, event);
    }
    goto done;
fail:
    Py_CLEAR(out);
done:
    if (cols) release(cols, (int)ncols);
    release(&key, 1);
    PyMem_Free(cols);
    PyMem_Free(s.p);
    PyBuffer_Release(&ops);
    PyBuffer_Release(&source);
    return out;
}

static PyMethodDef methods[] = {
    {"frames", frames, METH_VARARGS,
     "frames(columns, rows, keys, ops, source, version) -> the batch's wire events"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_frames", "Wire events of an Arrow batch (see arrow_frames.py).",
    -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__frames(void) {
    crc_init();
    return PyModule_Create(&module);
}
