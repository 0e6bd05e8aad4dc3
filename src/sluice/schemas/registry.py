"""The schema registry: versioned table schemas stored as ``.avsc`` files in a directory."""

from __future__ import annotations

import json
import logging
import threading
from pathlib import Path

from sluice.core.names import folder_name
from sluice.errors import ConfigError, SchemaError
from sluice.files import write_atomically
from sluice.schemas.avro import RowCodec, TableSchema
from sluice.schemas.columns import Column

log = logging.getLogger(__name__)


class SchemaRegistry:
    """Thread-safe: capture registers from its thread, the relay's HTTP handlers read."""

    def __init__(self, directory: Path | None = None) -> None:
        self._dir = directory
        self._lock = threading.Lock()
        self._versions: dict[str, list[TableSchema]] = {}
        self._codecs: dict[tuple[str, int], RowCodec] = {}
        self._fingerprints: dict[str, dict[str, str]] = {}
        if directory is not None:
            try:
                directory.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise ConfigError(f"cannot create the schema dir {directory}: {exc}") from None
            self._load(directory)

    def _load(self, directory: Path) -> None:
        for path in sorted(directory.glob("*/v*.avsc")):
            try:
                schema = TableSchema.from_avro(json.loads(path.read_text("utf-8")))
            except (ValueError, SchemaError) as exc:
                raise SchemaError(f"corrupt schema file {path}: {exc}") from None
            self._versions.setdefault(schema.source, []).append(schema)
        for versions in self._versions.values():
            versions.sort(key=lambda s: s.version)

    def register(
        self, source: str, columns: tuple[Column, ...], primary_key: tuple[str, ...]
    ) -> TableSchema:
        """The version with these columns, newest first, else a new version (stored first).
        An older version matches too: the binlog read again after the buffer was lost gives
        old events their original version, not a copy of it under a new number."""
        with self._lock:
            versions = self._versions.setdefault(source, [])
            # After the highest version, not the count: a lost file must never be reused.
            number = max((s.version for s in versions), default=0) + 1
            candidate = TableSchema(source, number, columns, primary_key)
            for held in reversed(versions):
                if held.same_shape(candidate):
                    return held
            self._store(candidate)
            versions.append(candidate)
            log.info("schema of %s is now version %d", source, candidate.version)
            return candidate

    def adopt(self, schema: TableSchema) -> bool:
        """Hold ``schema`` under its own version number, stored first: a chained relay keeps
        its upstream's numbers, so its events' versions mean what they meant there. True when
        it was new. Another schema already under that number is a ``SchemaError``."""
        with self._lock:
            versions = self._versions.setdefault(schema.source, [])
            for held in versions:
                if held.version == schema.version:
                    if held.same_shape(schema):
                        return False
                    raise SchemaError(
                        f"version {schema.version} of {schema.source} here is not the "
                        "upstream's version of that number: this data dir holds schemas of "
                        "another source; start this relay with a new --data-dir",
                        source=schema.source,
                    )
            self._store(schema)
            versions.append(schema)
            versions.sort(key=lambda s: s.version)
            log.info("schema of %s version %d taken from upstream", schema.source, schema.version)
            return True

    def _store(self, schema: TableSchema) -> None:
        if self._dir is not None:
            folder = self._dir / folder_name(schema.source)  # any name as one folder
            folder.mkdir(exist_ok=True)
            text = json.dumps(schema.to_avro(), indent=2, sort_keys=True)
            write_atomically(folder / f"v{schema.version}.avsc", text)

    def add(self, schema: TableSchema) -> None:
        """Add a schema fetched from elsewhere (clients cache the relay's)."""
        with self._lock:
            versions = self._versions.setdefault(schema.source, [])
            if all(s.version != schema.version for s in versions):
                versions.append(schema)
                versions.sort(key=lambda s: s.version)

    def fingerprints(self) -> dict[str, dict[str, str]]:
        """``{source: {version: fingerprint}}`` of every version held (computed once per
        version: the relay records them on every persist)."""
        with self._lock:
            for source, versions in self._versions.items():
                known = self._fingerprints.setdefault(source, {})
                for schema in versions:
                    if str(schema.version) not in known:
                        known[str(schema.version)] = schema.fingerprint()
            return {source: dict(known) for source, known in self._fingerprints.items()}

    def path_of(self, source: str, version: int) -> Path | None:
        return None if self._dir is None else self._dir / folder_name(source) / f"v{version}.avsc"

    def sources(self) -> list[str]:
        with self._lock:
            return sorted(self._versions)

    def versions(self, source: str) -> list[TableSchema]:
        with self._lock:
            if source not in self._versions:
                raise SchemaError(f"unknown source {source!r}", source=source)
            return list(self._versions[source])

    def get(self, source: str, version: int) -> TableSchema:
        for schema in self.versions(source):
            if schema.version == version:
                return schema
        raise SchemaError(f"unknown schema version {version} of {source}", source=source)

    def codec(self, source: str, version: int) -> RowCodec:
        key = (source, version)
        codec = self._codecs.get(key)
        if codec is None:
            codec = self._codecs[key] = RowCodec(self.get(source, version))
        return codec
