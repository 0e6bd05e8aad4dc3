/* Two column kernels of the Arrow paths in one C loop each; the numpy and pyarrow code they
 * replace stays their reference (SLUICE_PURE_PYTHON=1 takes it; tests compare both).
 *
 * concat(n, parts) -> (validity or None, offsets, data): pyarrow's
 *   binary_join_element_wise(*parts, "") of n rows (a row with a null part is null), where
 *   each part is bytes (the same text in every row) or an Arrow string array's
 *   (offset, validity or None, int32 offsets, data) buffers. Raises OverflowError past 2 GiB.
 * varints(buf, pos) -> (values, ends): the zigzag varints (Avro longs) at each int64
 *   position of the uint8 buffer buf, as int64 bytearrays, and the positions after them.
 *   Raises ValueError for a varint longer than ten bytes or running past the buffer.
 * datetimes(values, days, suffix) -> (offsets, data): the quoted ISO texts of int64 values
 *   (days since 1970 when days is true: "YYYY-MM-DD"; else microseconds since 1970:
 *   "YYYY-MM-DDTHH:MM:SS", ".ffffff" where the fraction is not 0, then suffix), as
 *   arrow_json's byte matrices write them; None when a value is outside 0001..9999 (the
 *   caller writes those per value).
 * numbers(values, valid, scale, quoted) -> (offsets, data) or None: int64 values as text,
 *   "-" where negative, then the integer digits (at least one), then "." and scale fraction
 *   digits when scale > 0, quoted if asked: what Arrow's cast of integers to strings and
 *   arrow_json's decimal matrices write. valid: a bool per row (an empty text where false),
 *   or None. None when a value is INT64_MIN (the reference writes it its own way).
 * gather(buf, starts, lengths) -> bytearray: the bytes of every [start, start + length)
 *   range of buf (int64 starts and lengths), concatenated. Raises ValueError for a range
 *   outside buf.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

typedef struct {
    int constant;
    Py_ssize_t offset;
    Py_buffer valid, offsets, data;
} Part;

static void release(Part *parts, Py_ssize_t k) {
    for (Py_ssize_t i = 0; i < k; i++) {
        if (parts[i].valid.obj) PyBuffer_Release(&parts[i].valid);
        if (parts[i].offsets.obj) PyBuffer_Release(&parts[i].offsets);
        if (parts[i].data.obj) PyBuffer_Release(&parts[i].data);
    }
    PyMem_Free(parts);
}

static int get(PyObject *obj, Py_buffer *view) {
    if (obj == Py_None) return 0;
    return PyObject_GetBuffer(obj, view, PyBUF_SIMPLE);
}

/* Texts here are mostly a few bytes: a byte loop beats a call to memcpy for them. */
static inline char *put(char *w, const char *src, Py_ssize_t n) {
    if (n > 16) {
        memcpy(w, src, n);
        return w + n;
    }
    for (Py_ssize_t i = 0; i < n; i++) w[i] = src[i];
    return w + n;
}

static inline int valid_at(const Part *p, Py_ssize_t row) {
    if (!p->valid.obj) return 1;
    Py_ssize_t i = row + p->offset;
    return ((const uint8_t *)p->valid.buf)[i >> 3] >> (i & 7) & 1;
}

static int prepare(PyObject *list, Part *parts, Py_ssize_t k, Py_ssize_t n) {
    for (Py_ssize_t i = 0; i < k; i++) {
        PyObject *item = PyList_GET_ITEM(list, i);
        Part *p = &parts[i];
        if (PyBytes_Check(item)) {
            p->constant = 1;
            if (get(item, &p->data) < 0) return -1;
            continue;
        }
        PyObject *valid, *offsets, *data;
        if (!PyArg_ParseTuple(item, "nOOO", &p->offset, &valid, &offsets, &data)) return -1;
        if (get(valid, &p->valid) < 0 || get(offsets, &p->offsets) < 0 || get(data, &p->data) < 0)
            return -1;
        if (p->offset < 0 || (p->offset + n + 1) * 4 > p->offsets.len
            || (p->valid.obj && (p->offset + n + 7) / 8 > p->valid.len)) {
            PyErr_SetString(PyExc_ValueError, "a part's buffers are shorter than its rows");
            return -1;
        }
        const int32_t *o = p->offsets.buf;
        if (n && (o[p->offset] < 0 || o[p->offset + n] > p->data.len)) {
            PyErr_SetString(PyExc_ValueError, "a part's offsets run past its data");
            return -1;
        }
    }
    return 0;
}

