/* Binlog rows events -> Sluice wire events, a whole event per call (capture's hot path).
 *
 * The compiled twin of the generated Python transcoder in transcode.py, which stays the
 * reference: the same bytes (tests compare both on every type). fastrows.py describes each
 * column to Program(): every column kind a MariaDB/MySQL table can have is read here, and the
 * rare forms without a C reader (multi-byte charsets other than UTF-8, JSON keys) are CALL
 * columns, read by their Python decoder and encoder from this loop. Every read is
 * bounds-checked: bytes that do not parse raise ValueError, and tables.py then names the
 * failing column with its slow path.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

enum { OP_INT = 1, OP_INT24, OP_YEAR, OP_DOUBLE, OP_COPY, OP_DECIMAL, OP_DATE,
       OP_DATETIME2, OP_TIMESTAMP2, OP_ENUM, OP_UINT64, OP_BIT, OP_FLOAT, OP_TIME2, OP_SET,
       OP_PAD, OP_CHARMAP, OP_UUID, OP_INET6, OP_OLD_TIMESTAMP, OP_OLD_DATETIME, OP_OLD_TIME,
       OP_CALL };
enum { MODE_WRITE = 0, MODE_UPDATE = 1, MODE_DELETE = 2 };

#define MAX_GROUPS 16
#define HEADER_SIZE 12

typedef struct {
    int op, size, is_signed, uni, nullable, key;  /* key: slot in the key, or -1 */
    int ngroups, gbytes[MAX_GROUPS], gdigits[MAX_GROUPS], dsize, int_groups, scale;  /* DECIMAL */
    int frac_bytes;  /* DATETIME2 / TIMESTAMP2 / TIME2 */
    int64_t frac_mult;
    int b64;         /* COPY: a bytes key (base64 text) */
    int big_endian;  /* UINT64: BIT(64) (big-endian), not BIGINT UNSIGNED */
    int pad;         /* PAD: BINARY(n)'s n */
    PyObject *members;  /* ENUM: encoded members (index n-1); SET: members' Avro strings */
    PyObject *member_default;  /* ENUM: the encoded '' */
    PyObject *key_members;  /* ENUM / SET: members' JSON texts (key text) */
    PyObject *key_default;  /* ENUM: '""' */
    uint8_t (*cmap)[4];     /* CHARMAP: each byte's UTF-8 (cmap[b][3]: its length, 0: none) */
    PyObject *decode, *encode, *keyfmt;  /* CALL: the Python decoder, encoder, key formatter */
} Col;

typedef struct {
    int col;
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
    int null_bytes;
} Program;

#include "../../_native/buf.h"
#include "../../_native/text.h"

#include "../../_native/crc32.h"
#include "../../_native/dates.h"
#include "../../_native/keys.h"

/* -- key text ---------------------------------------------------------------------------- */
/* A key column's JSON text, written by its column's reader while it reads the row. */
typedef struct {
    Buf text;
    int set;
} KeyValue;

/* The rows event being read: its bytes, and the bytes object the Python decoders of CALL
 * columns take (made from `data` on first use when the caller passed another buffer). */
typedef struct {
    const uint8_t *data;
    Py_ssize_t end;
    PyObject *obj;
    int owned;
} Input;

/* The key's canonical JSON (as the Python path's key expression) into `out`. */
static int put_key(Program *self, KeyValue *kv, Buf *out) {
    for (int n = 0; n < self->nkeys; n++) {
        KeyPart *kp = &self->keys[n];
        KeyValue *v = &kv[self->cols[kp->col].key];
        if (!v->set) {
            PyErr_SetString(PyExc_ValueError, "a primary key column is NULL");
            return -1;
        }
        if (buf_reserve(out, kp->prefix_len + v->text.len) < 0) return -1;
        memcpy(out->p + out->len, kp->prefix, kp->prefix_len);
        out->len += kp->prefix_len;
        memcpy(out->p + out->len, v->text.p, v->text.len);
        out->len += v->text.len;
    }
    if (buf_reserve(out, 1) < 0) return -1;
    put_byte(out, '}');
    return 0;
}

/* Column c's key text buffer, emptied, or NULL when c is not a key column. */
static inline Buf *key_of(const Col *c, KeyValue *kv) {
    if (c->key < 0) return NULL;
    kv[c->key].set = 1;
    kv[c->key].text.len = 0;
    return &kv[c->key].text;
}

static int put_num_key(Buf *k, int64_t v, int is_signed) {
    if (buf_reserve(k, 24) < 0) return -1;
    k->len += is_signed ? sprintf(k->p + k->len, "%lld", (long long)v)
                        : sprintf(k->p + k->len, "%llu", (unsigned long long)v);
    return 0;
}

