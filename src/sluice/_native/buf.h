/* A growable byte buffer and Avro's zigzag LEB128: what the compiled transcoders write
 * events with. Callers reserve room (buf_reserve) before put_byte/put_varint (<= 10 bytes). */
#ifndef SLUICE_BUF_H
#define SLUICE_BUF_H
#include <stdint.h>
#include <Python.h>

typedef struct {
    char *p;
    Py_ssize_t len, cap;
} Buf;

static int buf_reserve(Buf *b, Py_ssize_t extra) {
    if (b->len + extra <= b->cap) return 0;
    Py_ssize_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + extra) cap *= 2;
    char *p = PyMem_Realloc(b->p, cap);
    if (!p) { PyErr_NoMemory(); return -1; }
    b->p = p;
    b->cap = cap;
    return 0;
}

static inline void put_byte(Buf *b, uint8_t v) { b->p[b->len++] = (char)v; }

static inline void put_varint(Buf *b, uint64_t z) {
    while (z >= 0x80) { put_byte(b, (uint8_t)(z | 0x80)); z >>= 7; }
    put_byte(b, (uint8_t)z);
}

static inline uint64_t zigzag(int64_t v) { return ((uint64_t)v << 1) ^ (uint64_t)(v >> 63); }
#endif
