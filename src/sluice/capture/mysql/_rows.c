/* Binlog rows events -> Sluice wire events, a whole event per call (capture's hot path).
 *
 * The compiled twin of the generated Python transcoder in transcode.py, which stays the
 * reference: the same column forms, the same bytes (tests compare both on every type).
 * fastrows.py decides which tables it can take (a table with any other column form keeps
 * the Python path) and describes each column to Program(). Every read is bounds-checked:
 * bytes that do not parse raise ValueError, and tables.py then names the failing column
 * with its slow path.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

enum { OP_INT = 1, OP_INT24, OP_YEAR, OP_DOUBLE, OP_COPY, OP_DECIMAL, OP_DATE,
       OP_DATETIME2, OP_TIMESTAMP2, OP_ENUM };
enum { MODE_WRITE = 0, MODE_UPDATE = 1, MODE_DELETE = 2 };

#define MAX_GROUPS 16
#define HEADER_SIZE 12

typedef struct {
    int op, size, is_signed, uni, nullable, key;  /* key: slot in the key, or -1 */
    int ngroups, gbytes[MAX_GROUPS], gdigits[MAX_GROUPS], dsize;  /* DECIMAL */
    int frac_bytes;  /* DATETIME2 / TIMESTAMP2 */
    int64_t frac_mult;
    PyObject *members;  /* ENUM: tuple of encoded members (index n-1), then the default */
    PyObject *member_default;
} Col;

typedef struct {
    int col, text;
    const char *prefix;  /* `{"name":` or `,"name":`, owned by the prefixes tuple */
    Py_ssize_t prefix_len;
} KeyPart;

typedef struct {
    PyObject_HEAD
    Col *cols;
    int ncols;
    KeyPart *keys;
    int nkeys;
    PyObject *prefixes;
    char source[256];
    int source_len;
    int version;
    uint64_t null_mask;
    int null_bytes;
} Program;

#include "../../_native/buf.h"
#include "../../_native/text.h"

#include "../../_native/crc32.h"
#include "../../_native/dates.h"

/* -- key text ---------------------------------------------------------------------------- */
typedef struct {
    int64_t num;
    const uint8_t *text;
    Py_ssize_t text_len;
    int set;
} KeyValue;

/* The key's canonical JSON (as the Python path's key expression) into `out`. */
static int put_key(Program *self, KeyValue *kv, Buf *out) {
    for (int n = 0; n < self->nkeys; n++) {
        KeyPart *kp = &self->keys[n];
        KeyValue *v = &kv[self->cols[kp->col].key];
        if (!v->set) {
            PyErr_SetString(PyExc_ValueError, "a primary key column is NULL");
            return -1;
        }
        if (buf_reserve(out, kp->prefix_len + 24 + (kp->text ? v->text_len * 6 + 2 : 0)) < 0)
            return -1;
        memcpy(out->p + out->len, kp->prefix, kp->prefix_len);
        out->len += kp->prefix_len;
        if (!kp->text) {
            out->len += sprintf(out->p + out->len, "%lld", (long long)v->num);
            continue;
        }
        if (!utf8_ok(v->text, v->text_len)) {
            PyErr_SetString(PyExc_ValueError, "a text key column is not UTF-8");
            return -1;
        }
        put_json_text(out, v->text, v->text_len);
    }
    if (buf_reserve(out, 1) < 0) return -1;
    put_byte(out, '}');
    return 0;
}

/* -- one row image ------------------------------------------------------------------------ */
#define NEED(n) do { if (pos + (Py_ssize_t)(n) > end) goto short_row; } while (0)

static uint64_t le(const uint8_t *p, int n) {
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--) v = v << 8 | p[i];
    return v;
}

static uint64_t be(const uint8_t *p, int n) {
    uint64_t v = 0;
    for (int i = 0; i < n; i++) v = v << 8 | p[i];
    return v;
}

static int put_decimal(Col *c, const uint8_t *src, Buf *out) {
    uint8_t b[64];
    memcpy(b, src, c->dsize);
    int negative = !(b[0] & 0x80);
    if (negative) for (int i = 0; i < c->dsize; i++) b[i] = (uint8_t)~b[i];
    b[0] &= 0x7F;
    unsigned __int128 x = 0;
    const uint8_t *p = b;
    for (int g = 0; g < c->ngroups; g++) {
        uint64_t scale = 1;
        for (int k = 0; k < c->gdigits[g]; k++) scale *= 10;
        x = x * scale + be(p, c->gbytes[g]);
        p += c->gbytes[g];
    }
    uint64_t hi = (uint64_t)(x >> 64), lo = (uint64_t)x;
    int bits = hi ? 128 - __builtin_clzll(hi) : lo ? 64 - __builtin_clzll(lo) : 0;
    int n = (bits + 8) >> 3;
    __int128 s = negative ? -(__int128)x : (__int128)x;
    if (c->uni) put_byte(out, 2);
    put_varint(out, (uint64_t)n << 1);
    for (int i = n - 1; i >= 0; i--) put_byte(out, (uint8_t)(s >> (8 * i)));
    return 0;
}

