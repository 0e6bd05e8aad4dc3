/* A SQLite page read straight into columns (the query source's page path, sqlite_pages.py).
 *
 * Python's sqlite3 module makes a tuple and an object per value, which alone costs more than
 * a plain SELECT's whole read; here each column of a page goes into Arrow buffers (int64,
 * float64, UTF-8 text or bytes, with a validity bitmap) and never becomes Python objects.
 * A column whose values are of more than one storage class (SQLite's dynamic typing) comes
 * back as the list of exactly the values sqlite3 would give, so the column readers see what
 * they see today. A page it cannot give exactly (text that is not UTF-8, a bound value of
 * another type, a column over 2 GiB) is refused with the reason: the dialect then reads it
 * through sqlite3.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <sqlite3.h>
#include <stdint.h>
#include <string.h>

enum { C_NONE = 0, C_INT = 1, C_FLOAT = 2, C_TEXT = 3, C_BLOB = 4, C_MIXED = 5 };

#include "../../_native/buf.h"
#include "../../_native/text.h"

typedef struct {
    int cls;
    Py_ssize_t nulls;
    Buf valid, values, data;  /* values: int64/double, or int32 offsets of text/bytes */
    PyObject *list;           /* C_MIXED: the values as sqlite3 gives them */
} Col;

#define CACHED 4  /* a poll alternates a few queries: keep each prepared */

typedef struct {
    PyObject_HEAD
    sqlite3 *db;
    sqlite3_stmt *stmts[CACHED];  /* most recently used first */
    PyObject *sqls[CACHED];       /* their texts */
} Reader;

/* Value `row` of a column not yet mixed, as sqlite3 would give it. */
static PyObject *value_at(Col *c, Py_ssize_t row) {
    if (!(c->valid.p[row >> 3] >> (row & 7) & 1)) Py_RETURN_NONE;
    switch (c->cls) {
    case C_INT: return PyLong_FromLongLong(((int64_t *)c->values.p)[row]);
    case C_FLOAT: return PyFloat_FromDouble(((double *)c->values.p)[row]);
    default: {
        int32_t *off = (int32_t *)c->values.p;
        const char *s = c->data.p + off[row];
        Py_ssize_t n = off[row + 1] - off[row];
        return c->cls == C_TEXT ? PyUnicode_DecodeUTF8(s, n, "strict")
                                : PyBytes_FromStringAndSize(s, n);
    }
    }
}

/* The column's values so far as a list: it met a second storage class at row `rows`. */
static int to_list(Col *c, Py_ssize_t rows) {
    c->list = PyList_New(0);
    if (!c->list) return -1;
    for (Py_ssize_t r = 0; r < rows; r++) {
        PyObject *v = c->cls == C_NONE ? Py_NewRef(Py_None) : value_at(c, r);
        if (!v || PyList_Append(c->list, v) < 0) { Py_XDECREF(v); return -1; }
        Py_DECREF(v);
    }
    c->cls = C_MIXED;
    return 0;
}

/* Append the current row's value of column i; 1: text that is not UTF-8, 2: a column of text
 * or bytes over 2 GiB (this page cannot be read here). */
static int append(Col *c, sqlite3_stmt *st, int i, Py_ssize_t row) {
    int type = sqlite3_column_type(st, i);
    int cls = type == SQLITE_INTEGER ? C_INT : type == SQLITE_FLOAT ? C_FLOAT
              : type == SQLITE_TEXT ? C_TEXT : type == SQLITE_BLOB ? C_BLOB : C_NONE;
    if (cls == C_TEXT) {
        const unsigned char *s = sqlite3_column_text(st, i);
        if (!utf8_ok(s, sqlite3_column_bytes(st, i))) return 1;
    }
    if (c->cls != C_MIXED && cls != C_NONE && c->cls != C_NONE && cls != c->cls)
        if (to_list(c, row) < 0) return -1;
    if (c->cls == C_MIXED) {
        PyObject *v;
        switch (cls) {
        case C_INT: v = PyLong_FromLongLong(sqlite3_column_int64(st, i)); break;
        case C_FLOAT: v = PyFloat_FromDouble(sqlite3_column_double(st, i)); break;
        case C_TEXT:
            v = PyUnicode_DecodeUTF8((const char *)sqlite3_column_text(st, i),
                                     sqlite3_column_bytes(st, i), "strict");
            break;
        case C_BLOB:
            v = PyBytes_FromStringAndSize(sqlite3_column_blob(st, i), sqlite3_column_bytes(st, i));
            break;
        default: v = Py_NewRef(Py_None);
        }
        if (!v) return -1;
        int rc = PyList_Append(c->list, v);
        Py_DECREF(v);
        return rc;
    }
    if (c->cls == C_NONE && cls != C_NONE) {
        /* the first value: the nulls before it take zeroed slots of this class */
        c->cls = cls;
        Py_ssize_t width = cls == C_INT || cls == C_FLOAT ? 8 : 4;
        Py_ssize_t slots = (cls == C_TEXT || cls == C_BLOB) ? row + 1 : row;
        if (buf_reserve(&c->values, slots * width) < 0) return -1;
        memset(c->values.p, 0, slots * width);
        c->values.len = slots * width;
    }
    if (buf_reserve(&c->valid, 1) < 0) return -1;
    if ((row & 7) == 0) c->valid.p[c->valid.len++] = 0;
    if (cls != C_NONE) c->valid.p[row >> 3] |= (char)(1 << (row & 7));
    else c->nulls++;
    if (c->cls == C_NONE) return 0;  /* only nulls so far */
    if (c->cls == C_INT || c->cls == C_FLOAT) {
        if (buf_reserve(&c->values, 8) < 0) return -1;
        if (c->cls == C_INT) {
            int64_t v = cls == C_NONE ? 0 : sqlite3_column_int64(st, i);
            memcpy(c->values.p + c->values.len, &v, 8);
        } else {
            double v = cls == C_NONE ? 0 : sqlite3_column_double(st, i);
            memcpy(c->values.p + c->values.len, &v, 8);
        }
        c->values.len += 8;
        return 0;
    }
    Py_ssize_t n = 0;
    if (cls != C_NONE) {
        const void *s = cls == C_TEXT ? (const void *)sqlite3_column_text(st, i)
                                      : sqlite3_column_blob(st, i);
        n = sqlite3_column_bytes(st, i);
        if (c->data.len + n > INT32_MAX) return 2;
        if (buf_reserve(&c->data, n) < 0) return -1;
        if (n) memcpy(c->data.p + c->data.len, s, n);
        c->data.len += n;
    }
    if (buf_reserve(&c->values, 4) < 0) return -1;
    int32_t end = (int32_t)c->data.len;
    memcpy(c->values.p + c->values.len, &end, 4);
    c->values.len += 4;
    return 0;
}

