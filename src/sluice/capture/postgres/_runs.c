/* pgoutput change messages -> Sluice wire events, a whole run of one relation per call.
 *
 * The compiled twin of the generated row transcoder (transcode.py) and of the numpy run path
 * (runs.py), which stay the reference: the same bytes (tests compare them on every kind).
 * compiled.py describes each column to Program(): every kind types.column_kind gives has a
 * form here (issue 40), each read as its Python converter reads it. It reads only the
 * canonical text forms the server sends; anything else (a text Python's parsers would take
 * in another spelling, a BC date, an unchanged TOASTed value, a NULL where the schema has
 * none, a key change) makes events() return None, and the caller transcodes the run by the
 * Python paths, which decide and name a bad column.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

/* Column forms: compiled.py numbers them alike. F_FLOAT is `real` (float4), F_BYTES `bytea`,
 * F_ARRAY_* an array (JSON text, types._array_of) by how its elements are read. */
enum {
    F_INT = 1, F_DOUBLE, F_BOOL, F_TEXT, F_DATE, F_DATETIME, F_TIMESTAMPTZ, F_FLOAT, F_TIME,
    F_BYTES, F_ARRAY_INT, F_ARRAY_DOUBLE, F_ARRAY_BOOL, F_ARRAY_TEXT
};
/* Key kinds. K_JSON: the array JSON the row holds (already canonical); K_CALL: the column's
 * Python key formatter on its text (json/jsonb, whose keys are re-formatted). */
enum {
    K_INT = 0, K_BOOL = 1, K_TEXT = 2, K_DATE, K_DATETIME, K_TIMESTAMP, K_DOUBLE, K_TIME, K_BYTES,
    K_JSON, K_CALL
};

#define HEADER_SIZE 12
#define MAX_COLS 1600 /* PostgreSQL's own limit */

typedef struct {
    int form, uni, key; /* key: slot in the key, or -1 */
} Col;

typedef struct {
    int col, kind;
    const char *prefix; /* `{"name":` or `,"name":`, owned by its part in self->parts */
    Py_ssize_t prefix_len;
    PyObject *call; /* K_CALL: text -> key JSON text, owned likewise */
} KeyPart;

typedef struct {
    const uint8_t *text; /* NULL: the value is NULL */
    Py_ssize_t len;
    int64_t num;  /* ints, bools, days, microseconds */
    double dbl;
    Py_ssize_t off, olen; /* bytea's bytes, an array's JSON: where the row buffer holds them */
} KeyValue;

typedef struct {
    PyObject_HEAD
    Col *cols;
    int ncols;
    KeyPart *keys;
    int nkeys;
    PyObject *parts; /* the key parts as given: they own prefix and call */
    char source[256];
    int source_len;
    int version;
} Program;

#include "../../_native/buf.h"
#include "../../_native/text.h"

#include "../../_native/crc32.h"
#include "../../_native/dates.h"
#include "../../_native/keys.h"

/* What one events() call writes into: the old and new rows' Avro, their keys, an array's
 * JSON and a quoted element's text while they are read, the key columns' values. */
typedef struct {
    Buf before, after, key0, key1, js, el;
    KeyValue *kv;
} Work;

/* -- the server's text forms (refused: 0) ------------------------------------------------- */
static inline int is_digit(uint8_t c) { return c >= '0' && c <= '9'; }

/* infinity/-infinity of dates and timestamps: the schemas' sentinels, as types.py gives them
 * (columns.DATE_INFINITY..., the extremes of their Avro types) */
#define DATE_INF INT32_MAX
#define DATE_MINUS_INF INT32_MIN
#define MICROS_INF INT64_MAX
#define MICROS_MINUS_INF INT64_MIN

/* 1 and *out the sentinel when the text is `infinity` or `-infinity`, else 0. */
static int parse_infinity(const uint8_t *p, Py_ssize_t n, int64_t inf, int64_t minus,
                          int64_t *out) {
    if (n == 8 && !memcmp(p, "infinity", 8)) *out = inf;
    else if (n == 9 && !memcmp(p, "-infinity", 9)) *out = minus;
    else return 0;
    return 1;
}

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

/* HH:MM:SS[.f{1,6}] (time.fromisoformat's reading of it) or 24:00:00: microseconds since
 * midnight, as types._time gives them. */