static PyObject *concat(PyObject *self, PyObject *args) {
    (void)self;
    Py_ssize_t n;
    PyObject *list;
    if (!PyArg_ParseTuple(args, "nO!", &n, &PyList_Type, &list)) return NULL;
    Py_ssize_t k = PyList_GET_SIZE(list);
    Part *parts = PyMem_Calloc(k ? k : 1, sizeof(Part));
    if (!parts) return PyErr_NoMemory();
    PyObject *validity = NULL, *offsets = NULL, *data = NULL, *result = NULL;
    if (prepare(list, parts, k, n) < 0) goto done;
    offsets = PyBytes_FromStringAndSize(NULL, (n + 1) * 4);
    validity = PyBytes_FromStringAndSize(NULL, (n + 7) / 8);
    if (!offsets || !validity) goto done;
    int32_t *out = (int32_t *)PyBytes_AS_STRING(offsets);
    uint8_t *bits = (uint8_t *)PyBytes_AS_STRING(validity);
    memset(bits, 0, (n + 7) / 8);
    Py_ssize_t nulls = 0;
    int64_t total = 0;
    out[0] = 0;
    for (Py_ssize_t r = 0; r < n; r++) {  /* each row's length, null where a part is */
        int64_t len = 0;
        int valid = 1;
        for (Py_ssize_t i = 0; i < k && valid; i++) {
            const Part *p = &parts[i];
            if (p->constant) { len += p->data.len; continue; }
            valid = valid_at(p, r);
            const int32_t *o = (const int32_t *)p->offsets.buf + p->offset + r;
            len += o[1] - o[0];
        }
        if (valid) { bits[r >> 3] |= (uint8_t)(1 << (r & 7)); total += len; }
        else nulls++;
        if (total > INT32_MAX) { PyErr_SetString(PyExc_OverflowError, "texts past 2 GiB"); goto done; }
        out[r + 1] = (int32_t)total;
    }
    data = PyBytes_FromStringAndSize(NULL, total);
    if (!data) goto done;
    char *w = PyBytes_AS_STRING(data);
    for (Py_ssize_t r = 0; r < n; r++) {
        if (out[r + 1] == out[r] && !(bits[r >> 3] >> (r & 7) & 1)) continue;
        for (Py_ssize_t i = 0; i < k; i++) {
            const Part *p = &parts[i];
            if (p->constant) {
                w = put(w, p->data.buf, p->data.len);
                continue;
            }
            const int32_t *o = (const int32_t *)p->offsets.buf + p->offset + r;
            w = put(w, (const char *)p->data.buf + o[0], o[1] - o[0]);
        }
    }
    if (nulls) result = Py_BuildValue("(OOO)", validity, offsets, data);
    else result = Py_BuildValue("(OOO)", Py_None, offsets, data);
done:
    Py_XDECREF(validity);
    Py_XDECREF(offsets);
    Py_XDECREF(data);
    release(parts, k);
    return result;
}

static PyObject *varints(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer buf, pos;
    if (!PyArg_ParseTuple(args, "y*y*", &buf, &pos)) return NULL;
    Py_ssize_t n = pos.len / (Py_ssize_t)sizeof(int64_t);
    /* bytearrays: numpy views of them are writable, as the reference's arrays */
    PyObject *values = PyByteArray_FromStringAndSize(NULL, n * 8);
    PyObject *ends = PyByteArray_FromStringAndSize(NULL, n * 8);
    PyObject *result = NULL;
    if (!values || !ends) goto done;
    const uint8_t *b = buf.buf;
    const int64_t *at = pos.buf;
    int64_t *v = (int64_t *)PyByteArray_AS_STRING(values);
    int64_t *e = (int64_t *)PyByteArray_AS_STRING(ends);
    for (Py_ssize_t i = 0; i < n; i++) {
        int64_t p = at[i];
        uint64_t raw = 0;
        int shift = 0;
        for (;;) {
            if (p < 0 || p >= buf.len) {
                PyErr_SetString(PyExc_ValueError, "a varint runs past its buffer");
                goto done;
            }
            uint8_t byte = b[p++];
            raw |= (uint64_t)(byte & 0x7F) << shift;
            if (!(byte & 0x80)) break;
            shift += 7;
            if (shift > 63) {
                PyErr_SetString(PyExc_ValueError, "a varint longer than ten bytes");
                goto done;
            }
        }
        v[i] = (int64_t)(raw >> 1) ^ -(int64_t)(raw & 1);
        e[i] = p;
    }
    result = PyTuple_Pack(2, values, ends);
done:
    Py_XDECREF(values);
    Py_XDECREF(ends);
    PyBuffer_Release(&buf);
    PyBuffer_Release(&pos);
    return result;
}