static PyObject *column_result(Col *c, Py_ssize_t rows) {
    if (c->cls == C_MIXED) return Py_BuildValue("(iO)", C_MIXED, c->list);
    if (c->cls == C_NONE) return Py_BuildValue("(in)", C_NONE, rows);
    PyObject *valid = c->nulls ? PyBytes_FromStringAndSize(c->valid.p, c->valid.len)
                               : Py_NewRef(Py_None);
    if (!valid) return NULL;
    PyObject *out;
    if (c->cls == C_INT || c->cls == C_FLOAT)
        out = Py_BuildValue("(innNy#)", c->cls, rows, c->nulls, valid, c->values.p, c->values.len);
    else
        out = Py_BuildValue("(innNy#y#)", c->cls, rows, c->nulls, valid, c->values.p,
                            c->values.len, c->data.p ? c->data.p : "", c->data.len);
    return out;
}

static int bind(sqlite3_stmt *st, PyObject *args) {
    Py_ssize_t n = PyTuple_GET_SIZE(args);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *v = PyTuple_GET_ITEM(args, i);
        int rc, at = (int)i + 1;
        if (v == Py_None) rc = sqlite3_bind_null(st, at);
        else if (PyLong_CheckExact(v)) {
            int overflow;
            long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
            if (overflow) return 1;
            rc = sqlite3_bind_int64(st, at, x);
        } else if (PyFloat_CheckExact(v)) rc = sqlite3_bind_double(st, at, PyFloat_AS_DOUBLE(v));
        else if (PyUnicode_CheckExact(v)) {
            Py_ssize_t len;
            const char *s = PyUnicode_AsUTF8AndSize(v, &len);
            if (!s) { PyErr_Clear(); return 1; }
            rc = sqlite3_bind_text64(st, at, s, len, SQLITE_TRANSIENT, SQLITE_UTF8);
        } else if (PyBytes_CheckExact(v))
            rc = sqlite3_bind_blob64(st, at, PyBytes_AS_STRING(v), PyBytes_GET_SIZE(v),
                                     SQLITE_TRANSIENT);
        else return 1;
        if (rc != SQLITE_OK) return 1;
    }
    return 0;
}

static PyObject *sqlite_error(Reader *self) {
    PyErr_Format(PyExc_OSError, "sqlite: %s", sqlite3_errmsg(self->db));
    return NULL;
}

/* The statement of `sql`, prepared once and kept, now first in the cache; NULL on error. */
static sqlite3_stmt *prepare(Reader *self, PyObject *sql) {
    int hit = -1;
    for (int i = 0; i < CACHED && self->stmts[i]; i++)
        if (PyUnicode_Compare(self->sqls[i], sql) == 0) { hit = i; break; }
    sqlite3_stmt *st;
    PyObject *text;
    if (hit >= 0) {
        st = self->stmts[hit];
        text = self->sqls[hit];
        sqlite3_clear_bindings(st);
    } else {
        Py_ssize_t len;
        const char *utf8 = PyUnicode_AsUTF8AndSize(sql, &len);
        if (!utf8) return NULL;
        if (sqlite3_prepare_v2(self->db, utf8, (int)len, &st, NULL) != SQLITE_OK) {
            sqlite_error(self);
            return NULL;
        }
        hit = CACHED - 1;  /* the least recently used goes */
        sqlite3_finalize(self->stmts[hit]);
        Py_XDECREF(self->sqls[hit]);
        text = Py_NewRef(sql);
    }
    for (int i = hit; i > 0; i--) {
        self->stmts[i] = self->stmts[i - 1];
        self->sqls[i] = self->sqls[i - 1];
    }
    self->stmts[0] = st;
    self->sqls[0] = text;
    return st;
}

