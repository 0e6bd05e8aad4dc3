/* pgoutput change messages -> Sluice wire events, a whole run of one relation per call.
 *
 * The compiled twin of the generated row transcoder (transcode.py) and of the numpy run path
 * (runs.py), which stay the reference: the same bytes (tests compare them on every kind).
 * compiled.py decides which relations it can take and describes each column to Program().
 * It reads only the canonical text forms the server sends; anything else (a text Python's
 * parsers would take in another spelling, infinity, a BC date, an unchanged TOASTed value, a
 * NULL where the schema has none, a key change) makes events() return None, and the caller
 * transcodes the run by the Python paths, which decide and name a bad column.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

enum { F_INT = 1, F_DOUBLE, F_BOOL, F_TEXT, F_DATE, F_DATETIME, F_TIMESTAMPTZ };
enum { K_INT = 0, K_BOOL = 1, K_TEXT = 2, K_DATE, K_DATETIME, K_TIMESTAMP, K_DOUBLE };

#define HEADER_SIZE 12
#define MAX_COLS 1600 /* PostgreSQL's own limit */

typedef struct {
    int form, uni, key; /* key: slot in the key, or -1 */
} Col;

typedef struct {
    int col, kind;
    const char *prefix; /* `{"name":` or `,"name":`, owned by the prefixes tuple */
    Py_ssize_t prefix_len;
} KeyPart;

typedef struct {
    const uint8_t *text; /* NULL: the value is NULL */
    Py_ssize_t len;
    int64_t num;  /* ints, bools, days, microseconds */
    double dbl;
} KeyValue;

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
} Program;

#include "../../_native/buf.h"
#include "../../_native/text.h"

#include "../../_native/crc32.h"
#include "../../_native/dates.h"
#include "../../_native/keys.h"

/* -- the server's text forms (refused: 0) ------------------------------------------------- */
static inline int is_digit(uint8_t c) { return c >= '0' && c <= '9'; }

/* [-]digits within int64, as int() reads them. */
static int parse_int(const uint8_t *p, Py_ssize_t n, int64_t *out) {
    int neg = n > 0 && p[0] == '-';
    Py_ssize_t i = neg;
    if (i == n || n - i > 19) return 0;
    uint64_t v = 0;
    for (; i < n; i++) {
        if (!is_digit(p[i])) return 0;
        v = v * 10 + (p[i] - '0');
    }
    if (v > (uint64_t)INT64_MAX + neg) return 0;
    *out = neg ? (int64_t)(0 - v) : (int64_t)v;
    return 1;
}

/* float(text) for the forms the server prints: digits, sign, point, exponent; NaN and the
 * infinities. The same parser float() ends in, so the same double. */
static int parse_double(const uint8_t *p, Py_ssize_t n, double *out) {
    char text[64];
    if (n < 1 || n >= (Py_ssize_t)sizeof text) return 0;
    int named = (n == 3 && !memcmp(p, "NaN", 3)) || (n == 8 && !memcmp(p, "Infinity", 8)) ||
                (n == 9 && !memcmp(p, "-Infinity", 9));
    for (Py_ssize_t i = 0; i < n && !named; i++) {
        uint8_t c = p[i];
        if (!is_digit(c) && c != '.' && c != 'e' && c != 'E' && c != '+' && c != '-') return 0;
    }
    memcpy(text, p, n);
    text[n] = 0;
    char *end;
    double v = PyOS_string_to_double(text, &end, NULL);
    if (v == -1.0 && PyErr_Occurred()) { PyErr_Clear(); return 0; }
    if (end != text + n) return 0;
    *out = v;
    return 1;
}

static inline int num(const uint8_t *p, int n) {
    int v = 0;
    for (int i = 0; i < n; i++) v = v * 10 + (p[i] - '0');
    return v;
}

/* YYYY-MM-DD (years 1-9999, as date.fromisoformat): days since 1970-01-01. */
static int parse_date(const uint8_t *p, Py_ssize_t n, int64_t *out) {
    static const char shape[] = "dddd-dd-dd";
    if (n < 10) return 0;
    for (int i = 0; i < 10; i++)
        if (shape[i] == 'd' ? !is_digit(p[i]) : p[i] != shape[i]) return 0;
    int y = num(p, 4), m = num(p + 5, 2), d = num(p + 8, 2);
    if (!valid_date(y, m, d)) return 0;
    *out = days_from_civil(y, m, d);
    return 1;
}

/* YYYY-MM-DD HH:MM:SS[.f{1,6}], then `+00` for timestamptz (TimeZone=UTC): microseconds
 * since 1970-01-01, as datetime.fromisoformat and types._micros give them. */
