"""SCN arithmetic for MySQL/MariaDB: ``(binlog file number << 32) | end position`` of a
commit event, so SCNs order as the binlog does."""

from __future__ import annotations

import re
from typing import Any

from sluice.errors import ConfigError

_POS_MASK = 0xFFFFFFFF
_FILE_RE = re.compile(r"^(?P<base>.+)\.(?P<num>\d+)$")


def make_scn(file_no: int, position: int) -> int:
    """The SCN of a commit event in file ``file_no`` ending at byte ``position``."""
    return (file_no << 32) | (position & _POS_MASK)


def scn_file_no(scn: int) -> int:
    return scn >> 32


def scn_position(scn: int) -> int:
    return scn & _POS_MASK


def split_log_name(name: str) -> tuple[str, int]:
    """``binlog.000012`` -> ``("binlog", 12)``."""
    match = _FILE_RE.match(name)
    if match is None:
        raise ConfigError(f"not a binlog file name: {name!r} (expected BASE.NNNNNN)")
    return match["base"], int(match["num"])


def log_name(base: str, file_no: int) -> str:
    return f"{base}.{file_no:06d}"


def scn_of_log(name: str, position: int) -> int:
    return make_scn(split_log_name(name)[1], position)


def debezium_position(base: str) -> dict[str, dict[str, Any]]:
    """How Debezium's MySQL source block spells an SCN, declared for ``schemas/debezium.py``
    (which knows no SCN layout): ``file``, the binlog file's name (``log_name``), and ``pos``,
    the offset in it; each field as ``(scn >> shift) & mask`` through ``format``."""
    literal = base.replace("{", "{{").replace("}", "}}")
    return {
        "file": {"shift": 32, "format": literal + ".{:06d}"},
        "pos": {"mask": _POS_MASK},
    }