/* Encode the row at *at into `out` (Avro Row, no union branch of its own); fills `kv`. */
static int put_row(Program *self, const uint8_t *data, Py_ssize_t *at, Py_ssize_t end, Buf *out,
                   KeyValue *kv) {
    Py_ssize_t pos = *at;
    NEED(self->null_bytes);
    uint64_t nulls = le(data + pos, self->null_bytes > 8 ? 8 : self->null_bytes);
    if (self->null_bytes > 8) {
        /* More than 64 columns: fastrows.py does not build a Program for those. */
        PyErr_SetString(PyExc_ValueError, "too many columns");
        return -1;
    }
    nulls &= self->null_mask;
    pos += self->null_bytes;
    for (int i = 0; i < self->nkeys; i++) kv[i].set = 0;
    for (int i = 0; i < self->ncols; i++) {
        Col *c = &self->cols[i];
        /* The widest column form: a 4-byte length, 16 bytes of a DECIMAL's digits. */
        if (buf_reserve(out, 64) < 0) return -1;
        if (c->nullable && (nulls >> i & 1)) {
            put_byte(out, 0);
            continue;
        }
        const uint8_t *p = data + pos;
        int64_t v;
        switch (c->op) {
        case OP_INT:
            NEED(c->size);
            if (c->is_signed) {
                switch (c->size) {
                case 1: v = (int8_t)p[0]; break;
                case 2: v = (int16_t)le(p, 2); break;
                case 4: v = (int32_t)le(p, 4); break;
                default: v = (int64_t)le(p, 8);
                }
            } else v = (int64_t)le(p, c->size);
            pos += c->size;
            goto put_long;
        case OP_INT24:
            NEED(3);
            v = (int64_t)le(p, 3);
            if (c->is_signed && v & 0x800000) v -= 0x1000000;
            pos += 3;
            goto put_long;
        case OP_YEAR:
            NEED(1);
            v = p[0] ? p[0] + 1900 : 0;
            pos += 1;
        put_long:
            if (c->uni) put_byte(out, 2);
            put_varint(out, c->is_signed ? zigzag(v) : (uint64_t)v << 1);
            if (c->key >= 0) { kv[c->key].num = v; kv[c->key].set = 1; }
            break;
        case OP_DOUBLE:
            NEED(8);
            if (c->uni) put_byte(out, 2);
            memcpy(out->p + out->len, p, 8);
            out->len += 8;
            pos += 8;
            break;
        case OP_COPY: {
            NEED(c->size);
            Py_ssize_t n = (Py_ssize_t)le(p, c->size);
            pos += c->size;
            NEED(n);
            if (buf_reserve(out, n + 16) < 0) return -1;
            if (c->uni) put_byte(out, 2);
            put_varint(out, (uint64_t)n << 1);
            memcpy(out->p + out->len, data + pos, n);
            out->len += n;
            if (c->key >= 0) {
                kv[c->key].text = data + pos;
                kv[c->key].text_len = n;
                kv[c->key].set = 1;
            }
            pos += n;
            break;
        }
        case OP_DECIMAL:
            NEED(c->dsize);
            put_decimal(c, p, out);
            pos += c->dsize;
            break;
        case OP_DATE: {
            NEED(3);
            uint64_t d = le(p, 3);
            pos += 3;
            int64_t y = d >> 9, m = (d >> 5) & 15, day = d & 31;
            if (!valid_date(y, m, day)) { put_byte(out, 0); break; }
            put_byte(out, 2);
            put_varint(out, zigzag(days_from_civil(y, m, day)));
            break;
        }
        case OP_DATETIME2: {
            NEED(5 + c->frac_bytes);
            int64_t u = (int64_t)be(p, 5) - 0x8000000000LL;
            int64_t f = (int64_t)be(p + 5, c->frac_bytes) * c->frac_mult;
            pos += 5 + c->frac_bytes;
            if (u < 0) { put_byte(out, 0); break; }  /* a negative year: no date */
            int64_t ymd = u >> 17, ym = ymd >> 5;
            int64_t y = ym / 13, m = ym % 13, day = ymd % 32;
            if (!valid_date(y, m, day)) { put_byte(out, 0); break; }
            int64_t h = u & 0x1FFFF;
            int64_t x = days_from_civil(y, m, day) * 86400000000LL +
                        ((h >> 12) * 3600 + (h >> 6 & 63) * 60 + (h & 63)) * 1000000LL + f;
            put_byte(out, 2);
            put_varint(out, zigzag(x));
            break;
        }
        case OP_TIMESTAMP2: {
            NEED(4 + c->frac_bytes);
            int64_t x = (int64_t)be(p, 4) * 1000000LL +
                        (int64_t)be(p + 4, c->frac_bytes) * c->frac_mult;
            pos += 4 + c->frac_bytes;
            if (!x) { put_byte(out, 0); break; }
            put_byte(out, 2);
            put_varint(out, (uint64_t)x << 1);
            break;
        }
        case OP_ENUM: {
            NEED(c->size);
            uint64_t n = le(p, c->size);
            pos += c->size;
            PyObject *m = (n >= 1 && n <= (uint64_t)PyTuple_GET_SIZE(c->members))
                              ? PyTuple_GET_ITEM(c->members, n - 1)
                              : c->member_default;
            Py_ssize_t len = PyBytes_GET_SIZE(m);
            if (buf_reserve(out, len) < 0) return -1;
            memcpy(out->p + out->len, PyBytes_AS_STRING(m), len);
            out->len += len;
            break;
        }
        default:
            PyErr_SetString(PyExc_SystemError, "unknown column form");
            return -1;
        }
    }
    *at = pos;
    return 0;
short_row:
    PyErr_SetString(PyExc_ValueError, "the rows event ends inside a row");
    return -1;
}