static int parse_time(const uint8_t *p, Py_ssize_t n, int64_t *out) {
    if (n == 8 && !memcmp(p, "24:00:00", 8)) {
        *out = 86400000000LL;
        return 1;
    }
    if (n < 8 || p[2] != ':' || p[5] != ':') return 0;
    static const int at[6] = {0, 1, 3, 4, 6, 7};
    for (int i = 0; i < 6; i++)
        if (!is_digit(p[at[i]])) return 0;
    int h = num(p, 2), mi = num(p + 3, 2), s = num(p + 6, 2);
    if (h > 23 || mi > 59 || s > 59) return 0;
    int64_t frac = 0;
    if (n > 8) {
        Py_ssize_t digits = n - 9;
        if (p[8] != '.' || digits < 1 || digits > 6) return 0;
        for (Py_ssize_t i = 0; i < 6; i++) {
            if (i < digits && !is_digit(p[9 + i])) return 0;
            frac = frac * 10 + (i < digits ? p[9 + i] - '0' : 0);
        }
    }
    *out = (int64_t)(h * 3600 + mi * 60 + s) * 1000000 + frac;
    return 1;
}

/* types._float32: float(text) rounded to float32 as struct's "<f" packs it (a C cast; a
 * finite double past float32's range is its OverflowError: refused), back to a double. */
static int parse_float32(const uint8_t *p, Py_ssize_t n, double *out) {
    double d;
    if (!parse_double(p, n, &d)) return 0;
    float f = (float)d;
    if (isinf(f) && !isinf(d)) return 0;
    *out = (double)f;
    return 1;
}

