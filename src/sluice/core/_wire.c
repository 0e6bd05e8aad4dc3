/* A window's events kept by a relay's filter, in one C loop: the compiled twin of
 * wire.filter_window's loop over event headers, which stays its reference
 * (SLUICE_PURE_PYTHON=1 takes it; tests compare both). A key partition's client is served
 * ~30x cheaper: the Python loop cost the relay ~0.45 s of CPU per 1M events a partition.
 *
 * keep(window, sources, index, count) -> None | True | (body, kept)
 *   sources: a frozenset of encoded source names, or None; count 0: no key partition.
 *   None: no event kept; True: every event kept (the window as it is); else the kept
 *   events' records concatenated and how many. Raises ValueError for an event that runs
 *   past the window (the caller's Python loop then says what is wrong).
 *
 * spans(window) -> (tables, starts, ops, order, truncate): wire.event_spans's fields, its
 *   tables as (encoded source, version); the twin of its Python loop (~0.2-0.5 us an
 *   event, a tenth of a replica sink's CPU on 1,000-row windows: issue 40; ~20 ns here).
 *   ValueError as keep's.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define WINDOW_HEADER_SIZE 40
#define HEADER_SIZE 12
#define N_EVENTS_AT 32
#define TRUNCATE 't'

static PyObject *keep(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer win;
    PyObject *sources, *result = NULL, *name = NULL;
    unsigned long long index, count;
    if (!PyArg_ParseTuple(args, "y*OKK", &win, &sources, &index, &count)) return NULL;
    const uint8_t *w = win.buf;
    char *body = NULL;
    if (win.len < WINDOW_HEADER_SIZE) goto bad;
    uint32_t n;
    memcpy(&n, w + N_EVENTS_AT, 4);
    body = PyMem_Malloc(win.len ? win.len : 1);
    if (!body) { PyErr_NoMemory(); goto done; }
    Py_ssize_t pos = WINDOW_HEADER_SIZE, used = 0, kept = 0;
    int last = -1;  /* the last source name's verdict, while names repeat */
    const uint8_t *last_name = NULL;
    Py_ssize_t last_len = -1;
    for (uint32_t i = 0; i < n; i++) {
        if (pos + HEADER_SIZE > win.len) goto bad;
        uint32_t size, hash;
        memcpy(&size, w + pos, 4);
        memcpy(&hash, w + pos + 4, 4);
        uint8_t op = w[pos + 8], len = w[pos + 9];
        if (size < HEADER_SIZE || pos + (Py_ssize_t)size > win.len) goto bad;
        int ok = !count || op == TRUNCATE || hash % count == index;
        if (ok && sources != Py_None) {
            if (pos + HEADER_SIZE + len > win.len) goto bad;
            const uint8_t *at = w + pos + HEADER_SIZE;
            if (!(last_len == len && !memcmp(last_name, at, len))) {
                name = PyBytes_FromStringAndSize((const char *)at, len);
                if (!name) goto done;
                last = PySet_Contains(sources, name);
                Py_CLEAR(name);
                if (last < 0) goto done;
                last_name = at;
                last_len = len;
            }
            ok = last;
        }
        if (ok) {
            memcpy(body + used, w + pos, size);
            used += size;
            kept++;
        }
        pos += size;
    }
    if (!kept) {
        result = Py_None;
        Py_INCREF(result);
    } else if (kept == (Py_ssize_t)n) {  /* one run over every event: the window itself */
        result = Py_True;
        Py_INCREF(result);
    } else {
        result = Py_BuildValue("(y#n)", body, used, kept);
    }
    goto done;
bad:
    PyErr_SetString(PyExc_ValueError, "an event runs past its window");
done:
    PyMem_Free(body);
    Py_XDECREF(name);
    PyBuffer_Release(&win);
    return result;
}

#define MAX_TABLES 4096  /* more (source, version)s in one window: the Python loop */

typedef struct {
    const uint8_t *name;
    uint8_t len;
    uint16_t version;
} table_key;