/* -- events --------------------------------------------------------------------------------- */
/* Frame one event: header, source, then `parts` (payload pieces) into a new bytes object. */
static int add_event(Program *self, PyObject *list, int op, const Buf *key, int has_key,
                     const char *const *parts, const Py_ssize_t *lens, int nparts, Buf *scratch) {
    Py_ssize_t payload = 0;
    for (int i = 0; i < nparts; i++) payload += lens[i];
    uint32_t hash;
    scratch->len = 0;
    if (has_key) {
        hash = crc32_of((const uint8_t *)key->p, key->len);
    } else {
        if (buf_reserve(scratch, payload) < 0) return -1;
        for (int i = 0; i < nparts; i++) {
            memcpy(scratch->p + scratch->len, parts[i], lens[i]);
            scratch->len += lens[i];
        }
        hash = crc32_of((const uint8_t *)scratch->p, scratch->len);
    }
    Py_ssize_t size = HEADER_SIZE + self->source_len + payload;
    PyObject *event = PyBytes_FromStringAndSize(NULL, size);
    if (!event) return -1;
    uint8_t *w = (uint8_t *)PyBytes_AS_STRING(event);
    uint32_t s32 = (uint32_t)size;
    for (int i = 0; i < 4; i++) w[i] = (uint8_t)(s32 >> (8 * i));
    for (int i = 0; i < 4; i++) w[4 + i] = (uint8_t)(hash >> (8 * i));
    w[8] = (uint8_t)op;
    w[9] = (uint8_t)self->source_len;
    w[10] = (uint8_t)self->version;
    w[11] = (uint8_t)(self->version >> 8);
    w += HEADER_SIZE;
    memcpy(w, self->source, self->source_len);
    w += self->source_len;
    for (int i = 0; i < nparts; i++) {
        memcpy(w, parts[i], lens[i]);
        w += lens[i];
    }
    int rc = PyList_Append(list, event);
    Py_DECREF(event);
    return rc;
}