static inline int hex_digit(uint8_t c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* bytea_output=hex: \x then two hex digits a byte, as bytes.fromhex(text[2:]) reads them
 * (without the whitespace fromhex skips): the bytes behind their Avro length. */
static int put_bytea(const uint8_t *p, Py_ssize_t n, Buf *out) {
    if (n < 2 || p[0] != '\\' || p[1] != 'x' || (n & 1)) return 0;
    Py_ssize_t size = (n - 2) / 2;
    put_varint(out, (uint64_t)size << 1);
    uint8_t *w = (uint8_t *)out->p + out->len;
    for (Py_ssize_t i = 0; i < size; i++) {
        int hi = hex_digit(p[2 + 2 * i]), lo = hex_digit(p[3 + 2 * i]);
        if (hi < 0 || lo < 0) return 0;
        w[i] = (uint8_t)(hi << 4 | lo);
    }
    out->len += size;
    return 1;
}

/* -- arrays: types._array_of's JSON text, element by element ------------------------------ */
#define MAX_DEPTH 64 /* PostgreSQL allows 6 dimensions */

/* One element's JSON (types._number_or_text's value through json.dumps); 0: refused. */
static int put_element(int form, const uint8_t *r, Py_ssize_t n, Buf *js) {
    if (form == F_ARRAY_TEXT) {
        if (buf_reserve(js, 6 * n + 2) < 0) return -1;
        put_json_text(js, r, n);
        return 1;
    }
    if (form == F_ARRAY_BOOL) { /* _bool: "t" is true, any other text false */
        int yes = n == 1 && r[0] == 't';
        return put_text(js, yes ? "true" : "false", yes ? 4 : 5) < 0 ? -1 : 1;
    }
    if (form == F_ARRAY_INT) {
        int64_t v;
        if (!parse_int(r, n, &v)) return 0;
        if (buf_reserve(js, 24) < 0) return -1;
        js->len += sprintf(js->p + js->len, "%lld", (long long)v);
        return 1;
    }
    double d; /* _json_float: repr of a finite float, else the text as a JSON string */
    if (!parse_double(r, n, &d)) return 0;
    if (!isfinite(d)) {
        if (buf_reserve(js, n + 2) < 0) return -1;
        put_json_text(js, r, n);  /* ASCII without escapes: parse_double read it */
        return 1;
    }
    return put_double_key(js, d) < 0 ? -1 : 1;
}

/* `{...}` at *pos as _parse_array reads it (quoted elements unescaped, never null; an
 * unquoted NULL is null; nested braces a nested array; any one character after an element
 * that is not `}`, the comma, skipped), as JSON into js. */
static int put_array_at(int form, const uint8_t *p, Py_ssize_t n, Py_ssize_t *at, int depth,
                        Buf *js, Buf *el) {
    Py_ssize_t pos = *at;
    int rc;
    if (depth > MAX_DEPTH || pos >= n || p[pos] != '{') return 0;
    pos++;
    if (buf_reserve(js, 2) < 0) return -1;
    put_byte(js, '[');
    if (pos >= n) return 0;
    if (p[pos] == '}') {
        put_byte(js, ']');
        *at = pos + 1;
        return 1;
    }
    for (int first = 1;; first = 0) {
        if (!first) {
            if (buf_reserve(js, 1) < 0) return -1;
            put_byte(js, ',');
        }
        if (pos >= n) return 0;
        if (p[pos] == '{') {
            if ((rc = put_array_at(form, p, n, &pos, depth + 1, js, el)) != 1) return rc;
        } else if (p[pos] == '"') { /* unescaped into el, then read as an element */
            el->len = 0;
            for (pos++;; pos++) {
                if (pos >= n) return 0;
                if (p[pos] == '"') break;
                if (p[pos] == '\\' && ++pos >= n) return 0;
                if (buf_reserve(el, 1) < 0) return -1;
                put_byte(el, p[pos]);
            }
            pos++;
            if ((rc = put_element(form, (const uint8_t *)el->p, el->len, js)) != 1) return rc;
        } else {
            Py_ssize_t end = pos;
            while (end < n && p[end] != ',' && p[end] != '}') end++;
            if (end >= n) return 0;
            if (end - pos == 4 && !memcmp(p + pos, "NULL", 4)) {
                if (put_text(js, "null", 4) < 0) return -1;
            } else if ((rc = put_element(form, p + pos, end - pos, js)) != 1) {
                return rc;
            }
            pos = end;
        }
        if (pos >= n) return 0;
        if (p[pos] == '}') {
            if (buf_reserve(js, 1) < 0) return -1;
            put_byte(js, ']');
            *at = pos + 1;
            return 1;
        }
        pos++; /* the comma */
    }
}

/* An array's text (`{...}`, or `[lo:hi]={...}` with explicit bounds) as the JSON text
 * types._array_of makes of it, into js. */
static int put_array(int form, const uint8_t *p, Py_ssize_t n, Buf *js, Buf *el) {
    Py_ssize_t pos = 0;
    js->len = 0;
    if (!utf8_ok(p, n)) return 0; /* the row path decodes the text first */
    if (n > 0 && p[0] == '[') {
        const uint8_t *eq = memchr(p, '=', n);
        if (!eq) return 0;
        pos = eq - p + 1;
    }
    int rc = put_array_at(form, p, n, &pos, 0, js, el);
    return rc == 1 && pos != n ? 0 : rc;
}

/* -- key text ---------------------------------------------------------------------------- */
/* A K_CALL key part: the column's key formatter on its text (a str), as the generated
 * transcoder calls it. A text it does not take (not UTF-8, a formatter's exception): 0, the
 * Python paths decide. */
static int put_called_key(PyObject *call, const KeyValue *v, Buf *out) {
    PyObject *text = PyUnicode_DecodeUTF8((const char *)v->text, v->len, NULL);
    PyObject *json = text ? PyObject_CallOneArg(call, text) : NULL;
    Py_XDECREF(text);
    Py_ssize_t n;
    const char *s = json && PyUnicode_Check(json) ? PyUnicode_AsUTF8AndSize(json, &n) : NULL;
    int rc = s && put_text(out, s, n) == 0 ? 1 : 0;
    Py_XDECREF(json);
    if (!rc) {
        if (PyErr_Occurred() && !PyErr_ExceptionMatches(PyExc_Exception)) return -1;
        PyErr_Clear();
    }
    return rc;
}

/* An infinite date's or timestamp's key JSON: date_text/datetime_text/timestamp_text say
 * infinity or -infinity. */
static int put_infinity_key(Buf *out, int positive) {
    return positive ? put_text(out, "\"infinity\"", 10) : put_text(out, "\"-infinity\"", 11);
}

/* The key's canonical JSON (as RowCodec.key_text makes it) into `out`, from the values put_row
 * left in kv and `row` (its Avro); 0: refused. */
static int put_key(Program *self, const KeyValue *kv, const Buf *row, Buf *out) {
    out->len = 0;
    for (int n = 0; n < self->nkeys; n++) {
        const KeyPart *kp = &self->keys[n];
        const KeyValue *v = &kv[self->cols[kp->col].key];
        if (buf_reserve(out, kp->prefix_len + 24 + (v->text ? v->len * 6 + 2 : 0)) < 0)
            return -1;
        memcpy(out->p + out->len, kp->prefix, kp->prefix_len);
        out->len += kp->prefix_len;
        int rc = 0;
        if (!v->text) {
            rc = put_text(out, "null", 4);
        } else if (kp->kind == K_INT) {
            out->len += sprintf(out->p + out->len, "%lld", (long long)v->num);
        } else if (kp->kind == K_BOOL) {
            rc = v->num ? put_text(out, "true", 4) : put_text(out, "false", 5);
        } else if (kp->kind == K_DATE && (v->num == DATE_INF || v->num == DATE_MINUS_INF)) {
            rc = put_infinity_key(out, v->num > 0);
        } else if (kp->kind == K_DATE) {
            rc = put_date_key(out, v->num);
        } else if ((kp->kind == K_DATETIME || kp->kind == K_TIMESTAMP) &&
                   (v->num == MICROS_INF || v->num == MICROS_MINUS_INF)) {
            rc = put_infinity_key(out, v->num > 0);
        } else if (kp->kind == K_DATETIME || kp->kind == K_TIMESTAMP) {
            rc = put_micros_key(out, v->num, kp->kind == K_TIMESTAMP);
        } else if (kp->kind == K_DOUBLE) {
            rc = put_double_key(out, v->dbl);
        } else if (kp->kind == K_TIME) {
            rc = put_time_key(out, v->num);
        } else if (kp->kind == K_BYTES) {
            rc = put_base64_key(out, (const uint8_t *)row->p + v->off, v->olen);
        } else if (kp->kind == K_JSON) { /* json.dumps(json.loads(x)) of what we wrote is x */
            rc = put_text(out, row->p + v->off, v->olen);
        } else if (kp->kind == K_CALL) {
            if ((rc = put_called_key(kp->call, v, out)) != 1) return rc;
            rc = 0;
        } else {
            if (!utf8_ok(v->text, v->len)) return 0;  /* the Python paths decide */
            put_json_text(out, v->text, v->len);
        }
        if (rc < 0) return -1;
    }
    if (buf_reserve(out, 1) < 0) return -1;
    put_byte(out, '}');
    return 1;
}

/* -- one TupleData --------------------------------------------------------------------- */
/* The tuple at *at into `out` (its Avro row) and `kv` (its key's values): 1, or 0 refused,
 * or -1 with an exception set. */
static int put_row(Program *self, const uint8_t *data, Py_ssize_t *at, Py_ssize_t end, Buf *out,
                   Work *w) {
    KeyValue *kv = w->kv;
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
        Py_ssize_t start = out->len; /* where the value's bytes begin (bytea, arrays) */
        switch (c->form) {
        case F_INT:
            if (!parse_int(r, n, &v)) return 0;
            put_varint(out, zigzag(v));
            break;
        case F_DOUBLE:
        case F_FLOAT: {
            double d;
            if (!(c->form == F_FLOAT ? parse_float32(r, n, &d) : parse_double(r, n, &d))) return 0;
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
            if (!parse_infinity(r, n, DATE_INF, DATE_MINUS_INF, &v) &&
                (n != 10 || !parse_date(r, n, &v)))
                return 0;
            put_varint(out, zigzag(v));
            break;
        case F_DATETIME:
        case F_TIMESTAMPTZ:
            if (!parse_infinity(r, n, MICROS_INF, MICROS_MINUS_INF, &v) &&
                !parse_stamp(r, n, c->form == F_TIMESTAMPTZ, &v))
                return 0;
            put_varint(out, zigzag(v));
            break;
        case F_TIME:
            if (!parse_time(r, n, &v)) return 0;
            put_varint(out, zigzag(v));
            break;
        case F_BYTES:
            if (!put_bytea(r, n, out)) return 0;
            start = out->len - (n - 2) / 2;
            break;
        default: { /* F_ARRAY_*: the JSON as an Avro string */
            int rc = put_array(c->form, r, n, &w->js, &w->el);
            if (rc != 1) return rc;
            if (buf_reserve(out, 10 + w->js.len) < 0) return -1;
            put_varint(out, (uint64_t)w->js.len << 1);
            start = out->len;
            memcpy(out->p + out->len, w->js.p, w->js.len);
            out->len += w->js.len;
            break;
        }
        }
        if (c->key >= 0) {
            kv[c->key].text = r;
            kv[c->key].len = n;
            kv[c->key].num = v;
            kv[c->key].off = start;
            kv[c->key].olen = out->len - start;
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
    /* a table without a key: wire.KEYLESS_HASH (crc32 of the empty key text) */
    uint32_t hash = self->nkeys ? crc32_of((const uint8_t *)key->p, key->len) : 0;
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
static int message_event(Program *self, const uint8_t *data, Py_ssize_t end, Work *w,
                         PyObject **event) {
    if (end < 6) return 0;
    uint8_t tag = data[0], marker = data[5];
    Py_ssize_t pos = 6;
    Buf *before = &w->before, *after = &w->after, *key0 = &w->key0, *key1 = &w->key1;
    int rc;
    if (tag == 'I' || tag == 'U') {
        int has_old = tag == 'U' && (marker == 'K' || marker == 'O');
        if (has_old) {
            if ((rc = put_row(self, data, &pos, end, before, w)) != 1) return rc;
            if (self->nkeys && (rc = put_key(self, w->kv, before, key0)) != 1) return rc;
            if (pos >= end) return 0;
            marker = data[pos++];
        }
        if (marker != 'N') return 0;
        if ((rc = put_row(self, data, &pos, end, after, w)) != 1) return rc;
        if (pos != end) return 0;
        if (self->nkeys && (rc = put_key(self, w->kv, after, key1)) != 1) return rc;
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
        if ((rc = put_row(self, data, &pos, end, before, w)) != 1) return rc;
        if (pos != end) return 0;
        if (self->nkeys && (rc = put_key(self, w->kv, before, key0)) != 1) return rc;
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
    /* A K_CALL formatter may run other Python code: hold our own references */
    Py_INCREF(self);
    Py_INCREF(payloads);
    Py_ssize_t count = PyList_GET_SIZE(payloads);
    PyObject *list = PyList_New(count);
    Work w = {0};
    w.kv = PyMem_Calloc(self->nkeys ? self->nkeys : 1, sizeof(KeyValue));
    PyObject *result = NULL;
    if (!list || !w.kv) { if (!w.kv) PyErr_NoMemory(); goto done; }
    for (Py_ssize_t i = 0; i < count; i++) {
        if (i >= PyList_GET_SIZE(payloads)) {
            PyErr_SetString(PyExc_RuntimeError, "the list of payloads changed");
            goto done;
        }
        PyObject *item = PyList_GET_ITEM(payloads, i), *event = NULL;
        if (!PyBytes_Check(item)) {
            PyErr_SetString(PyExc_TypeError, "events() takes a list of bytes");
            goto done;
        }
        Py_INCREF(item);
        int rc = message_event(self, (const uint8_t *)PyBytes_AS_STRING(item),
                               PyBytes_GET_SIZE(item), &w, &event);
        Py_DECREF(item);
        if (rc < 0) goto done;
        if (rc == 0) { result = Py_None; Py_INCREF(result); goto done; }
        PyList_SET_ITEM(list, i, event);
    }
    result = list;
    list = NULL;
done:
    Py_XDECREF(list);
    PyMem_Free(w.kv);
    PyMem_Free(w.before.p); PyMem_Free(w.after.p); PyMem_Free(w.key0.p); PyMem_Free(w.key1.p);
    PyMem_Free(w.js.p); PyMem_Free(w.el.p);
    Py_DECREF(payloads);
    Py_DECREF(self);
    return result;
}

/* -- construction -------------------------------------------------------------------------- */
static void Program_dealloc(Program *self) {
    PyMem_Free(self->cols);
    PyMem_Free(self->keys);
    Py_XDECREF(self->parts);
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
    self->parts = PyTuple_New(nkeys);
    if (!self->cols || !self->keys || !self->parts) { PyErr_NoMemory(); return -1; }
    self->ncols = (int)ncols;
    for (Py_ssize_t i = 0; i < ncols; i++) {
        Col *c = &self->cols[i];
        if (!PyArg_ParseTuple(PyTuple_GET_ITEM(cols, i), "iii", &c->form, &c->uni, &c->key))
            return -1;
        if (c->form < F_INT || c->form > F_ARRAY_TEXT || c->key >= nkeys) {
            PyErr_SetString(PyExc_ValueError, "an unknown column form or key slot");
            return -1;
        }
    }
    for (Py_ssize_t n = 0; n < nkeys; n++) {
        PyObject *prefix, *part = PyTuple_GET_ITEM(keys, n);
        KeyPart *kp = &self->keys[n];
        kp->call = NULL;
        if (!PyArg_ParseTuple(part, "iSi|O", &kp->col, &prefix, &kp->kind, &kp->call))
            return -1;
        if (kp->col < 0 || kp->col >= ncols || self->cols[kp->col].key < 0 || kp->kind < K_INT ||
            kp->kind > K_CALL) {
            PyErr_SetString(PyExc_ValueError, "a key part names no key column");
            return -1;
        }
        if ((kp->kind == K_CALL) != (kp->call != NULL && PyCallable_Check(kp->call))) {
            PyErr_SetString(PyExc_ValueError, "a K_CALL key part takes a callable, no other");
            return -1;
        }
        Py_INCREF(part); /* holds the prefix and the formatter */
        PyTuple_SET_ITEM(self->parts, n, part);
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
