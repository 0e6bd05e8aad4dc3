"""Parsing an SCN a user gives: SCNs are source-neutral 64-bit integers, ordered as the
source's log is (each source kind says how: MySQL ``capture/mysql/scn.py``, PostgreSQL the
commit's end LSN)."""

from __future__ import annotations

from sluice.errors import ConfigError

_LOW_MASK = 0xFFFFFFFF


def parse_scn(text: str) -> int:
    """A user-supplied SCN: decimal, or the two 32-bit halves a log position is written in:
    ``FILE:POS`` (a MySQL binlog file number and position) or ``HIGH/LOW`` (a PostgreSQL LSN,
    hexadecimal, as ``pg_current_wal_lsn()`` prints it)."""
    text = text.strip()
    try:
        if ":" in text:
            high, low = (int(part) for part in text.split(":", 1))
        elif "/" in text:
            high, low = (int(part, 16) for part in text.split("/", 1))
        else:
            high, low = -1, int(text)
    except ValueError:
        raise ConfigError(
            f"not an SCN: {text!r} (expected a non-negative integer, FILE:POS or an LSN X/Y)"
        ) from None
    if high >= 0:
        if not (0 <= low <= _LOW_MASK and high <= _LOW_MASK):
            raise ConfigError(f"SCN out of range: {text!r} (each half must fit 32 bits)")
        return high << 32 | low
    if low < 0 or low >= 1 << 64:
        raise ConfigError(f"SCN out of range: {low} (must be in 0..2**64-1)")
    return low