static PyObject *Program_events(Program *self, PyObject *args) {
    if (!self->cols) {  /* __init__ failed or was never called */
        PyErr_SetString(PyExc_RuntimeError, "the Program is not built");
        return NULL;
    }
    int mode;
    Py_buffer view;
    Py_ssize_t start;
    if (!PyArg_ParseTuple(args, "iy*n", &mode, &view, &start)) return NULL;
    const uint8_t *data = view.buf;
    Py_ssize_t end = view.len, pos = start;
    PyObject *list = PyList_New(0);
    Buf before = {0}, after = {0}, key0 = {0}, key1 = {0}, scratch = {0};
    KeyValue kv[64];
    int has_key = self->nkeys > 0;
    if (!list) goto fail;
    while (pos < end) {
        before.len = key0.len = 0;
        if (put_row(self, data, &pos, end, &before, kv) < 0) goto fail;
        if (has_key && put_key(self, kv, &key0) < 0) goto fail;
        if (mode == MODE_WRITE) {
            const char *parts[2] = {"\x00\x02", before.p};
            Py_ssize_t lens[2] = {2, before.len};
            if (add_event(self, list, 'c', &key0, has_key, parts, lens, 2, &scratch) < 0) goto fail;
        } else if (mode == MODE_DELETE) {
            const char *parts[3] = {"\x02", before.p, "\x00"};
            Py_ssize_t lens[3] = {1, before.len, 1};
            if (add_event(self, list, 'd', &key0, has_key, parts, lens, 3, &scratch) < 0) goto fail;
        } else {
            after.len = key1.len = 0;
            if (put_row(self, data, &pos, end, &after, kv) < 0) goto fail;
            if (has_key && put_key(self, kv, &key1) < 0) goto fail;
            if (!has_key || (key0.len == key1.len && !memcmp(key0.p, key1.p, key0.len))) {
                const char *parts[4] = {"\x02", before.p, "\x02", after.p};
                Py_ssize_t lens[4] = {1, before.len, 1, after.len};
                if (add_event(self, list, 'u', &key1, has_key, parts, lens, 4, &scratch) < 0)
                    goto fail;
            } else {  /* a primary key change: delete the old key, insert the new one */
                const char *d[3] = {"\x02", before.p, "\x00"};
                Py_ssize_t dl[3] = {1, before.len, 1};
                const char *c[2] = {"\x00\x02", after.p};
                Py_ssize_t cl[2] = {2, after.len};
                if (add_event(self, list, 'd', &key0, 1, d, dl, 3, &scratch) < 0 ||
                    add_event(self, list, 'c', &key1, 1, c, cl, 2, &scratch) < 0)
                    goto fail;
            }
        }
    }
    PyMem_Free(before.p); PyMem_Free(after.p); PyMem_Free(key0.p); PyMem_Free(key1.p);
    PyMem_Free(scratch.p);
    PyBuffer_Release(&view);
    return list;
fail:
    Py_XDECREF(list);
    PyMem_Free(before.p); PyMem_Free(after.p); PyMem_Free(key0.p); PyMem_Free(key1.p);
    PyMem_Free(scratch.p);
    PyBuffer_Release(&view);
    return NULL;
}

/* -- construction -------------------------------------------------------------------------- */
static int parse_col(Col *c, PyObject *spec) {
    /* (op, size, signed, union, nullable, key slot, precision or fsp, scale, members) */
    PyObject *members;
    int precision, scale;
    if (!PyArg_ParseTuple(spec, "iiiiiiiiO", &c->op, &c->size, &c->is_signed, &c->uni,
                          &c->nullable, &c->key, &precision, &scale, &members))
        return -1;
    if (c->op == OP_DECIMAL) {
        static const int dig2bytes[10] = {0, 1, 1, 2, 2, 3, 3, 4, 4, 4};
        if (precision > 38 || precision < scale) {
            PyErr_SetString(PyExc_ValueError, "DECIMAL precision above 38");
            return -1;
        }
        int intg0 = (precision - scale) / 9, intg0x = (precision - scale) % 9;
        int frac0 = scale / 9, frac0x = scale % 9, g = 0;
        if (intg0x) { c->gbytes[g] = dig2bytes[intg0x]; c->gdigits[g++] = intg0x; }
        for (int k = 0; k < intg0 + frac0; k++) { c->gbytes[g] = 4; c->gdigits[g++] = 9; }
        if (frac0x) { c->gbytes[g] = dig2bytes[frac0x]; c->gdigits[g++] = frac0x; }
        c->ngroups = g;
        c->dsize = 0;
        for (int k = 0; k < g; k++) c->dsize += c->gbytes[k];
    }
    if (c->op == OP_DATETIME2 || c->op == OP_TIMESTAMP2) {
        static const int64_t mult[3] = {10000, 100, 1};
        c->frac_bytes = (precision + 1) / 2;
        c->frac_mult = c->frac_bytes ? mult[c->frac_bytes - 1] : 0;
    }
    if (c->op == OP_ENUM) {
        PyObject *table, *dflt;
        if (!PyArg_ParseTuple(members, "O!S", &PyTuple_Type, &table, &dflt)) return -1;
        for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(table); i++)
            if (!PyBytes_Check(PyTuple_GET_ITEM(table, i))) {
                PyErr_SetString(PyExc_TypeError, "enum members must be bytes");
                return -1;
            }
        Py_INCREF(table);
        Py_INCREF(dflt);
        c->members = table;
        c->member_default = dflt;
    }
    if ((c->op == OP_INT && c->size != 1 && c->size != 2 && c->size != 4 && c->size != 8) ||
        (c->op == OP_COPY && (c->size < 1 || c->size > 4)) ||
        (c->op == OP_ENUM && (c->size < 1 || c->size > 2))) {
        PyErr_SetString(PyExc_ValueError, "bad column width");
        return -1;
    }
    return 0;
}