static int parse_stamp(const uint8_t *p, Py_ssize_t n, int utc, int64_t *out) {
    int64_t days;
    if (utc) {
        if (n < 3 || memcmp(p + n - 3, "+00", 3)) return 0;
        n -= 3;
    }
    if (n < 19 || !parse_date(p, 10, &days) || p[10] != ' ' || p[13] != ':' || p[16] != ':')
        return 0;
    static const int at[6] = {11, 12, 14, 15, 17, 18};
    for (int i = 0; i < 6; i++)
        if (!is_digit(p[at[i]])) return 0;
    int h = num(p + 11, 2), mi = num(p + 14, 2), s = num(p + 17, 2);
    if (h > 23 || mi > 59 || s > 59) return 0;
    int64_t frac = 0;
    if (n > 19) {
        Py_ssize_t digits = n - 20;
        if (p[19] != '.' || digits < 1 || digits > 6) return 0;
        for (Py_ssize_t i = 0; i < 6; i++) {
            if (i < digits && !is_digit(p[20 + i])) return 0;
            frac = frac * 10 + (i < digits ? p[20 + i] - '0' : 0);
        }
    }
    *out = (days * 86400 + h * 3600 + mi * 60 + s) * 1000000 + frac;
    return 1;
}

/* -- key text ---------------------------------------------------------------------------- */
/* The key's canonical JSON (as RowCodec.key_text makes it) into `out`; 0: refused. */
static int put_key(Program *self, const KeyValue *kv, Buf *out) {
    out->len = 0;
    for (int n = 0; n < self->nkeys; n++) {
        const KeyPart *kp = &self->keys[n];
        const KeyValue *v = &kv[self->cols[kp->col].key];
        if (buf_reserve(out, kp->prefix_len + 24 + (v->text ? v->len * 6 + 2 : 0)) < 0)
            return -1;
        memcpy(out->p + out->len, kp->prefix, kp->prefix_len);
        out->len += kp->prefix_len;
        if (!v->text) {
            memcpy(out->p + out->len, "null", 4);
            out->len += 4;
        } else if (kp->kind == K_INT) {
            out->len += sprintf(out->p + out->len, "%lld", (long long)v->num);
        } else if (kp->kind == K_BOOL) {
            const char *word = v->num ? "true" : "false";
            memcpy(out->p + out->len, word, strlen(word));
            out->len += strlen(word);
        } else if (kp->kind == K_DATE) {
            if (put_date_key(out, v->num) < 0) return -1;
        } else if (kp->kind == K_DATETIME || kp->kind == K_TIMESTAMP) {
            if (put_micros_key(out, v->num, kp->kind == K_TIMESTAMP) < 0) return -1;
        } else if (kp->kind == K_DOUBLE) {
            if (put_double_key(out, v->dbl) < 0) return -1;
        } else {
            if (!utf8_ok(v->text, v->len)) return 0;  /* the Python paths decide */
            put_json_text(out, v->text, v->len);
        }
    }
    if (buf_reserve(out, 1) < 0) return -1;
    put_byte(out, '}');
    return 1;
}

/* -- one TupleData --------------------------------------------------------------------- */
/* The tuple at *at into `out` (its Avro row) and `kv` (its key's values): 1, or 0 refused,
 * or -1 with an exception set. */
static int put_row(Program *self, const uint8_t *data, Py_ssize_t *at, Py_ssize_t end, Buf *out,
                   KeyValue *kv) {
    Py_ssize_t pos = *at;
    if (pos + 2 > end || ((data[pos] << 8) | data[pos + 1]) != self->ncols) return 0;
    pos += 2;
    out->len = 0;
    for (int i = 0; i < self->ncols; i++) {
        const Col *c = &self->cols[i];
        if (pos >= end) return 0;
        uint8_t tag = data[pos];
        if (tag == 'n') {
            if (!c->uni) return 0;
            if (buf_reserve(out, 1) < 0) return -1;
            put_byte(out, 0);
            if (c->key >= 0) kv[c->key].text = NULL;
            pos += 1;
            continue;
        }
        if (tag != 't' || pos + 5 > end) return 0;
        uint32_t n = (uint32_t)data[pos + 1] << 24 | (uint32_t)data[pos + 2] << 16 |
                     (uint32_t)data[pos + 3] << 8 | data[pos + 4];
        pos += 5;
        if ((Py_ssize_t)n > end - pos) return 0;
        const uint8_t *r = data + pos;
        pos += n;
        if (buf_reserve(out, 11 + (Py_ssize_t)n) < 0) return -1;
        if (c->uni) put_byte(out, 2);
        int64_t v = 0;
        switch (c->form) {
        case F_INT:
            if (!parse_int(r, n, &v)) return 0;
            put_varint(out, zigzag(v));
            break;
        case F_DOUBLE: {
            double d;
            if (!parse_double(r, n, &d)) return 0;
            uint64_t bits;
            memcpy(&bits, &d, 8);
            for (int k = 0; k < 8; k++) put_byte(out, (uint8_t)(bits >> (8 * k)));
            if (c->key >= 0) kv[c->key].dbl = d;
            break;
        }
        case F_BOOL:
            v = n == 1 && r[0] == 't';
            put_byte(out, v ? 2 : 0);
            break;
        case F_TEXT:
            put_varint(out, (uint64_t)n << 1);
            memcpy(out->p + out->len, r, n);
            out->len += n;
            break;
        case F_DATE:
            if (n != 10 || !parse_date(r, n, &v)) return 0;
            put_varint(out, zigzag(v));
            break;
        default: /* F_DATETIME, F_TIMESTAMPTZ */
            if (!parse_stamp(r, n, c->form == F_TIMESTAMPTZ, &v)) return 0;
            put_varint(out, zigzag(v));
            break;
        }
        if (c->key >= 0) {
            kv[c->key].text = r;
            kv[c->key].len = n;
            kv[c->key].num = v;
        }
    }
    *at = pos;
    return 1;
}