static PyObject *spans(PyObject *self, PyObject *arg) {
    (void)self;
    Py_buffer win;
    if (PyObject_GetBuffer(arg, &win, PyBUF_SIMPLE) < 0) return NULL;
    const uint8_t *w = win.buf;
    PyObject *tables = NULL, *starts = NULL, *ops = NULL, *order = NULL, *result = NULL;
    table_key *keys = NULL;
    if (win.len < WINDOW_HEADER_SIZE) goto bad;
    uint32_t n;
    memcpy(&n, w + N_EVENTS_AT, 4);
    tables = PyList_New(0);
    starts = PyList_New(0);
    ops = PyList_New(0);
    order = PyList_New(0);
    keys = PyMem_Malloc(sizeof(table_key) * MAX_TABLES);
    if (!tables || !starts || !ops || !order) goto done;
    if (!keys) { PyErr_NoMemory(); goto done; }
    Py_ssize_t pos = WINDOW_HEADER_SIZE, count = 0, number = -1;
    int truncate = 0;
    PyObject *my_starts = NULL, *my_ops = NULL;  /* borrowed: the current table's lists */
    for (uint32_t i = 0; i < n; i++) {
        if (pos + HEADER_SIZE > win.len) goto bad;
        uint32_t size;
        uint16_t version;
        memcpy(&size, w + pos, 4);
        uint8_t op = w[pos + 8], len = w[pos + 9];
        memcpy(&version, w + pos + 10, 2);
        if (size < HEADER_SIZE + (uint32_t)len || pos + (Py_ssize_t)size > win.len) goto bad;
        const uint8_t *name = w + pos + HEADER_SIZE;
        if (!(number >= 0 && keys[number].version == version && keys[number].len == len &&
              !memcmp(keys[number].name, name, len))) {
            number = -1;
            for (Py_ssize_t t = 0; t < count; t++) {
                if (keys[t].version == version && keys[t].len == len &&
                    !memcmp(keys[t].name, name, len)) {
                    number = t;
                    break;
                }
            }
            if (number < 0) {
                if (count == MAX_TABLES) goto bad;
                keys[count] = (table_key){name, len, version};
                PyObject *key = Py_BuildValue("(y#i)", (const char *)name, (Py_ssize_t)len,
                                              (int)version);
                PyObject *s = PyList_New(0), *o = PyList_New(0);
                int failed = !key || !s || !o || PyList_Append(tables, key) < 0 ||
                             PyList_Append(starts, s) < 0 || PyList_Append(ops, o) < 0;
                Py_XDECREF(key);
                Py_XDECREF(s);
                Py_XDECREF(o);
                if (failed) goto done;
                number = count++;
                if (number == 1) {  /* a second table: from now on, say whose each event is */
                    Py_ssize_t before = PyList_GET_SIZE(PyList_GET_ITEM(starts, 0));
                    PyObject *zero = PyLong_FromLong(0);
                    for (Py_ssize_t k = 0; k < before; k++) {
                        if (PyList_Append(order, zero) < 0) { Py_DECREF(zero); goto done; }
                    }
                    Py_DECREF(zero);
                }
            }
            my_starts = PyList_GET_ITEM(starts, number);
            my_ops = PyList_GET_ITEM(ops, number);
        }
        truncate = truncate || op == TRUNCATE;
        PyObject *start = PyLong_FromSsize_t(pos + HEADER_SIZE + len);
        PyObject *letter = PyUnicode_FromOrdinal(op);
        int failed = !start || !letter || PyList_Append(my_starts, start) < 0 ||
                     PyList_Append(my_ops, letter) < 0;
        Py_XDECREF(start);
        Py_XDECREF(letter);
        if (failed) goto done;
        if (count > 1) {
            PyObject *whose = PyLong_FromSsize_t(number);
            failed = !whose || PyList_Append(order, whose) < 0;
            Py_XDECREF(whose);
            if (failed) goto done;
        }
        pos += size;
    }
    result = Py_BuildValue("(OOOON)", tables, starts, ops, order, PyBool_FromLong(truncate));
    goto done;
bad:
    PyErr_SetString(PyExc_ValueError, "an event runs past its window");
done:
    PyMem_Free(keys);
    Py_XDECREF(tables);
    Py_XDECREF(starts);
    Py_XDECREF(ops);
    Py_XDECREF(order);
    PyBuffer_Release(&win);
    return result;
}

static PyMethodDef methods[] = {
    {"keep", keep, METH_VARARGS, "keep(window, sources, index, count) -> kept events"},
    {"spans", spans, METH_O, "spans(window) -> (tables, starts, ops, order, truncate)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_wire",
    "A relay filter's kept events and a window's spans (see wire.py).",
    -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__wire(void) { return PyModule_Create(&module); }