static void Program_dealloc(Program *self) {
    if (self->cols)
        for (int i = 0; i < self->ncols; i++) {
            Py_XDECREF(self->cols[i].members);
            Py_XDECREF(self->cols[i].member_default);
        }
    PyMem_Free(self->cols);
    PyMem_Free(self->keys);
    Py_XDECREF(self->prefixes);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int Program_init(Program *self, PyObject *args, PyObject *kwds) {
    PyObject *cols, *keys;
    const char *source;
    Py_ssize_t source_len;
    int version;
    static char *names[] = {"columns", "key", "source", "version", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O!O!y#i", names, &PyTuple_Type, &cols,
                                     &PyTuple_Type, &keys, &source, &source_len, &version))
        return -1;
    if (self->cols) {
        PyErr_SetString(PyExc_RuntimeError, "Program is already built");
        return -1;
    }
    Py_ssize_t ncols = PyTuple_GET_SIZE(cols), nkeys = PyTuple_GET_SIZE(keys);
    if (ncols < 1 || ncols > 64 || nkeys > 64 || source_len > 255 || version < 0 ||
        version > 65535) {
        PyErr_SetString(PyExc_ValueError, "1-64 columns, a source of at most 255 bytes");
        return -1;
    }
    self->cols = PyMem_Calloc(ncols, sizeof(Col));
    self->keys = PyMem_Calloc(nkeys ? nkeys : 1, sizeof(KeyPart));
    self->prefixes = PyTuple_New(nkeys);
    if (!self->cols || !self->keys || !self->prefixes) { PyErr_NoMemory(); return -1; }
    self->ncols = (int)ncols;
    for (Py_ssize_t i = 0; i < ncols; i++)
        if (parse_col(&self->cols[i], PyTuple_GET_ITEM(cols, i)) < 0) return -1;
    for (Py_ssize_t n = 0; n < nkeys; n++) {
        PyObject *prefix;
        KeyPart *kp = &self->keys[n];
        if (!PyArg_ParseTuple(PyTuple_GET_ITEM(keys, n), "iSp", &kp->col, &prefix, &kp->text))
            return -1;
        if (kp->col < 0 || kp->col >= ncols || self->cols[kp->col].key < 0 ||
            self->cols[kp->col].key >= nkeys) {
            PyErr_SetString(PyExc_ValueError, "a key part names no key column");
            return -1;
        }
        Py_INCREF(prefix);
        PyTuple_SET_ITEM(self->prefixes, n, prefix);
        kp->prefix = PyBytes_AS_STRING(prefix);
        kp->prefix_len = PyBytes_GET_SIZE(prefix);
    }
    self->nkeys = (int)nkeys;
    memcpy(self->source, source, source_len);
    self->source_len = (int)source_len;
    self->version = version;
    self->null_bytes = (int)((ncols + 7) / 8);
    self->null_mask = ncols == 64 ? ~(uint64_t)0 : ((uint64_t)1 << ncols) - 1;
    return 0;
}

static PyMethodDef Program_methods[] = {
    {"events", (PyCFunction)Program_events, METH_VARARGS,
     "events(mode, body, pos) -> list of wire events of the rows from pos to the end"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject ProgramType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "sluice.capture.mysql._rows.Program",
    .tp_basicsize = sizeof(Program),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "The compiled transcoder of one table map.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Program_init,
    .tp_dealloc = (destructor)Program_dealloc,
    .tp_methods = Program_methods,
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_rows", "Compiled binlog rows transcoder (see transcode.py).", -1,
    NULL, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__rows(void) {
    crc_init();
    if (PyType_Ready(&ProgramType) < 0) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (!m) return NULL;
    Py_INCREF(&ProgramType);
    if (PyModule_AddObject(m, "Program", (PyObject *)&ProgramType) < 0) {
        Py_DECREF(&ProgramType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
