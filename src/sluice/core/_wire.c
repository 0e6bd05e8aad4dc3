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

static PyMethodDef methods[] = {
    {"keep", keep, METH_VARARGS, "keep(window, sources, index, count) -> kept events"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_wire", "A relay filter's kept events (see wire.py).",
    -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__wire(void) { return PyModule_Create(&module); }
