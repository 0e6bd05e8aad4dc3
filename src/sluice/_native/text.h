/* Key text: strict UTF-8 checked as bytes.decode() checks it, and written as
 * json.dumps(ensure_ascii=False) writes a string. Needs buf.h. */
#ifndef SLUICE_TEXT_H
#define SLUICE_TEXT_H
#include <stdint.h>
#include <stdio.h>
#include <Python.h>

/* 1: valid UTF-8 (as Python's strict decoder: no surrogates, no overlongs, <= U+10FFFF). */
static inline int utf8_ok(const unsigned char *s, Py_ssize_t n) {
    Py_ssize_t i = 0;
    while (i < n) {
        unsigned char c = s[i];
        if (c < 0x80) { i++; continue; }
        int k;
        uint32_t cp;
        if (c >= 0xC2 && c <= 0xDF) { k = 1; cp = c & 0x1F; }
        else if (c >= 0xE0 && c <= 0xEF) { k = 2; cp = c & 0x0F; }
        else if (c >= 0xF0 && c <= 0xF4) { k = 3; cp = c & 0x07; }
        else return 0;
        for (int j = 1; j <= k; j++) {
            if (i + j >= n || (s[i + j] & 0xC0) != 0x80) return 0;
            cp = cp << 6 | (s[i + j] & 0x3F);
        }
        if ((k == 2 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) ||
            (k == 3 && (cp < 0x10000 || cp > 0x10FFFF)))
            return 0;
        i += k + 1;
    }
    return 1;
}

/* `s` as a JSON string; the caller reserved 6 * n + 2 bytes. */
static inline void put_json_text(Buf *out, const uint8_t *s, Py_ssize_t n) {
    put_byte(out, '"');
    for (Py_ssize_t i = 0; i < n; i++) {
        uint8_t c = s[i];
        if (c == '"' || c == '\\') { put_byte(out, '\\'); put_byte(out, c); }
        else if (c >= 0x20) put_byte(out, c);
        else if (c == '\n') { put_byte(out, '\\'); put_byte(out, 'n'); }
        else if (c == '\r') { put_byte(out, '\\'); put_byte(out, 'r'); }
        else if (c == '\t') { put_byte(out, '\\'); put_byte(out, 't'); }
        else if (c == '\b') { put_byte(out, '\\'); put_byte(out, 'b'); }
        else if (c == '\f') { put_byte(out, '\\'); put_byte(out, 'f'); }
        else out->len += sprintf(out->p + out->len, "\\u%04x", c);
    }
    put_byte(out, '"');
}
#endif