static PyObject *Reader_page(Reader *self, PyObject *args) {
    PyObject *sql, *params;
    if (!PyArg_ParseTuple(args, "UO!", &sql, &PyTuple_Type, &params)) return NULL;
    if (!self->db) return PyErr_Format(PyExc_ValueError, "the reader is closed");
    sqlite3_stmt *st = prepare(self, sql);
    if (!st) return NULL;
    if (bind(st, params)) {
        sqlite3_reset(st);
        return PyUnicode_FromString("a bound value of a type this reader does not bind");
    }
    int ncols = sqlite3_column_count(st);
    Col *cols = PyMem_Calloc(ncols ? ncols : 1, sizeof(Col));
    if (!cols) return PyErr_NoMemory();
    PyObject *result = NULL;
    Py_ssize_t rows = 0;
    int rc, refuse = 0;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        for (int i = 0; i < ncols && !refuse; i++) {
            int r = append(&cols[i], st, i, rows);
            if (r < 0) goto done;
            refuse = r;
        }
        if (refuse) break;
        rows++;
    }
    if (refuse) {
        result = PyUnicode_FromString(refuse == 1 ? "text that is not UTF-8"
                                                  : "a column of text or bytes over 2 GiB");
        goto done;
    }
    if (rc != SQLITE_DONE) { sqlite_error(self); goto done; }
    result = PyList_New(ncols);
    if (!result) goto done;
    for (int i = 0; i < ncols; i++) {
        PyObject *col = column_result(&cols[i], rows);
        if (!col) { Py_CLEAR(result); goto done; }
        PyList_SET_ITEM(result, i, col);
    }
done:
    sqlite3_reset(st);
    for (int i = 0; i < ncols; i++) {
        PyMem_Free(cols[i].valid.p);
        PyMem_Free(cols[i].values.p);
        PyMem_Free(cols[i].data.p);
        Py_XDECREF(cols[i].list);
    }
    PyMem_Free(cols);
    return result;
}

static PyObject *Reader_close(Reader *self, PyObject *unused) {
    for (int i = 0; i < CACHED; i++) {
        sqlite3_finalize(self->stmts[i]);
        self->stmts[i] = NULL;
        Py_CLEAR(self->sqls[i]);
    }
    if (self->db) sqlite3_close(self->db);
    self->db = NULL;
    Py_RETURN_NONE;
}

static int Reader_init(Reader *self, PyObject *args, PyObject *kwds) {
    const char *uri;
    int timeout_ms;
    static char *names[] = {"uri", "timeout_ms", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "si", names, &uri, &timeout_ms)) return -1;
    if (self->db) {
        PyErr_SetString(PyExc_RuntimeError, "the reader is open already");
        return -1;
    }
    /* No mutex of SQLite's own (it takes one in every call, each value read included: a
     * quarter of a page's read): the reader runs only while it holds the GIL, one call at a
     * time. */
    int rc = sqlite3_open_v2(uri, &self->db,
                             SQLITE_OPEN_READONLY | SQLITE_OPEN_URI | SQLITE_OPEN_NOMUTEX, NULL);
    if (rc != SQLITE_OK) {
        PyErr_Format(PyExc_OSError, "sqlite: %s",
                     self->db ? sqlite3_errmsg(self->db) : sqlite3_errstr(rc));
        sqlite3_close(self->db);
        self->db = NULL;
        return -1;
    }
    sqlite3_busy_timeout(self->db, timeout_ms);
    /* Read through a memory map: a writer's commit then costs this connection no re-read of
     * its page cache (each poll follows writes), only the pages that changed. */
    sqlite3_exec(self->db, "PRAGMA mmap_size=1073741824", NULL, NULL, NULL);
    return 0;
}

static void Reader_dealloc(Reader *self) {
    Reader_close(self, NULL);
    Py_DECREF(Py_None);  /* Reader_close returned a new reference */
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMethodDef Reader_methods[] = {
    {"page", (PyCFunction)Reader_page, METH_VARARGS,
     "page(sql, args) -> one entry per result column, or why not (read it through sqlite3)"},
    {"close", (PyCFunction)Reader_close, METH_NOARGS, "close the connection"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject ReaderType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "sluice.capture.query._sqlite_pages.Reader",
    .tp_basicsize = sizeof(Reader),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A read-only SQLite connection that reads pages into columns.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Reader_init,
    .tp_dealloc = (destructor)Reader_dealloc,
    .tp_methods = Reader_methods,
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_sqlite_pages", "SQLite pages into columns (see sqlite_pages.py).",
    -1, NULL, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__sqlite_pages(void) {
    if (PyType_Ready(&ReaderType) < 0) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (!m) return NULL;
    Py_INCREF(&ReaderType);
    if (PyModule_AddObject(m, "Reader", (PyObject *)&ReaderType) < 0) {
        Py_DECREF(&ReaderType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
