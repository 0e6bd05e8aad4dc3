"""How the bootstrap log is cut into folders, whatever the source kind.

The log writer owns the cut, not the SCN: a folder ``log/source=S/after_scn=X`` holds the part
files of a run of the writer's micro-batches, ``X`` being the SCN the first of them read after
(its start offset). A new run starts every ``BUCKET_BATCHES`` batches (by batch number) and
when a writer starts on an empty log; a restarted writer goes on in the newest committed
folder. So the number of folders follows the number of batches (at most one per
``BUCKET_BATCHES``), never the SCNs' encoding: a binlog position, a PostgreSQL LSN or a
query source's microseconds give the same layout. SCNs are only compared here.

Batches are committed in SCN order, each after the one before, so every SCN in folder ``X``
is at most the next folder's ``X``. A reader that needs the SCNs above ``lowest`` therefore
needs only the folders from ``first_needed(buckets, lowest)`` on, the highest ``X`` not above
``lowest``: no file holding an SCN above ``lowest`` is ever skipped.
"""

from __future__ import annotations

from collections.abc import Iterable

from sluice.errors import ConfigError

COLUMN = "after_scn"
# Batches per folder: at the job's default trigger (2 s) a steady stream opens a folder about
# every 33 minutes, ~43 a day per source; a bigger bucket only makes pruning coarser.
BUCKET_BATCHES = 1000
_OLD = "log_file="  # folders by binlog file (SCN >> 32), before this layout


def bucket_of(path: str) -> int | None:
    """The ``after_scn`` of a log file's folder (None: a path outside this layout)."""
    for part in reversed(path.split("/")):
        name, sep, value = part.partition("=")
        if sep and name == COLUMN and value.isascii() and value.isdigit():
            return int(value)
    return None


def next_bucket(
    current: int | None, batch: int, start_scn: int, every: int = BUCKET_BATCHES
) -> int:
    """The folder batch number ``batch`` (starting after ``start_scn``) writes into: a new
    one every ``every`` batch numbers, and when there is none yet."""
    if current is None or batch % every == 0:
        return start_scn
    return current


def first_needed(buckets: Iterable[int], lowest: int) -> int | None:
    """The lowest folder that may hold an SCN above ``lowest`` (None: every folder may)."""
    below = [b for b in buckets if b <= lowest]
    return max(below) if below else None


def check_layout(uri: str, paths: Iterable[str]) -> None:
    """Refuse a log written in the old layout (folders by binlog file number)."""
    if any(f"/{_OLD}" in path for path in paths):
        raise ConfigError(
            f"store {uri} has a log in the old layout (log/source=S/log_file=F folders, cut "
            "by binlog file), which this Sluice no longer reads: run `sluice bootstrap run "
            "--seed SOURCE_URL` into a new, empty --store"
        )
