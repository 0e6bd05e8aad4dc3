/* Key text of the kinds that are not integers or text: a key column's canonical JSON as
 * schemas/avro.key_formatter writes it (dates, timestamps, times, floats, bytes). Needs buf.h
 * and dates.h; each writer reserves its own room. */
#ifndef SLUICE_KEYS_H
#define SLUICE_KEYS_H
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <Python.h>

static inline int put_text(Buf *b, const char *s, Py_ssize_t n) {
    if (buf_reserve(b, n) < 0) return -1;
    memcpy(b->p + b->len, s, n);
    b->len += n;
    return 0;
}

/* `"YYYY-MM-DD` (no closing quote) of days since 1970, as date.isoformat(); years 1-9999,
 * else ValueError (Python's date arithmetic raises OverflowError there). */
static inline int put_iso_date(Buf *b, int64_t days) {
    int64_t y, m, d;
    civil_from_days(days, &y, &m, &d);
    if (y < 1 || y > 9999) {
        PyErr_SetString(PyExc_ValueError, "a date beyond the years 1-9999");
        return -1;
    }
    if (buf_reserve(b, 16) < 0) return -1;
    b->len += sprintf(b->p + b->len, "\"%04d-%02d-%02d", (int)y, (int)m, (int)d);
    return 0;
}

/* date_text(days) as JSON. */
static inline int put_date_key(Buf *b, int64_t days) {
    if (put_iso_date(b, days) < 0 || buf_reserve(b, 1) < 0) return -1;
    put_byte(b, '"');
    return 0;
}

/* datetime_text(micros) (timestamp_text with `utc`) as JSON. */
static inline int put_micros_key(Buf *b, int64_t micros, int utc) {
    const int64_t day = 86400000000LL;
    int64_t days = micros / day, rest = micros % day;
    if (rest < 0) { rest += day; days--; }
    if (put_iso_date(b, days) < 0 || buf_reserve(b, 32) < 0) return -1;
    int64_t secs = rest / 1000000, frac = rest % 1000000;
    b->len += sprintf(b->p + b->len, "T%02d:%02d:%02d", (int)(secs / 3600), (int)(secs / 60 % 60),
                      (int)(secs % 60));
    if (frac) b->len += sprintf(b->p + b->len, ".%06d", (int)frac);
    if (utc) put_byte(b, 'Z');
    put_byte(b, '"');
    return 0;
}

/* time_text(micros) as JSON: [-]HH:MM:SS[.ffffff], hours past 24 as they are. */
static inline int put_time_key(Buf *b, int64_t micros) {
    if (buf_reserve(b, 48) < 0) return -1;
    uint64_t a = micros < 0 ? (uint64_t)0 - (uint64_t)micros : (uint64_t)micros;
    uint64_t secs = a / 1000000, frac = a % 1000000;
    b->len += sprintf(b->p + b->len, "\"%s%02llu:%02llu:%02llu", micros < 0 ? "-" : "",
                      (unsigned long long)(secs / 3600), (unsigned long long)(secs / 60 % 60),
                      (unsigned long long)(secs % 60));
    if (frac) b->len += sprintf(b->p + b->len, ".%06llu", (unsigned long long)frac);
    put_byte(b, '"');
    return 0;
}

/* json.dumps(float_json(v)): repr(v), or "NaN" / "Infinity" / "-Infinity" as strings. */
static inline int put_double_key(Buf *b, double v) {
    if (isnan(v)) return put_text(b, "\"NaN\"", 5);
    if (isinf(v)) return v > 0 ? put_text(b, "\"Infinity\"", 10) : put_text(b, "\"-Infinity\"", 11);
    char *s = PyOS_double_to_string(v, 'r', 0, Py_DTSF_ADD_DOT_0, NULL);
    if (!s) return -1;
    int rc = put_text(b, s, (Py_ssize_t)strlen(s));
    PyMem_Free(s);
    return rc;
}

/* base64.b64encode(raw) as JSON. */
static inline int put_base64_key(Buf *b, const uint8_t *s, Py_ssize_t n) {
    static const char abc[] =
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    if (buf_reserve(b, (n + 2) / 3 * 4 + 2) < 0) return -1;
    char *w = b->p + b->len;
    *w++ = '"';
    Py_ssize_t i = 0;
    for (; i + 2 < n; i += 3) {
        uint32_t v = (uint32_t)s[i] << 16 | (uint32_t)s[i + 1] << 8 | s[i + 2];
        *w++ = abc[v >> 18];
        *w++ = abc[v >> 12 & 63];
        *w++ = abc[v >> 6 & 63];
        *w++ = abc[v & 63];
    }
    if (i < n) {
        uint32_t v = (uint32_t)s[i] << 16 | (i + 1 < n ? (uint32_t)s[i + 1] << 8 : 0);
        *w++ = abc[v >> 18];
        *w++ = abc[v >> 12 & 63];
        *w++ = i + 1 < n ? abc[v >> 6 & 63] : '=';
        *w++ = '=';
    }
    *w++ = '"';
    b->len = w - b->p;
    return 0;
}
#endif