static PyObject *gather(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer buf, starts, lengths;
    if (!PyArg_ParseTuple(args, "y*y*y*", &buf, &starts, &lengths)) return NULL;
    PyObject *out = NULL;
    Py_ssize_t n = starts.len / (Py_ssize_t)sizeof(int64_t);
    const int64_t *at = starts.buf, *len = lengths.buf;
    int64_t total = 0;
    if (lengths.len != starts.len) {
        PyErr_SetString(PyExc_ValueError, "starts and lengths differ in length");
        goto done;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        if (at[i] < 0 || len[i] < 0 || at[i] > buf.len || len[i] > buf.len - at[i]) {
            PyErr_SetString(PyExc_ValueError, "a range runs past its buffer");
            goto done;
        }
        total += len[i];
    }
    out = PyByteArray_FromStringAndSize(NULL, total);
    if (!out) goto done;
    char *w = PyByteArray_AS_STRING(out);
    for (Py_ssize_t i = 0; i < n; i++) {
        memcpy(w, (const char *)buf.buf + at[i], len[i]);
        w += len[i];
    }
done:
    PyBuffer_Release(&buf);
    PyBuffer_Release(&starts);
    PyBuffer_Release(&lengths);
    return out;
}

/* 0001-01-01 and 9999-12-31 as days since 1970 (arrow_json._MIN_DAY, _MAX_DAY) */
#define MIN_DAY (-719162LL)
#define MAX_DAY 2932896LL

static inline int64_t floor_div(int64_t a, int64_t b) {
    int64_t q = a / b;
    return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}

static inline char *digits(char *w, int64_t v, int width) {
    for (int i = width - 1; i >= 0; i--) { w[i] = (char)('0' + v % 10); v /= 10; }
    return w + width;
}

static inline char *two(char *w, int64_t v) {  /* 0..99 */
    w[0] = (char)('0' + v / 10);
    w[1] = (char)('0' + v % 10);
    return w + 2;
}

/* YYYY-MM-DD of days since 1970 (H. Hinnant's civil_from_days, as arrow_json._ymd). */
static char *ymd(char *w, int64_t days) {
    int64_t z = days + 719468, era = floor_div(z, 146097), doe = z - era * 146097;
    int64_t yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    int64_t doy = doe - (365 * yoe + yoe / 4 - yoe / 100), mp = (5 * doy + 2) / 153;
    int64_t day = doy - (153 * mp + 2) / 5 + 1, month = mp < 10 ? mp + 3 : mp - 9;
    int64_t year = yoe + era * 400 + (month <= 2);
    w = digits(w, year, 4);
    *w++ = '-';
    w = digits(w, month, 2);
    *w++ = '-';
    return digits(w, day, 2);
}

static PyObject *datetimes(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer values, suffix;
    int days;
    if (!PyArg_ParseTuple(args, "y*py*", &values, &days, &suffix)) return NULL;
    Py_ssize_t n = values.len / (Py_ssize_t)sizeof(int64_t);
    Py_ssize_t most = days ? 12 : 29 + suffix.len;  /* quotes included */
    PyObject *offsets = PyBytes_FromStringAndSize(NULL, (n + 1) * 4), *result = NULL;
    PyObject *data = PyBytes_FromStringAndSize(NULL, n * most);
    if (!offsets || !data || n * most > INT32_MAX) {
        if (offsets && data) PyErr_SetString(PyExc_OverflowError, "texts past 2 GiB");
        goto done;
    }
    int32_t *out = (int32_t *)PyBytes_AS_STRING(offsets);
    char *start = PyBytes_AS_STRING(data), *w = start;
    const int64_t *v = values.buf;
    out[0] = 0;
    int64_t last_day = MIN_DAY - 1;  /* the last date's text: rows of a batch share dates */
    char date[10];
    for (Py_ssize_t i = 0; i < n; i++) {
        int64_t day = days ? v[i] : floor_div(v[i], 86400000000LL);
        if (day < MIN_DAY || day > MAX_DAY) { result = Py_None; Py_INCREF(result); goto done; }
        if (day != last_day) { ymd(date, day); last_day = day; }
        *w++ = '"';
        memcpy(w, date, 10);
        w += 10;
        if (!days) {
            int64_t rest = v[i] - day * 86400000000LL;
            int64_t sec = rest / 1000000, frac = rest % 1000000;
            *w++ = 'T';
            w = two(w, sec / 3600);
            *w++ = ':';
            w = two(w, sec / 60 % 60);
            *w++ = ':';
            w = two(w, sec % 60);
            if (frac) { *w++ = '.'; w = digits(w, frac, 6); }
            memcpy(w, suffix.buf, suffix.len);
            w += suffix.len;
        }
        *w++ = '"';
        out[i + 1] = (int32_t)(w - start);
    }
    if (_PyBytes_Resize(&data, w - start) < 0) goto done;
    result = PyTuple_Pack(2, offsets, data);
done:
    Py_XDECREF(offsets);
    Py_XDECREF(data);
    PyBuffer_Release(&values);
    PyBuffer_Release(&suffix);
    return result;
}