static int put_json_key(Buf *k, const uint8_t *s, Py_ssize_t n) {
    if (!utf8_ok(s, n)) {
        PyErr_SetString(PyExc_ValueError, "a text key column is not UTF-8");
        return -1;
    }
    if (buf_reserve(k, 6 * n + 2) < 0) return -1;
    put_json_text(k, s, n);
    return 0;
}

static int put_bytes_object(Buf *out, PyObject *b) {
    return put_text(out, PyBytes_AS_STRING(b), PyBytes_GET_SIZE(b));
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

/* The unsigned LEB128 of a value up to 2^128 - 1 (a BIT(57..63) holding more than its bits). */
static inline void put_varint128(Buf *b, unsigned __int128 z) {
    while (z >= 0x80) { put_byte(b, (uint8_t)(z | 0x80)); z >>= 7; }
    put_byte(b, (uint8_t)z);
}

/* The Avro decimal bytes (length, then big-endian two's complement, shortest) of a magnitude
 * given big-endian in mag[0..n), negated if `negative`. */
static void put_twos(Buf *out, const uint8_t *mag, int n, int negative) {
    int skip = 0;
    while (skip < n && !mag[skip]) skip++;
    int len = n - skip, top = len ? mag[skip] : 0;
    int bits = len ? (len - 1) * 8 + (32 - __builtin_clz((unsigned)top)) : 0;
    int size = (bits + 8) >> 3;
    uint8_t b[40] = {0};
    memcpy(b + size - len, mag + skip, len);
    if (negative) {
        int carry = 1;
        for (int i = size - 1; i >= 0; i--) {
            int v = (uint8_t)~b[i] + carry;
            b[i] = (uint8_t)v;
            carry = v >> 8;
        }
    }
    put_varint(out, (uint64_t)size << 1);
    memcpy(out->p + out->len, b, size);
    out->len += size;
}

/* A DECIMAL's digit groups (sign bit cleared, negatives inverted back) into b; 1: negative. */
static int decimal_groups(const Col *c, const uint8_t *src, uint8_t *b) {
    memcpy(b, src, c->dsize);
    int negative = !(b[0] & 0x80);
    if (negative) for (int i = 0; i < c->dsize; i++) b[i] = (uint8_t)~b[i];
    b[0] &= 0x7F;
    return negative;
}

static void put_decimal(const Col *c, const uint8_t *src, Buf *out) {
    uint8_t b[64];
    int negative = decimal_groups(c, src, b);
    if (c->uni) put_byte(out, 2);
    const uint8_t *p = b;
    if (c->dsize <= 16) {  /* up to 38 digits: one 128-bit number */
        unsigned __int128 x = 0;
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
        put_varint(out, (uint64_t)n << 1);
        for (int i = n - 1; i >= 0; i--) put_byte(out, (uint8_t)(s >> (8 * i)));
        return;
    }
    /* Up to 65 digits (< 2^217): 32-bit limbs, least significant first. */
    uint32_t limb[9] = {0};
    for (int g = 0; g < c->ngroups; g++) {
        uint64_t scale = 1, carry = be(p, c->gbytes[g]);
        for (int k = 0; k < c->gdigits[g]; k++) scale *= 10;
        p += c->gbytes[g];
        for (int i = 0; i < 9; i++) {
            uint64_t v = (uint64_t)limb[i] * scale + carry;
            limb[i] = (uint32_t)v;
            carry = v >> 32;
        }
    }
    uint8_t mag[36];
    for (int i = 0; i < 9; i++)
        for (int k = 0; k < 4; k++) mag[35 - 4 * i - k] = (uint8_t)(limb[i] >> (8 * k));
    put_twos(out, mag, 36, negative);
}

/* format(Decimal, 'f') as JSON: the groups' digits, the integer part without leading zeros. */
static int put_decimal_key(const Col *c, const uint8_t *src, Buf *k) {
    uint8_t b[64];
    int negative = decimal_groups(c, src, b);
    if (buf_reserve(k, 16 * c->ngroups + 8) < 0) return -1;
    put_byte(k, '"');
    if (negative) put_byte(k, '-');
    const uint8_t *p = b;
    Py_ssize_t start = k->len;
    for (int g = 0; g < c->ngroups; g++) {
        if (g == c->int_groups) {
            if (k->len == start) put_byte(k, '0');
            put_byte(k, '.');
        }
        unsigned long v = (unsigned long)be(p, c->gbytes[g]);
        p += c->gbytes[g];
        if (g < c->int_groups && k->len == start) {  /* leading zeros of the integer part */
            if (v) k->len += sprintf(k->p + k->len, "%lu", v);
        } else {
            k->len += sprintf(k->p + k->len, "%0*lu", c->gdigits[g], v);
        }
    }
    if (c->int_groups == c->ngroups && k->len == start) put_byte(k, '0');
    put_byte(k, '"');
    return 0;
}

/* The TIME2 value in signed microseconds, as values._time2 reads it. */
static int64_t time2(const Col *c, const uint8_t *p) {
    int64_t intpart = (int64_t)be(p, 3) - 0x800000, packed;
    if (c->frac_bytes == 0) {
        packed = intpart * ((int64_t)1 << 24);
    } else if (c->frac_bytes == 3) {
        packed = (int64_t)be(p, 6) - 0x800000000000LL;
    } else {
        int64_t frac = (int64_t)be(p + 3, c->frac_bytes);
        if (intpart < 0 && frac) {  /* negative values borrow from the integer part */
            intpart += 1;
            frac -= c->frac_bytes == 1 ? 0x100 : 0x10000;
        }
        packed = intpart * ((int64_t)1 << 24) + frac * (c->frac_bytes == 1 ? 10000 : 100);
    }
    int64_t sign = packed < 0 ? -1 : 1;
    if (packed < 0) packed = -packed;
    int64_t hms = packed >> 24, micros = packed & 0xFFFFFF;
    int64_t seconds = (hms >> 12 & 1023) * 3600 + (hms >> 6 & 63) * 60 + (hms & 63);
    return sign * (seconds * 1000000 + micros);
}

/* shortest_float32: the shortest decimal that reads back as the same float32, as a double. */
static int shortest_float32(const uint8_t *p, double *out) {
    uint32_t bits = (uint32_t)le(p, 4);
    float f;
    memcpy(&f, &bits, 4);
    double v = (double)f;
    for (int digits = 6; digits < 10; digits++) {
        char *s = PyOS_double_to_string(v, 'g', digits, 0, NULL);
        if (!s) return -1;
        double c = PyOS_string_to_double(s, NULL, NULL);
        PyMem_Free(s);
        if (c == -1.0 && PyErr_Occurred()) return -1;
        float cf = (float)c;
        uint32_t cbits;
        memcpy(&cbits, &cf, 4);
        if (cbits == bits) { *out = c; return 0; }
    }
    *out = v;
    return 0;
}

/* MariaDB's INET6 text (values._inet6_text) of up to 16 bytes (zero-padded) into w. */
static Py_ssize_t inet6_text(const uint8_t *raw, Py_ssize_t n, char *w) {
    uint8_t d[16] = {0};
    memcpy(d, raw, n);
    int words[8], gap_pos = -1, gap_len = 0, run_pos = -1, run_len = 0;
    for (int i = 0; i < 8; i++) words[i] = d[2 * i] << 8 | d[2 * i + 1];
    for (int i = 0; i <= 8; i++) {  /* i == 8: a sentinel closes a trailing run */
        if (i < 8 && words[i] == 0) {
            if (run_pos >= 0) run_len++;
            else { run_pos = i; run_len = 1; }
        } else if (run_pos >= 0) {
            if (run_len > gap_len) { gap_pos = run_pos; gap_len = run_len; }
            run_pos = -1;
            run_len = 0;
        }
    }
    char *s = w;
    if (gap_pos == 0 && (gap_len == 6 || (gap_len == 5 && words[5] == 0xFFFF))) {
        s += sprintf(s, "%s%d.%d.%d.%d", gap_len == 6 ? "::" : "::ffff:", d[12], d[13], d[14],
                     d[15]);
        return s - w;
    }
    int parts = 0;
    for (int i = 0; i < 8;) {
        if (parts++) *s++ = ':';
        if (i == gap_pos) {
            if (i == 0) *s++ = ':';
            i += gap_len;
            if (i == 8) *s++ = ':';
            continue;
        }
        s += sprintf(s, "%x", words[i]);
        i++;
    }
    return s - w;
}

/* A CALL column: the Python decoder's value, the schema's encoder, the key formatter. */
static int put_call(const Col *c, Input *in, Py_ssize_t *at, Buf *out, KeyValue *kv) {
    if (!in->obj) {
        in->obj = PyBytes_FromStringAndSize((const char *)in->data, in->end);
        if (!in->obj) return -1;
        in->owned = 1;
    }
    PyObject *res = PyObject_CallFunction(c->decode, "On", in->obj, *at);
    if (!res) return -1;
    Py_ssize_t next;
    PyObject *value;
    if (!PyArg_ParseTuple(res, "On", &value, &next)) { Py_DECREF(res); return -1; }
    if (next < *at || next > in->end) {
        Py_DECREF(res);
        PyErr_SetString(PyExc_ValueError, "the rows event ends inside a row");
        return -1;
    }
    int rc = -1;
    if (value == Py_None && c->uni) {
        if (buf_reserve(out, 1) < 0) goto done;
        put_byte(out, 0);
    } else {
        PyObject *enc = PyObject_CallOneArg(c->encode, value);
        if (!enc) goto done;
        if (!PyBytes_Check(enc)) {
            Py_DECREF(enc);
            PyErr_SetString(PyExc_TypeError, "a column encoder returned no bytes");
            goto done;
        }
        if (c->uni && put_text(out, "\x02", 1) < 0) { Py_DECREF(enc); goto done; }
        int failed = put_bytes_object(out, enc);
        Py_DECREF(enc);
        if (failed) goto done;
    }
    Buf *k = key_of(c, kv);
    if (k) {
        PyObject *text = PyObject_CallOneArg(c->keyfmt, value);
        if (!text) goto done;
        Py_ssize_t n;
        const char *s = PyUnicode_AsUTF8AndSize(text, &n);
        int failed = !s || put_text(k, s, n) < 0;
        Py_DECREF(text);
        if (failed) goto done;
    }
    *at = next;
    rc = 0;
done:
    Py_DECREF(res);
    return rc;
}

/* Encode the row at *at into `out` (Avro Row, no union branch of its own); fills `kv`. */
static int put_row(Program *self, Input *in, Py_ssize_t *at, Buf *out, KeyValue *kv) {
    const uint8_t *data = in->data;
    Py_ssize_t pos = *at, end = in->end;
    NEED(self->null_bytes);
    /* The server may set the unused high bits of the last byte; only real columns count. */
    const uint8_t *nulls = data + pos;
    pos += self->null_bytes;
    for (int i = 0; i < self->nkeys; i++) kv[i].set = 0;
    for (int i = 0; i < self->ncols; i++) {
        Col *c = &self->cols[i];
        /* The widest fixed column form: a 4-byte length, 30 bytes of a DECIMAL's digits. */
        if (buf_reserve(out, 64) < 0) return -1;
        if (c->nullable && (nulls[i >> 3] >> (i & 7) & 1)) {
            put_byte(out, 0);
            continue;
        }
        const uint8_t *p = data + pos;
        Buf *k;
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
            if ((k = key_of(c, kv)) && put_num_key(k, v, 1) < 0) return -1;
            break;
        case OP_UINT64: {  /* BIGINT UNSIGNED, BIT(64): decimal(20,0) bytes */
            NEED(c->size);
            uint64_t u = c->big_endian ? be(p, c->size) : le(p, c->size);
            pos += c->size;
            uint8_t mag[8];
            for (int b = 0; b < 8; b++) mag[b] = (uint8_t)(u >> (56 - 8 * b));
            if (c->uni) put_byte(out, 2);
            put_twos(out, mag, 8, 0);
            if ((k = key_of(c, kv)) && put_num_key(k, (int64_t)u, 0) < 0) return -1;
            break;
        }
        case OP_BIT: {  /* BIT(1..63), big-endian */
            NEED(c->size);
            uint64_t u = be(p, c->size);
            pos += c->size;
            if (c->uni) put_byte(out, 2);
            put_varint128(out, ((unsigned __int128)u << 1) ^ (u >> 63));
            if ((k = key_of(c, kv)) && put_num_key(k, (int64_t)u, 0) < 0) return -1;
            break;
        }
        case OP_DOUBLE: {
            NEED(8);
            if (c->uni) put_byte(out, 2);
            memcpy(out->p + out->len, p, 8);
            out->len += 8;
            pos += 8;
            if ((k = key_of(c, kv))) {
                double d;
                memcpy(&d, p, 8);
                if (put_double_key(k, d) < 0) return -1;
            }
            break;
        }
        case OP_FLOAT: {
            NEED(4);
            double d;
            if (shortest_float32(p, &d) < 0) return -1;
            pos += 4;
            if (c->uni) put_byte(out, 2);
            memcpy(out->p + out->len, &d, 8);
            out->len += 8;
            if ((k = key_of(c, kv)) && put_double_key(k, d) < 0) return -1;
            break;
        }
        case OP_COPY:
        case OP_PAD:
        case OP_UUID:
        case OP_INET6: {
            NEED(c->size);
            Py_ssize_t n = (Py_ssize_t)le(p, c->size);
            pos += c->size;
            NEED(n);
            const uint8_t *s = data + pos;
            pos += n;
            if (c->op == OP_UUID || c->op == OP_INET6) {
                char text[2 * 255 + 8];
                Py_ssize_t len;
                if (c->op == OP_INET6) {
                    if (n > 16) {
                        PyErr_SetString(PyExc_ValueError, "an INET6 of more than 16 bytes");
                        return -1;
                    }
                    len = inet6_text(s, n, text);
                } else {  /* 8-4-4-4-rest hex digits of the bytes padded to 16 */
                    static const char hex[] = "0123456789abcdef";
                    Py_ssize_t m = n < 16 ? 16 : n;
                    len = 0;
                    for (Py_ssize_t b = 0; b < m; b++) {
                        if (b == 4 || b == 6 || b == 8 || b == 10) text[len++] = '-';
                        uint8_t x = b < n ? s[b] : 0;
                        text[len++] = hex[x >> 4];
                        text[len++] = hex[x & 15];
                    }
                }
                if (c->uni) put_byte(out, 2);
                put_varint(out, (uint64_t)len << 1);
                if (put_text(out, text, len) < 0) return -1;
                if ((k = key_of(c, kv)) && put_json_key(k, (const uint8_t *)text, len) < 0)
                    return -1;
                break;
            }
            Py_ssize_t padded = c->op == OP_PAD && n < c->pad ? c->pad : n;
            if (buf_reserve(out, padded + 16) < 0) return -1;
            if (c->uni) put_byte(out, 2);
            put_varint(out, (uint64_t)padded << 1);
            uint8_t *w = (uint8_t *)out->p + out->len;
            memcpy(w, s, n);
            memset(w + n, 0, padded - n);
            out->len += padded;
            if ((k = key_of(c, kv)) &&
                ((c->b64 || c->op == OP_PAD) ? put_base64_key(k, w, padded)
                                             : put_json_key(k, s, n)) < 0)
                return -1;
            break;
        }
        case OP_CHARMAP: {  /* a one-byte charset, each byte to its UTF-8 */
            NEED(c->size);
            Py_ssize_t n = (Py_ssize_t)le(p, c->size), len = 0;
            pos += c->size;
            NEED(n);
            const uint8_t *s = data + pos;
            pos += n;
            for (Py_ssize_t b = 0; b < n; b++) {
                if (!c->cmap[s[b]][3]) {
                    PyErr_SetString(PyExc_ValueError, "a byte its charset does not map");
                    return -1;
                }
                len += c->cmap[s[b]][3];
            }
            if (buf_reserve(out, len + 16) < 0) return -1;
            if (c->uni) put_byte(out, 2);
            put_varint(out, (uint64_t)len << 1);
            uint8_t *w = (uint8_t *)out->p + out->len;
            for (Py_ssize_t b = 0; b < n; b++) {
                const uint8_t *m = c->cmap[s[b]];
                for (int j = 0; j < m[3]; j++) *w++ = m[j];
            }
            out->len += len;
            if ((k = key_of(c, kv)) &&
                put_json_key(k, (const uint8_t *)out->p + out->len - len, len) < 0)
                return -1;
            break;
        }
        case OP_DECIMAL:
            NEED(c->dsize);
            put_decimal(c, p, out);
            pos += c->dsize;
            if ((k = key_of(c, kv)) && put_decimal_key(c, p, k) < 0) return -1;
            break;
        case OP_DATE: {
            NEED(3);
            uint64_t d = le(p, 3);
            pos += 3;
            int64_t y = d >> 9, m = (d >> 5) & 15, day = d & 31;
            k = key_of(c, kv);
            if (!valid_date(y, m, day)) {
                put_byte(out, 0);
                if (k && put_text(k, "null", 4) < 0) return -1;
                break;
            }
            put_byte(out, 2);
            put_varint(out, zigzag(days_from_civil(y, m, day)));
            if (k && put_date_key(k, days_from_civil(y, m, day)) < 0) return -1;
            break;
        }
        case OP_DATETIME2:
        case OP_OLD_DATETIME: {
            int64_t x, y, m, day, secs;
            if (c->op == OP_DATETIME2) {
                NEED(5 + c->frac_bytes);
                int64_t u = (int64_t)be(p, 5) - 0x8000000000LL;
                int64_t f = (int64_t)be(p + 5, c->frac_bytes) * c->frac_mult;
                pos += 5 + c->frac_bytes;
                int64_t ymd = u >> 17, ym = ymd >> 5, h = u & 0x1FFFF;
                y = ym / 13, m = ym % 13, day = ymd % 32;
                if (u < 0) y = 0;  /* a negative year: no date */
                secs = (h >> 12) * 3600 + (h >> 6 & 63) * 60 + (h & 63);
                x = secs * 1000000LL + f;
            } else {  /* before MySQL 5.6: YYYYMMDDhhmmss as a number */
                NEED(8);
                uint64_t u = le(p, 8), date = u / 1000000, time = u % 1000000;
                pos += 8;
                y = (int64_t)(date / 10000), m = date / 100 % 100, day = date % 100;
                secs = (int64_t)(time / 10000 * 3600 + time / 100 % 100 * 60 + time % 100);
                x = secs * 1000000LL;
            }
            k = key_of(c, kv);
            if (!valid_date(y, m, day)) {
                put_byte(out, 0);
                if (k && put_text(k, "null", 4) < 0) return -1;
                break;
            }
            x += days_from_civil(y, m, day) * 86400000000LL;
            put_byte(out, 2);
            put_varint(out, zigzag(x));
            if (k && put_micros_key(k, x, 0) < 0) return -1;
            break;
        }
        case OP_TIMESTAMP2:
        case OP_OLD_TIMESTAMP: {
            int64_t x;
            if (c->op == OP_TIMESTAMP2) {
                NEED(4 + c->frac_bytes);
                x = (int64_t)be(p, 4) * 1000000LL +
                    (int64_t)be(p + 4, c->frac_bytes) * c->frac_mult;
                pos += 4 + c->frac_bytes;
            } else {
                NEED(4);
                x = (int64_t)le(p, 4) * 1000000LL;
                pos += 4;
            }
            k = key_of(c, kv);
            if (!x) {
                put_byte(out, 0);
                if (k && put_text(k, "null", 4) < 0) return -1;
                break;
            }
            put_byte(out, 2);
            put_varint(out, (uint64_t)x << 1);
            if (k && put_micros_key(k, x, 1) < 0) return -1;
            break;
        }
        case OP_TIME2:
        case OP_OLD_TIME: {
            if (c->op == OP_TIME2) {
                NEED(3 + c->frac_bytes);
                v = time2(c, p);
                pos += 3 + c->frac_bytes;
            } else {  /* before MySQL 5.6: [-]hhmmss as a number */
                NEED(3);
                int64_t t = (int64_t)le(p, 3);
                if (t & 0x800000) t -= 0x1000000;
                int64_t a = t < 0 ? -t : t;
                v = (a / 10000 * 3600 + a / 100 % 100 * 60 + a % 100) * 1000000LL;
                if (t < 0) v = -v;
                pos += 3;
            }
            if (c->uni) put_byte(out, 2);
            put_varint(out, zigzag(v));
            if ((k = key_of(c, kv)) && put_time_key(k, v) < 0) return -1;
            break;
        }
        case OP_ENUM: {
            NEED(c->size);
            uint64_t n = le(p, c->size);
            pos += c->size;
            int found = n >= 1 && n <= (uint64_t)PyTuple_GET_SIZE(c->members);
            PyObject *m = found ? PyTuple_GET_ITEM(c->members, n - 1) : c->member_default;
            if (put_bytes_object(out, m) < 0) return -1;
            if ((k = key_of(c, kv)) &&
                put_bytes_object(k, found ? PyTuple_GET_ITEM(c->key_members, n - 1)
                                          : c->key_default) < 0)
                return -1;
            break;
        }
        case OP_SET: {  /* an array of the members whose bits are set, in member order */
            NEED(c->size);
            uint64_t mask = le(p, c->size);
            pos += c->size;
            int count = 0, members = (int)PyTuple_GET_SIZE(c->members);
            for (int b = 0; b < members; b++) count += (int)(mask >> b & 1);
            if (c->uni) put_byte(out, 2);
            k = key_of(c, kv);
            if (k && put_text(k, "[", 1) < 0) return -1;
            if (count) {
                put_varint(out, (uint64_t)count << 1);
                for (int b = 0, said = 0; b < members; b++) {
                    if (!(mask >> b & 1)) continue;
                    if (put_bytes_object(out, PyTuple_GET_ITEM(c->members, b)) < 0) return -1;
                    if (k && ((said++ && put_text(k, ",", 1) < 0) ||
                              put_bytes_object(k, PyTuple_GET_ITEM(c->key_members, b)) < 0))
                        return -1;
                }
            }
            if (buf_reserve(out, 1) < 0 || (k && put_text(k, "]", 1) < 0)) return -1;
            put_byte(out, 0);
            break;
        }
        case OP_CALL:
            if (put_call(c, in, &pos, out, kv) < 0) return -1;
            break;
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
    /* a table without a key: wire.KEYLESS_HASH (crc32 of the empty key text) */
    hash = has_key ? crc32_of((const uint8_t *)key->p, key->len) : 0;
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

static void free_keys(KeyValue *kv, int n) {
    for (int i = 0; i < n; i++) PyMem_Free(kv[i].text.p);
}

static PyObject *Program_events(Program *self, PyObject *args) {
    if (!self->cols) {  /* __init__ failed or was never called */
        PyErr_SetString(PyExc_RuntimeError, "the Program is not built");
        return NULL;
    }
    int mode;
    PyObject *body;
    Py_buffer view;
    Py_ssize_t start;
    if (!PyArg_ParseTuple(args, "iOn", &mode, &body, &start)) return NULL;
    if (PyObject_GetBuffer(body, &view, PyBUF_SIMPLE) < 0) return NULL;
    Input in = {view.buf, view.len, PyBytes_Check(body) ? body : NULL, 0};
    Py_ssize_t pos = start;
    PyObject *list = PyList_New(0);
    Buf before = {0}, after = {0}, key0 = {0}, key1 = {0}, scratch = {0};
    KeyValue *kv = PyMem_Calloc(self->nkeys ? self->nkeys : 1, sizeof(KeyValue));
    int has_key = self->nkeys > 0;
    if (!kv) PyErr_NoMemory();
    if (!list || !kv) goto fail;
    while (pos < in.end) {
        before.len = key0.len = 0;
        if (put_row(self, &in, &pos, &before, kv) < 0) goto fail;
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
            if (put_row(self, &in, &pos, &after, kv) < 0) goto fail;
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
    goto done;
fail:
    Py_CLEAR(list);
done:
    PyMem_Free(before.p); PyMem_Free(after.p); PyMem_Free(key0.p); PyMem_Free(key1.p);
    PyMem_Free(scratch.p);
    if (kv) free_keys(kv, self->nkeys);
    PyMem_Free(kv);
    if (in.owned) Py_DECREF(in.obj);
    PyBuffer_Release(&view);
    return list;
}

/* -- construction -------------------------------------------------------------------------- */
/* A tuple of bytes objects, referenced by the column. */
static int bytes_tuple(PyObject *t, PyObject **out) {
    if (!PyTuple_Check(t)) {
        PyErr_SetString(PyExc_TypeError, "members must be a tuple");
        return -1;
    }
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(t); i++)
        if (!PyBytes_Check(PyTuple_GET_ITEM(t, i))) {
            PyErr_SetString(PyExc_TypeError, "members must be bytes");
            return -1;
        }
    Py_INCREF(t);
    *out = t;
    return 0;
}

/* (op, size, signed, union, nullable, key slot, a, b, extra); a and b: DECIMAL's precision
 * and scale, the fsp of DATETIME2 / TIMESTAMP2 / TIME2, COPY's base64 key flag, PAD's length,
 * UINT64's big-endian flag. extra: ENUM (members, default, key texts, key default), SET
 * (members' Avro strings, key texts), CHARMAP (256 bytes or None), CALL (decode, encode,
 * key formatter or None). */
static int parse_col(Col *c, PyObject *spec) {
    PyObject *extra;
    int a, b;
    if (!PyArg_ParseTuple(spec, "iiiiiiiiO", &c->op, &c->size, &c->is_signed, &c->uni,
                          &c->nullable, &c->key, &a, &b, &extra))
        return -1;
    if (c->op == OP_DECIMAL) {
        static const int dig2bytes[10] = {0, 1, 1, 2, 2, 3, 3, 4, 4, 4};
        if (a > 65 || a < b || b > 30 || b < 0) {
            PyErr_SetString(PyExc_ValueError, "DECIMAL precision above 65");
            return -1;
        }
        int intg0 = (a - b) / 9, intg0x = (a - b) % 9;
        int frac0 = b / 9, frac0x = b % 9, g = 0;
        if (intg0x) { c->gbytes[g] = dig2bytes[intg0x]; c->gdigits[g++] = intg0x; }
        for (int k = 0; k < intg0 + frac0; k++) { c->gbytes[g] = 4; c->gdigits[g++] = 9; }
        if (frac0x) { c->gbytes[g] = dig2bytes[frac0x]; c->gdigits[g++] = frac0x; }
        c->ngroups = g;
        c->int_groups = (intg0x ? 1 : 0) + intg0;
        c->scale = b;
        c->dsize = 0;
        for (int k = 0; k < g; k++) c->dsize += c->gbytes[k];
    }
    if (c->op == OP_DATETIME2 || c->op == OP_TIMESTAMP2 || c->op == OP_TIME2) {
        static const int64_t mult[3] = {10000, 100, 1};
        if (a < 0 || a > 6) {
            PyErr_SetString(PyExc_ValueError, "fractional seconds beyond 6 digits");
            return -1;
        }
        c->frac_bytes = (a + 1) / 2;
        c->frac_mult = c->frac_bytes ? mult[c->frac_bytes - 1] : 0;
    }
    c->b64 = c->op == OP_COPY && a;
    c->pad = c->op == OP_PAD ? a : 0;
    c->big_endian = c->op == OP_UINT64 && a;
    if (c->op == OP_ENUM) {
        PyObject *table, *dflt, *keys, *key_dflt;
        if (!PyArg_ParseTuple(extra, "OSOS", &table, &dflt, &keys, &key_dflt)) return -1;
        if (bytes_tuple(table, &c->members) < 0 || bytes_tuple(keys, &c->key_members) < 0)
            return -1;
        if (PyTuple_GET_SIZE(table) != PyTuple_GET_SIZE(keys)) {
            PyErr_SetString(PyExc_ValueError, "as many key texts as members");
            return -1;
        }
        Py_INCREF(dflt);
        Py_INCREF(key_dflt);
        c->member_default = dflt;
        c->key_default = key_dflt;
    }
    if (c->op == OP_SET) {
        PyObject *table, *keys;
        if (!PyArg_ParseTuple(extra, "OO", &table, &keys)) return -1;
        if (bytes_tuple(table, &c->members) < 0 || bytes_tuple(keys, &c->key_members) < 0)
            return -1;
        if (PyTuple_GET_SIZE(table) != PyTuple_GET_SIZE(keys) || PyTuple_GET_SIZE(table) > 64) {
            PyErr_SetString(PyExc_ValueError, "at most 64 members, as many key texts");
            return -1;
        }
    }
    if (c->op == OP_CHARMAP) {
        if (!PyTuple_Check(extra) || PyTuple_GET_SIZE(extra) != 256) {
            PyErr_SetString(PyExc_TypeError, "a charset map is a tuple of 256");
            return -1;
        }
        c->cmap = PyMem_Calloc(256, 4);
        if (!c->cmap) { PyErr_NoMemory(); return -1; }
        for (int i = 0; i < 256; i++) {
            PyObject *m = PyTuple_GET_ITEM(extra, i);
            if (m == Py_None) continue;
            if (!PyBytes_Check(m) || PyBytes_GET_SIZE(m) < 1 || PyBytes_GET_SIZE(m) > 3) {
                PyErr_SetString(PyExc_ValueError, "a charset maps a byte to 1-3 bytes");
                return -1;
            }
            memcpy(c->cmap[i], PyBytes_AS_STRING(m), PyBytes_GET_SIZE(m));
            c->cmap[i][3] = (uint8_t)PyBytes_GET_SIZE(m);
        }
    }
    if (c->op == OP_CALL) {
        if (!PyArg_ParseTuple(extra, "OOO", &c->decode, &c->encode, &c->keyfmt)) return -1;
        Py_INCREF(c->decode);
        Py_INCREF(c->encode);
        Py_INCREF(c->keyfmt);
        if (!PyCallable_Check(c->decode) || !PyCallable_Check(c->encode) ||
            (c->key >= 0 && !PyCallable_Check(c->keyfmt))) {
            PyErr_SetString(PyExc_TypeError, "a Python column needs its callables");
            return -1;
        }
    }
    if (c->op < OP_INT || c->op > OP_CALL ||
        (c->op == OP_INT && c->size != 1 && c->size != 2 && c->size != 4 && c->size != 8) ||
        ((c->op == OP_COPY || c->op == OP_PAD || c->op == OP_CHARMAP) &&
         (c->size < 1 || c->size > 4)) ||
        ((c->op == OP_UUID || c->op == OP_INET6) && c->size != 1) ||
        ((c->op == OP_UINT64 || c->op == OP_BIT) && (c->size < 1 || c->size > 8)) ||
        ((c->op == OP_ENUM) && (c->size < 1 || c->size > 2)) ||
        ((c->op == OP_SET) && (c->size < 1 || c->size > 8))) {
        PyErr_SetString(PyExc_ValueError, "bad column form or width");
        return -1;
    }
    return 0;
}

static void Program_dealloc(Program *self) {
    if (self->cols)
        for (int i = 0; i < self->ncols; i++) {
            Col *c = &self->cols[i];
            Py_XDECREF(c->members);
            Py_XDECREF(c->member_default);
            Py_XDECREF(c->key_members);
            Py_XDECREF(c->key_default);
            Py_XDECREF(c->decode);
            Py_XDECREF(c->encode);
            Py_XDECREF(c->keyfmt);
            PyMem_Free(c->cmap);
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
    if (ncols < 1 || ncols > 4096 || nkeys > ncols || source_len > 255 || version < 0 ||
        version > 65535) {
        PyErr_SetString(PyExc_ValueError, "1-4096 columns, a source of at most 255 bytes");
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
        if (!PyArg_ParseTuple(PyTuple_GET_ITEM(keys, n), "iS", &kp->col, &prefix))
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
