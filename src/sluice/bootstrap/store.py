"""The bootstrap store's layout, on any filesystem pyarrow understands (local path or URI).

STORE/sluice-store.json      marker + where the log starts (log_start_scn)
STORE/log/                   the change log: Parquet in Spark's file-sink layout (written by
                             bootstrap/logwriter.py, committed in log/_spark_metadata),
                             partitioned by source and after_scn (runs of the writer's
                             batches: bootstrap/logparts.py)
STORE/checkpoints/log/       stores made before the log writer: the Spark query's checkpoint
STORE/snapshots/scn=N/       one snapshot generation, consistent at SCN N for every source,
                             partitioned by source
STORE/snapshots/CURRENT      {"scn": N}: the published generation (replaced atomically)
STORE/schemas.json           every schema version of the captured sources
STORE/seeds/                 rows read from the source tables by `bootstrap seed` (seed/records.py)
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs

from sluice.errors import ConfigError

log = logging.getLogger(__name__)
MARKER = "sluice-store.json"
KEEP_SNAPSHOTS = 3
# A snapshot window's ``prev_scn`` is the client's resume cursor: its last row number, with
# the generation folder's number above this bit (``scn=N`` is 1, ``scn=N.K`` is K), so a read
# continues in the folder it started in even when the same SCN is republished.
GENERATION_SHIFT = 48
ROW_MASK = (1 << GENERATION_SHIFT) - 1
_FOLD_LOCK = threading.Lock()


@dataclass(frozen=True, slots=True)
class StoreMeta:
    log_start_scn: int
    sources: tuple[str, ...]
    added: tuple[tuple[str, int], ...] = ()  # sources added later, with where their log starts

    def start_of(self, source: str) -> int:
        """The SCN after which the log holds every change of ``source``."""
        return dict(self.added).get(source, self.log_start_scn)


@dataclass(frozen=True, slots=True, order=True)
class Gap:
    """The log of ``source`` lacks the windows ``(after_scn, until_scn]``: the job fell behind
    the relay and the source had purged those binlogs (marked by op ``g`` rows in the log)."""

    source: str
    after_scn: int
    until_scn: int

    @classmethod
    def from_marker(cls, source: str, scn: int, after: str) -> Gap:
        return cls(source, int(json.loads(after)["gap_after"]), int(scn))

    def to_json(self) -> list[int]:
        return [self.after_scn, self.until_scn]


# Characters Spark escapes (as %XX) in partition folder names (ExternalCatalogUtils).
_SPARK_ESCAPES = frozenset("\"#%'*/:=?\\\x7f{[]^") | frozenset(chr(c) for c in range(1, 32))


def dictionary_columns(schema: pa.Schema) -> list[str]:
    """The columns worth dictionary-encoding in a Parquet file of rows or events: not keys,
    key hashes and payloads, which differ from row to row (pyarrow would try a page's worth
    of each before it gave up: a third of a chunk file's write time)."""
    return [
        f.name
        for f in schema
        if f.name not in ("key", "key_hash") and not pa.types.is_binary(f.type)
    ]


def partition_dir(column: str, value: str) -> str:
    """The folder Spark's ``partitionBy`` writes for ``value`` (a source name may hold any
    character but NUL)."""
    escaped = "".join(f"%{ord(c):02X}" if c in _SPARK_ESCAPES else c for c in value)
    return f"{column}={escaped}"


def generation_of(folder: str) -> int:
    """``snapshots/scn=N`` -> 1, ``snapshots/scn=N.K`` -> K."""
    _scn, _, k = folder.rsplit("=", 1)[1].partition(".")
    return int(k or 1)


def generation_dir(scn: int, generation: int) -> str:
    return f"snapshots/scn={scn}" if generation <= 1 else f"snapshots/scn={scn}.{generation}"


def _snapshot_order(folder: str) -> tuple[int, int]:
    """``scn=N`` -> (N, 1), ``scn=N.K`` -> (N, K)."""
    scn, _, k = folder.split("=", 1)[1].partition(".")
    return int(scn), int(k or 1)


def gaps_after(gaps: list[Gap], scn: int, sources: list[str] | None = None) -> list[Gap]:
    """The gaps a reader starting after ``scn`` would cross (of ``sources``, or all)."""
    return [g for g in gaps if g.until_scn > scn and (sources is None or g.source in sources)]


# The bootstrap job's record of its folds: when one last worked, failures since, the error.
FOLD_STATUS = "fold-status.json"


class BootstrapStore:
    def __init__(self, uri: str) -> None:
        if "://" not in uri:
            uri = str(Path(uri).resolve())
        self.uri = uri.rstrip("/")
        try:
            self.fs, self.root = pafs.FileSystem.from_uri(self.uri)
            kind = self.fs.get_file_info(self.root).type
        except (ValueError, OSError) as exc:
            raise ConfigError(f"cannot open store {uri!r}: {exc}") from None
        if kind not in (pafs.FileType.Directory, pafs.FileType.NotFound):
            raise ConfigError(
                f"--store {self.uri} is a file, not a directory: give the store's folder (the "
                "one `sluice bootstrap run --store` writes), or a new one"
            )

    # -- paths (URIs for Spark, plain paths for pyarrow.fs) ----------------------------------
    def spark_path(self, *parts: str) -> str:
        return "/".join([self.uri, *parts])

    def path(self, *parts: str) -> str:
        return "/".join([self.root, *parts])

    def exists(self, *parts: str) -> bool:
        return bool(self.fs.get_file_info(self.path(*parts)).type != pafs.FileType.NotFound)

    def read_json(self, *parts: str) -> Any:
        with self.fs.open_input_stream(self.path(*parts)) as stream:
            return json.loads(stream.read())

    def write_json(self, body: Any, *parts: str) -> None:
        """Write then move into place: readers see the old file or the new one."""
        target = self.path(*parts)
        tmp = target + ".tmp"
        self.fs.create_dir(target.rsplit("/", 1)[0], recursive=True)
        with self.fs.open_output_stream(tmp) as stream:
            stream.write(json.dumps(body, indent=1).encode())
        self.fs.move(tmp, target)

    # -- schemas -----------------------------------------------------------------------------
    def read_schemas(self) -> dict[str, list[dict[str, Any]]]:
        """``schemas.json``: every Avro schema version of each source, oldest first."""
        if not self.exists("schemas.json"):
            return {}
        body: dict[str, list[dict[str, Any]]] = self.read_json("schemas.json")
        return body

    def merge_schemas(self, new: dict[str, list[dict[str, Any]]], *, keep: bool = False) -> None:
        """Add schema versions to ``schemas.json``, by version number: a version already held
        is replaced, unless ``keep``. Versions only the store knows are never dropped."""
        body = self.read_schemas()
        changed = False
        for source, schemas in new.items():
            versions = {int(v["sluice.version"]): v for v in body.get(source, [])}
            for schema in schemas:
                number = int(schema["sluice.version"])
                if not (keep and number in versions) and versions.get(number) != schema:
                    versions[number] = schema
                    changed = True
            body[source] = [versions[n] for n in sorted(versions)]
        if changed or not self.exists("schemas.json"):
            self.write_json(body, "schemas.json")

    # -- marker ------------------------------------------------------------------------------
    def create(
        self, log_start_scn: int, sources: tuple[str, ...], *, new_source_start: int | None = None
    ) -> StoreMeta:
        """Initialise a new store, or check an existing one was made for the same sources.
        With ``new_source_start``, sources it lacks are added, their log starting there
        (their earlier rows come from a seed)."""
        if self.exists(MARKER):
            meta = self.meta()
            new = [s for s in sources if s not in meta.sources]
            if not new:
                return meta
            if new_source_start is None:
                raise ConfigError(
                    f"store {self.uri} holds {', '.join(meta.sources)}; new sources need a new "
                    "store (their history before now is not in this log)"
                )
            body = self.read_json(MARKER)
            body["sources"] = [*meta.sources, *new]
            body["added"] = {**body.get("added", {}), **dict.fromkeys(new, new_source_start)}
            self.write_json(body, MARKER)
            log.info("store %s now also logs %s (seed them)", self.uri, ", ".join(new))
            return self.meta()
        self.check_empty()
        self.write_json(
            {"log_start_scn": log_start_scn, "sources": list(sources), "format": 1}, MARKER
        )
        return StoreMeta(log_start_scn, sources)

    def check_empty(self) -> None:
        """Refuse a directory that holds something other than a store."""
        info = self.fs.get_file_info(pafs.FileSelector(self.root, allow_not_found=True))
        if any(not i.base_name.endswith(".tmp") for i in info) and not self.exists(MARKER):
            raise ConfigError(
                f"{self.uri} is not empty and not a Sluice bootstrap store; "
                "give an empty or new directory"
            )

    def meta(self) -> StoreMeta:
        if not self.exists(MARKER):
            raise ConfigError(
                f"{self.uri} is not a Sluice bootstrap store (no {MARKER}); "
                "create one with `sluice bootstrap run`"
            )
        try:
            body = self.read_json(MARKER)
            added = tuple((str(k), int(v)) for k, v in body.get("added", {}).items())
            return StoreMeta(int(body["log_start_scn"]), tuple(body["sources"]), added)
        except (ValueError, KeyError, TypeError) as exc:
            raise ConfigError(f"{self.uri}/{MARKER} is corrupt: {exc}") from None

    @contextlib.contextmanager
    def fold_lock(self) -> Iterator[None]:
        """One fold at a time per store: across threads, and across processes on a local
        store (``bootstrap run`` folding while ``seed`` publishes)."""
        with _FOLD_LOCK:
            if "://" in self.uri and not self.uri.startswith("file:"):
                yield  # object stores have no lock here: run one folding process at a time
                return
            path = Path(self.root) / ".fold.lock"
            path.parent.mkdir(parents=True, exist_ok=True)
            with path.open("a") as handle:
                fcntl.flock(handle, fcntl.LOCK_EX)
                try:
                    yield
                finally:
                    fcntl.flock(handle, fcntl.LOCK_UN)

    # -- snapshots ---------------------------------------------------------------------------
    def current_snapshot(self) -> int | None:
        current = self.current()
        return None if current is None else int(current["scn"])

    def current(self) -> dict[str, Any] | None:
        """``{"scn": N, "seeds": {source: generation}}`` of the published generation."""
        if not self.exists("snapshots", "CURRENT"):
            return None
        body: dict[str, Any] = self.read_json("snapshots", "CURRENT")
        body.setdefault("seeds", {})
        return body

    def snapshot_dir(self, scn: int) -> str:
        """The folder of generation ``scn``: the current one's as CURRENT names it (a re-seed
        on an idle log republishes at the same SCN into ``scn=N.K``), else ``scn=N``."""
        current = self.current()
        if current is not None and int(current["scn"]) == scn and "dir" in current:
            return f"snapshots/{current['dir']}"
        return f"snapshots/scn={scn}"

    def new_snapshot_dir(self, scn: int) -> str:
        """A folder for a new generation at ``scn`` that no reader is using."""
        name, k = f"scn={scn}", 1
        while self.exists("snapshots", name):
            k += 1
            name = f"scn={scn}.{k}"
        return name

    def publish(self, scn: int, seeds: dict[str, int] | None = None, name: str = "") -> None:
        """Make generation ``scn`` (in folder ``name``) current; ``seeds``: the seed generation
        of each seeded source folded into it (so the next fold knows which seeds are new)."""
        name = name or f"scn={scn}"
        self.write_json({"scn": scn, "seeds": seeds or {}, "dir": name}, "snapshots", "CURRENT")
        self._prune(name)

    def generations(self) -> list[dict[str, Any]]:
        """Snapshot generations in the store, oldest first: SCN, generation, folder, and
        whether it is the one served."""
        current = self.current() or {}
        served = current.get("dir") or (f"scn={current['scn']}" if "scn" in current else None)
        return [
            {"scn": scn, "generation": k, "dir": name, "current": name == served}
            for name, (scn, k) in self._snapshot_dirs()
        ]

    def _snapshot_dirs(self) -> list[tuple[str, tuple[int, int]]]:
        """``(folder, (scn, generation))`` of each ``snapshots/scn=...`` folder, oldest first."""
        selector = pafs.FileSelector(self.path("snapshots"), allow_not_found=True)
        names = []
        for info in self.fs.get_file_info(selector):
            if info.base_name.startswith("scn=") and info.type == pafs.FileType.Directory:
                names.append((info.base_name, _snapshot_order(info.base_name)))
        return sorted(names, key=lambda item: item[1])

    def _prune(self, current: str) -> None:
        older = [n for n, key in self._snapshot_dirs() if key < _snapshot_order(current)]
        for old in older[: -(KEEP_SNAPSHOTS - 1) or None]:
            log.info("removing old snapshot generation %s", old)
            self.fs.delete_dir(self.path("snapshots", old))

    def fold_status(self) -> dict[str, Any] | None:
        """What the job's last folds did (``FOLD_STATUS``), for the server to report."""
        if not self.exists(FOLD_STATUS):
            return None
        try:
            body = self.read_json(FOLD_STATUS)
        except (OSError, ValueError):
            return None
        return body if isinstance(body, dict) else None

    def has_log(self) -> bool:
        """Whether a batch of the log was committed: before that, Spark would list the log's
        folders itself (no ``_spark_metadata`` to follow) and could read files being written."""
        infos = self.fs.get_file_info(
            pafs.FileSelector(self.path("log", "_spark_metadata"), allow_not_found=True)
        )
        return any(i.base_name.split(".")[0].isdigit() for i in infos)