/* -- events ------------------------------------------------------------------------------ */
static PyObject *frame(Program *self, int op, const Buf *key, const char *const *parts,
                       const Py_ssize_t *lens, int nparts) {
    Py_ssize_t payload = 0;
    for (int i = 0; i < nparts; i++) payload += lens[i];
    Py_ssize_t size = HEADER_SIZE + self->source_len + payload;
    if (size > (Py_ssize_t)UINT32_MAX) {
        PyErr_SetString(PyExc_OverflowError, "an event above 4 GiB");
        return NULL;
    }
    PyObject *event = PyBytes_FromStringAndSize(NULL, size);
    if (!event) return NULL;
    uint8_t *w = (uint8_t *)PyBytes_AS_STRING(event), *body = w + HEADER_SIZE + self->source_len;
    uint8_t *at = body;
    for (int i = 0; i < nparts; i++) {
        memcpy(at, parts[i], lens[i]);
        at += lens[i];
    }
    uint32_t hash = self->nkeys ? crc32_of((const uint8_t *)key->p, key->len)
                                : crc32_of(body, payload);
    uint32_t s32 = (uint32_t)size;
    for (int i = 0; i < 4; i++) w[i] = (uint8_t)(s32 >> (8 * i));
    for (int i = 0; i < 4; i++) w[4 + i] = (uint8_t)(hash >> (8 * i));
    w[8] = (uint8_t)op;
    w[9] = (uint8_t)self->source_len;
    w[10] = (uint8_t)self->version;
    w[11] = (uint8_t)(self->version >> 8);
    memcpy(w + HEADER_SIZE, self->source, self->source_len);
    return event;
}

/* One message's event: 1, 0 refused, -1 error. */
static int message_event(Program *self, const uint8_t *data, Py_ssize_t end, Buf *before,
                         Buf *after, Buf *key0, Buf *key1, KeyValue *kv, PyObject **event) {
    if (end < 6) return 0;
    uint8_t tag = data[0], marker = data[5];
    Py_ssize_t pos = 6;
    int rc;
    if (tag == 'I' || tag == 'U') {
        int has_old = tag == 'U' && (marker == 'K' || marker == 'O');
        if (has_old) {
            if ((rc = put_row(self, data, &pos, end, before, kv)) != 1) return rc;
            if (self->nkeys && (rc = put_key(self, kv, key0)) != 1) return rc;
            if (pos >= end) return 0;
            marker = data[pos++];
        }
        if (marker != 'N') return 0;
        if ((rc = put_row(self, data, &pos, end, after, kv)) != 1) return rc;
        if (pos != end) return 0;
        if (self->nkeys && (rc = put_key(self, kv, key1)) != 1) return rc;
        if (!has_old) {
            const char *parts[2] = {"\x00\x02", after->p};
            Py_ssize_t lens[2] = {2, after->len};
            *event = frame(self, tag == 'I' ? 'c' : 'u', key1, parts, lens, 2);
        } else {
            /* a key change makes two events: the Python paths take it */
            if (self->nkeys && (key0->len != key1->len || memcmp(key0->p, key1->p, key0->len)))
                return 0;
            const char *parts[4] = {"\x02", before->p, "\x02", after->p};
            Py_ssize_t lens[4] = {1, before->len, 1, after->len};
            *event = frame(self, 'u', key1, parts, lens, 4);
        }
    } else if (tag == 'D' && (marker == 'K' || marker == 'O')) {
        if ((rc = put_row(self, data, &pos, end, before, kv)) != 1) return rc;
        if (pos != end) return 0;
        if (self->nkeys && (rc = put_key(self, kv, key0)) != 1) return rc;
        const char *parts[3] = {"\x02", before->p, "\x00"};
        Py_ssize_t lens[3] = {1, before->len, 1};
        *event = frame(self, 'd', key0, parts, lens, 3);
    } else {
        return 0;
    }
    return *event ? 1 : -1;
}