static PyObject *numbers(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer values, valid = {0};
    PyObject *valid_obj;
    int scale, quoted;
    if (!PyArg_ParseTuple(args, "y*Oip", &values, &valid_obj, &scale, &quoted)) return NULL;
    PyObject *offsets = NULL, *data = NULL, *result = NULL;
    Py_ssize_t n = values.len / (Py_ssize_t)sizeof(int64_t);
    if (valid_obj != Py_None && PyObject_GetBuffer(valid_obj, &valid, PyBUF_SIMPLE) < 0) goto done;
    if (scale < 0 || scale > 18 || (valid.obj && valid.len < n)) {
        PyErr_SetString(PyExc_ValueError, "bad scale or validity");
        goto done;
    }
    Py_ssize_t most = 21 + 1 + 2 * quoted + scale;  /* sign, 20 digits, "0.", quotes */
    if (n * most > INT32_MAX) { PyErr_SetString(PyExc_OverflowError, "texts past 2 GiB"); goto done; }
    offsets = PyBytes_FromStringAndSize(NULL, (n + 1) * 4);
    data = PyBytes_FromStringAndSize(NULL, n * most);
    if (!offsets || !data) goto done;
    int32_t *out = (int32_t *)PyBytes_AS_STRING(offsets);
    char *start = PyBytes_AS_STRING(data), *w = start;
    const int64_t *v = values.buf;
    const uint8_t *ok = valid.obj ? valid.buf : NULL;
    uint64_t tens = 1;
    for (int i = 0; i < scale; i++) tens *= 10;
    out[0] = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (!ok || ok[i]) {
            if (v[i] == INT64_MIN) { result = Py_None; Py_INCREF(result); goto done; }
            uint64_t m = v[i] < 0 ? (uint64_t)(-v[i]) : (uint64_t)v[i];
            uint64_t whole = m / tens, frac = m % tens;
            char buf[24];
            int k = 24;
            do { buf[--k] = (char)('0' + whole % 10); whole /= 10; } while (whole);
            if (quoted) *w++ = '"';
            if (v[i] < 0) *w++ = '-';
            memcpy(w, buf + k, 24 - k);
            w += 24 - k;
            if (scale) {
                *w++ = '.';
                for (int d = scale - 1; d >= 0; d--) { w[d] = (char)('0' + frac % 10); frac /= 10; }
                w += scale;
            }
            if (quoted) *w++ = '"';
        }
        out[i + 1] = (int32_t)(w - start);
    }
    if (_PyBytes_Resize(&data, w - start) < 0) goto done;
    result = PyTuple_Pack(2, offsets, data);
done:
    Py_XDECREF(offsets);
    Py_XDECREF(data);
    PyBuffer_Release(&values);
    if (valid.obj) PyBuffer_Release(&valid);
    return result;
}

static PyMethodDef methods[] = {
    {"concat", concat, METH_VARARGS, "concat(n, parts) -> (validity, offsets, data)"},
    {"varints", varints, METH_VARARGS, "varints(buf, pos) -> (values, ends)"},
    {"datetimes", datetimes, METH_VARARGS, "datetimes(values, days, suffix) -> (offsets, data)"},
    {"numbers", numbers, METH_VARARGS, "numbers(values, valid, scale, quoted) -> texts"},
    {"gather", gather, METH_VARARGS, "gather(buf, starts, lengths) -> the ranges' bytes"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_kernels", "Column kernels of the Arrow paths (see arrow_json.py).",
    -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__kernels(void) { return PyModule_Create(&module); }
