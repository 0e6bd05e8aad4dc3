/* CRC-32 (zlib's polynomial, as zlib.crc32), slice by 4: the key hash of every event header.
 * Included by the compiled transcoders and the framer; crc_init() once at module init. */
#ifndef SLUICE_CRC32_H
#define SLUICE_CRC32_H
#include <stdint.h>
#include <Python.h>

static uint32_t crc_table[4][256];

static void crc_init(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = c & 1 ? 0xEDB88320u ^ (c >> 1) : c >> 1;
        crc_table[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; i++)
        for (int s = 1; s < 4; s++)
            crc_table[s][i] = (crc_table[s - 1][i] >> 8) ^ crc_table[0][crc_table[s - 1][i] & 0xFF];
}

static uint32_t crc32_of(const uint8_t *p, Py_ssize_t n) {
    uint32_t c = 0xFFFFFFFFu;
    while (n >= 4) {
        c ^= (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
        c = crc_table[3][c & 0xFF] ^ crc_table[2][(c >> 8) & 0xFF] ^
            crc_table[1][(c >> 16) & 0xFF] ^ crc_table[0][c >> 24];
        p += 4;
        n -= 4;
    }
    while (n--) c = crc_table[0][(c ^ *p++) & 0xFF] ^ (c >> 8);
    return c ^ 0xFFFFFFFFu;
}

#endif
