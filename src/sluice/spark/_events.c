/* The events of a run of window records in one C loop: the compiled twin of logcols.py's
 * _offsets, which stays its reference (SLUICE_PURE_PYTHON=1 takes it; tests compare both).
 * Python follows the chain of event lengths at ~70 ns an event; this loop at ~1 ns.
 *
 * scan(buf, windows) -> (offsets, headers, name_index, names)
 *   buf: the records joined; windows: int64 triples (first event's offset, events, end)
 *   offsets: int64 per event, its record's offset in buf; headers: each event's 12-byte
 *   header (wire.EVENT_HEADER_FIELDS) copied out, in event order; name_index: int32 per
 *   event, its source name's index in names (the distinct names in order of appearance:
 *   what pyarrow's dictionary_encode gives).
 * Raises ValueError naming the window's index when an event runs past its window.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define HEADER_SIZE 12
#define SRC_AT 9  /* the header's byte holding the source name's length */

/* The index of the name at p (len bytes) in names, appended if new; -1 on error. */
static Py_ssize_t intern(PyObject *names, const uint8_t *p, Py_ssize_t len) {
    Py_ssize_t k = PyList_GET_SIZE(names);
    for (Py_ssize_t i = 0; i < k; i++) {
        PyObject *name = PyList_GET_ITEM(names, i);
        if (PyBytes_GET_SIZE(name) == len && !memcmp(PyBytes_AS_STRING(name), p, len)) return i;
    }
    PyObject *name = PyBytes_FromStringAndSize((const char *)p, len);
    if (!name || PyList_Append(names, name) < 0) { Py_XDECREF(name); return -1; }
    Py_DECREF(name);
    return k;
}

static PyObject *scan(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer buf, win;
    if (!PyArg_ParseTuple(args, "y*y*", &buf, &win)) return NULL;
    PyObject *offsets = NULL, *headers = NULL, *index = NULL, *names = NULL, *result = NULL;
    const uint8_t *data = buf.buf;
    const int64_t *w = win.buf;
    Py_ssize_t k = win.len / (3 * (Py_ssize_t)sizeof(int64_t)), n = 0;
    for (Py_ssize_t i = 0; i < k; i++) {
        if (w[3 * i + 1] < 0) { PyErr_SetString(PyExc_ValueError, "negative event count"); goto done; }
        n += w[3 * i + 1];
    }
    offsets = PyBytes_FromStringAndSize(NULL, n * (Py_ssize_t)sizeof(int64_t));
    headers = PyBytes_FromStringAndSize(NULL, n * HEADER_SIZE);
    index = PyBytes_FromStringAndSize(NULL, n * (Py_ssize_t)sizeof(int32_t));
    names = PyList_New(0);
    if (!offsets || !headers || !index || !names) goto done;
    int64_t *out = (int64_t *)PyBytes_AS_STRING(offsets);
    uint8_t *head = (uint8_t *)PyBytes_AS_STRING(headers);
    int32_t *which = (int32_t *)PyBytes_AS_STRING(index);
    Py_ssize_t e = 0, last = -1;  /* the last name's index: runs of one table are usual */
    for (Py_ssize_t i = 0; i < k; i++) {
        int64_t pos = w[3 * i], count = w[3 * i + 1], end = w[3 * i + 2];
        if (end > buf.len) end = buf.len;
        for (int64_t j = 0; j < count; j++) {
            if (pos < 0 || pos + HEADER_SIZE > end) {
                PyErr_Format(PyExc_ValueError, "window %zd: an event runs past its window", i);
                goto done;
            }
            uint32_t size;
            memcpy(&size, data + pos, 4);  /* little-endian, as the wire (x86, ARM) */
            Py_ssize_t len = data[pos + SRC_AT];
            if (pos + HEADER_SIZE + len > end) {
                PyErr_Format(PyExc_ValueError, "window %zd: an event runs past its window", i);
                goto done;
            }
            const uint8_t *name = data + pos + HEADER_SIZE;
            if (last < 0 || PyBytes_GET_SIZE(PyList_GET_ITEM(names, last)) != len
                || memcmp(PyBytes_AS_STRING(PyList_GET_ITEM(names, last)), name, len)) {
                last = intern(names, name, len);
                if (last < 0) goto done;
            }
            out[e] = pos;
            which[e] = (int32_t)last;
            memcpy(head + e * HEADER_SIZE, data + pos, HEADER_SIZE);
            e++;
            pos += size;
        }
        if (pos > end) {
            PyErr_Format(PyExc_ValueError, "window %zd: an event runs past its window", i);
            goto done;
        }
    }
    result = PyTuple_Pack(4, offsets, headers, index, names);
done:
    Py_XDECREF(offsets);
    Py_XDECREF(headers);
    Py_XDECREF(index);
    Py_XDECREF(names);
    PyBuffer_Release(&buf);
    PyBuffer_Release(&win);
    return result;
}

static PyMethodDef methods[] = {
    {"scan", scan, METH_VARARGS,
     "scan(buf, windows) -> (offsets, headers, name_index, names) of the windows' events"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_events", "Event offsets of window records (see logcols.py).",
    -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__events(void) { return PyModule_Create(&module); }