static PyObject *Program_events(Program *self, PyObject *payloads) {
    if (!self->cols) {  /* __init__ failed or was never called */
        PyErr_SetString(PyExc_RuntimeError, "the Program is not built");
        return NULL;
    }
    if (!PyList_Check(payloads)) {
        PyErr_SetString(PyExc_TypeError, "events() takes a list of bytes");
        return NULL;
    }
    Py_ssize_t count = PyList_GET_SIZE(payloads);
    PyObject *list = PyList_New(count);
    Buf before = {0}, after = {0}, key0 = {0}, key1 = {0};
    KeyValue *kv = PyMem_Calloc(self->nkeys ? self->nkeys : 1, sizeof(KeyValue));
    PyObject *result = NULL;
    if (!list || !kv) { if (!kv) PyErr_NoMemory(); goto done; }
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *item = PyList_GET_ITEM(payloads, i), *event = NULL;
        if (!PyBytes_Check(item)) {
            PyErr_SetString(PyExc_TypeError, "events() takes a list of bytes");
            goto done;
        }
        int rc = message_event(self, (const uint8_t *)PyBytes_AS_STRING(item),
                               PyBytes_GET_SIZE(item), &before, &after, &key0, &key1, kv, &event);
        if (rc < 0) goto done;
        if (rc == 0) { result = Py_None; Py_INCREF(result); goto done; }
        PyList_SET_ITEM(list, i, event);
    }
    result = list;
    list = NULL;
done:
    Py_XDECREF(list);
    PyMem_Free(kv);
    PyMem_Free(before.p); PyMem_Free(after.p); PyMem_Free(key0.p); PyMem_Free(key1.p);
    return result;
}

/* -- construction -------------------------------------------------------------------------- */
static void Program_dealloc(Program *self) {
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
    if (ncols < 1 || ncols > MAX_COLS || nkeys > ncols || source_len > 255 || version < 0 ||
        version > 65535) {
        PyErr_SetString(PyExc_ValueError,
                        "1-1600 columns, a source of at most 255 bytes, a version below 65536");
        return -1;
    }
    self->cols = PyMem_Calloc(ncols, sizeof(Col));
    self->keys = PyMem_Calloc(nkeys ? nkeys : 1, sizeof(KeyPart));
    self->prefixes = PyTuple_New(nkeys);
    if (!self->cols || !self->keys || !self->prefixes) { PyErr_NoMemory(); return -1; }
    self->ncols = (int)ncols;
    for (Py_ssize_t i = 0; i < ncols; i++) {
        Col *c = &self->cols[i];
        if (!PyArg_ParseTuple(PyTuple_GET_ITEM(cols, i), "iii", &c->form, &c->uni, &c->key))
            return -1;
        if (c->form < F_INT || c->form > F_TIMESTAMPTZ || c->key >= nkeys) {
            PyErr_SetString(PyExc_ValueError, "an unknown column form or key slot");
            return -1;
        }
    }
    for (Py_ssize_t n = 0; n < nkeys; n++) {
        PyObject *prefix;
        KeyPart *kp = &self->keys[n];
        if (!PyArg_ParseTuple(PyTuple_GET_ITEM(keys, n), "iSi", &kp->col, &prefix, &kp->kind))
            return -1;
        if (kp->col < 0 || kp->col >= ncols || self->cols[kp->col].key < 0 || kp->kind < K_INT ||
            kp->kind > K_DOUBLE) {
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
    return 0;
}

static PyMethodDef Program_methods[] = {
    {"events", (PyCFunction)Program_events, METH_O,
     "events(payloads) -> the wire event of each message, or None where the Python paths "
     "must decide"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject ProgramType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "sluice.capture.postgres._runs.Program",
    .tp_basicsize = sizeof(Program),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "The compiled transcoder of one relation's schema version.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Program_init,
    .tp_dealloc = (destructor)Program_dealloc,
    .tp_methods = Program_methods,
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_runs", "Compiled pgoutput run transcoder (see compiled.py).", -1,
    NULL, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__runs(void) {
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
