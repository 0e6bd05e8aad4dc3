"""The schema registry's state: subjects, their versions, global schema ids and compatibility
levels, kept as Confluent's registry keeps them, in an append-only log in a data directory (as
Confluent's registry keeps its ``_schemas`` topic).

- A schema is identified by its parsed JSON (whitespace, key order and ``{"type": "int"}`` vs
  ``"int"`` do not matter): the same schema under two subjects has one id, as in Confluent's.
- Ids are global, from 1, never reused; versions count from 1 per subject.
- Every change is one JSON line, written and fsynced before the answer: ids and versions
  survive a restart or a crash. A torn last line (a crash mid-write, never acknowledged) is
  dropped when the log is read. One process owns a data directory (an exclusive lock).
- Compatibility levels are stored and reported, not enforced: every valid Avro schema is
  accepted (say so to users who rely on Confluent's checks).

Errors are ``RegistryProblem``: the HTTP status and Confluent's ``error_code`` and message.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import fastavro

from sluice.errors import ConfigError

__all__ = ["LEVELS", "Registered", "RegistryProblem", "SchemaStore", "canonical_schema"]

log = logging.getLogger(__name__)
LOG_NAME = "schemas.log"
DEFAULT_LEVEL = "BACKWARD"
LEVELS = frozenset(
    {
        "NONE",
        "BACKWARD",
        "BACKWARD_TRANSITIVE",
        "FORWARD",
        "FORWARD_TRANSITIVE",
        "FULL",
        "FULL_TRANSITIVE",
    }
)
MAX_VERSION = 2**31 - 1


class RegistryProblem(Exception):
    """An error answer in Confluent's form: ``{"error_code": code, "message": message}``."""

    def __init__(self, status: int, code: int, message: str) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message

    def body(self) -> dict[str, Any]:
        return {"error_code": self.code, "message": self.message}


def subject_not_found(subject: str) -> RegistryProblem:
    return RegistryProblem(404, 40401, f"Subject '{subject}' not found.")


def version_not_found(version: int | str) -> RegistryProblem:
    return RegistryProblem(404, 40402, f"Version {version} not found.")


def schema_not_found(schema_id: int | None = None) -> RegistryProblem:
    message = "Schema not found" if schema_id is None else f"Schema {schema_id} not found"
    return RegistryProblem(404, 40403, message)


def invalid_schema(message: str) -> RegistryProblem:
    return RegistryProblem(422, 42201, message)


def invalid_version(text: str) -> RegistryProblem:
    return RegistryProblem(
        422,
        42202,
        f"The specified version '{text}' is not a valid version id. "
        'Allowed values are between [1, 2^31-1] and the string "latest"',
    )


def invalid_level() -> RegistryProblem:
    return RegistryProblem(
        422,
        42203,
        "Invalid compatibility level. Valid values are none, backward, forward, full, "
        "backward_transitive, forward_transitive, and full_transitive",
    )


def parse_version(text: str) -> int | None:
    """A version path segment: a number in [1, 2^31-1], or ``latest``/``-1`` (None)."""
    if text in ("latest", "-1"):
        return None
    try:
        number = int(text)
    except ValueError:
        raise invalid_version(text) from None
    if not 1 <= number <= MAX_VERSION:
        raise invalid_version(text)
    return number


def _normal(node: Any) -> Any:
    """A schema's JSON with the spellings Avro treats as one made one: ``{"type": "int"}``
    is ``"int"``; object key order is dropped by ``sort_keys`` later."""
    if isinstance(node, dict):
        if list(node) == ["type"] and isinstance(node["type"], str):
            return node["type"]
        return {k: _normal(v) for k, v in node.items()}
    if isinstance(node, list):
        return [_normal(v) for v in node]
    return node


def _check_records(node: Any) -> None:
    """What Avro's own parser requires and fastavro lets pass: a record's ``fields`` list,
    each field's ``name`` and ``type``."""
    if isinstance(node, list):
        for branch in node:
            _check_records(branch)
    elif isinstance(node, dict):
        if node.get("type") in ("record", "error"):
            fields = node.get("fields")
            if not isinstance(fields, list):
                raise ValueError(f"record {node.get('name')!r} has no fields")
            for field in fields:
                if not isinstance(field, dict) or "name" not in field or "type" not in field:
                    raise ValueError(f"a field of record {node.get('name')!r} lacks name or type")
                _check_records(field["type"])
        for key in ("items", "values"):
            if key in node:
                _check_records(node[key])
        if isinstance(node.get("type"), (dict, list)):
            _check_records(node["type"])


def canonical_schema(text: str) -> tuple[str, str]:
    """``(compact text, identity)`` of an Avro schema's text: the text kept and served (its
    JSON without whitespace), and what two texts of one schema share. Invalid JSON or an
    invalid Avro schema is 42201, as Confluent answers."""
    if not text or not text.strip():
        raise invalid_schema("Empty schema")
    try:
        parsed = json.loads(text)
    except ValueError as exc:
        raise invalid_schema(f"Invalid schema {text[:200]}: {exc}") from None
    try:
        _check_records(parsed)
        fastavro.parse_schema(parsed, _write_hint=False)
    except Exception as exc:  # fastavro raises SchemaParseException, ValueError, KeyError...
        raise invalid_schema(f"Invalid schema {text[:200]}: {exc}") from None
    compact = json.dumps(parsed, separators=(",", ":"), ensure_ascii=False)
    identity = json.dumps(_normal(parsed), separators=(",", ":"), sort_keys=True)
    return compact, identity


@dataclass(frozen=True, slots=True)
class Registered:
    """One version of one subject: Confluent's ``{"subject", "version", "id", "schema"}``."""

    subject: str
    version: int
    id: int
    schema: str

    def to_json(self) -> dict[str, Any]:
        return {
            "subject": self.subject,
            "version": self.version,
            "id": self.id,
            "schema": self.schema,
        }


@dataclass(slots=True)
class _Version:
    version: int
    id: int
    deleted: bool = False


class SchemaStore:
    """The registry's state, in ``data_dir`` (None: in memory only, for tests). ``close()``
    releases the directory."""

    def __init__(self, data_dir: Path | None = None) -> None:
        self.schemas: dict[int, str] = {}  # id -> compact text
        self._ids: dict[str, int] = {}  # identity -> id
        self._subjects: dict[str, list[_Version]] = {}
        self.levels: dict[str | None, str] = {}  # None: the global level
        self._log: IO[str] | None = None
        if data_dir is not None:
            self._open(Path(data_dir))

    # -- persistence ---------------------------------------------------------------------------
    def _open(self, data_dir: Path) -> None:
        try:
            data_dir.mkdir(parents=True, exist_ok=True)
            path = data_dir / LOG_NAME
            handle = path.open("a+", encoding="utf-8")
        except OSError as exc:
            raise ConfigError(f"cannot use --data-dir {data_dir}: {exc.strerror}") from None
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            handle.close()
            raise ConfigError(
                f"--data-dir {data_dir} is in use by another registry: stop it or pick another"
            ) from None
        handle.seek(0)
        text = handle.read()
        lines = text.split("\n")
        good = 0  # bytes of whole, readable records
        for line in lines[:-1]:  # the last piece has no newline: a torn write or nothing
            try:
                self._apply(json.loads(line))
            except (ValueError, KeyError, TypeError):
                break
            good += len(line.encode()) + 1
        if good < len(text.encode()):
            log.warning("schema log %s: dropped a torn record at byte %d", path, good)
            handle.truncate(good)
        handle.seek(0, os.SEEK_END)
        self._log = handle
        log.info("schema registry store %s: %d schemas, %d subjects", path, len(self.schemas),
                 len(self._subjects))  # fmt: skip

    def close(self) -> None:
        if self._log is not None:
            self._log.close()  # releases the lock
            self._log = None

    def _record(self, record: dict[str, Any]) -> None:
        """Apply a change and make it durable before anyone is told of it."""
        if self._log is not None:
            self._log.write(json.dumps(record, separators=(",", ":"), ensure_ascii=False) + "\n")
            self._log.flush()
            os.fsync(self._log.fileno())
        self._apply(record)

    def _apply(self, record: dict[str, Any]) -> None:
        op = record["op"]
        if op == "schema":
            schema_id, text = int(record["id"]), str(record["schema"])
            self.schemas[schema_id] = text
            self._ids[canonical_schema(text)[1]] = schema_id
        elif op == "version":
            versions = self._subjects.setdefault(str(record["subject"]), [])
            versions.append(_Version(int(record["version"]), int(record["id"])))
        elif op == "delete":
            subject, permanent = str(record["subject"]), bool(record["permanent"])
            if permanent:
                self._subjects.pop(subject, None)
            else:
                for v in self._subjects.get(subject, []):
                    v.deleted = True
        elif op == "config":
            scope = None if record.get("subject") is None else str(record["subject"])
            if record.get("level") is None:
                self.levels.pop(scope, None)
            else:
                self.levels[scope] = str(record["level"])
        else:
            raise ValueError(f"unknown record {op!r}")

    # -- schemas and subjects ------------------------------------------------------------------
    def register(self, subject: str, text: str) -> Registered:
        """Register ``text`` under ``subject``; an existing live version with the same schema
        is returned as it is (same id, same version)."""
        compact, identity = canonical_schema(text)
        schema_id = self._ids.get(identity)
        if schema_id is not None:
            for v in self._live(subject):
                if v.id == schema_id:
                    return Registered(subject, v.version, v.id, self.schemas[v.id])
        if schema_id is None:
            schema_id = max(self.schemas, default=0) + 1
            self._record({"op": "schema", "id": schema_id, "schema": compact})
        version = max((v.version for v in self._subjects.get(subject, [])), default=0) + 1
        self._record({"op": "version", "subject": subject, "version": version, "id": schema_id})
        log.info("registered schema %d as %s version %d", schema_id, subject, version)
        return Registered(subject, version, schema_id, self.schemas[schema_id])

    def lookup(self, subject: str, text: str) -> Registered:
        """The live version of ``subject`` holding this schema (40401, 40403 when none)."""
        live = self.versions(subject)
        schema_id = self._ids.get(canonical_schema(text)[1])
        for v in reversed(live):
            if v.id == schema_id:
                return Registered(subject, v.version, v.id, self.schemas[v.id])
        raise schema_not_found()

    def subjects(self, deleted: bool = False) -> list[str]:
        return sorted(
            s for s, vs in self._subjects.items() if deleted or any(not v.deleted for v in vs)
        )

    def _live(self, subject: str) -> list[_Version]:
        return [v for v in self._subjects.get(subject, []) if not v.deleted]

    def versions(self, subject: str, deleted: bool = False) -> list[_Version]:
        """The versions of ``subject`` (40401 when it has none)."""
        found = self._subjects.get(subject, []) if deleted else self._live(subject)
        if not found:
            raise subject_not_found(subject)
        return found

    def version(self, subject: str, version: int | None) -> Registered:
        """One version (None: the latest) of ``subject``."""
        live = self.versions(subject)
        match = (
            live[-1] if version is None else next((v for v in live if v.version == version), None)
        )
        if match is None:
            raise version_not_found(version if version is not None else "latest")
        return Registered(subject, match.version, match.id, self.schemas[match.id])

    def schema(self, schema_id: int) -> str:
        """A schema's text by id (40403 once no subject holds it any more)."""
        if schema_id not in self.schemas or not self.uses(schema_id, deleted=True):
            raise schema_not_found(schema_id)
        return self.schemas[schema_id]

    def uses(self, schema_id: int, deleted: bool = False) -> list[tuple[str, int]]:
        """``(subject, version)`` of every version holding the schema."""
        return [
            (subject, v.version)
            for subject, versions in sorted(self._subjects.items())
            for v in versions
            if v.id == schema_id and (deleted or not v.deleted)
        ]

    def delete_subject(self, subject: str, permanent: bool = False) -> list[int]:
        """Confluent's two steps: a soft delete hides the versions (their ids stay readable);
        a permanent one, only after it, forgets them."""
        every = self._subjects.get(subject, [])
        if not every:
            raise subject_not_found(subject)
        live = [v.version for v in every if not v.deleted]
        if permanent and live:
            raise RegistryProblem(
                404,
                40405,
                f"Subject '{subject}' was not deleted first before being permanently deleted",
            )
        if not permanent and not live:
            raise RegistryProblem(404, 40404, f"Subject '{subject}' was soft deleted.")
        self._record({"op": "delete", "subject": subject, "permanent": permanent})
        return live if not permanent else [v.version for v in every]

    # -- compatibility levels (stored, not enforced) ----------------------------------------
    def level(self, subject: str | None = None, fallback: bool = False) -> str:
        found = self.levels.get(subject)
        if found is not None:
            return found
        if subject is None or fallback:
            return self.levels.get(None, DEFAULT_LEVEL)
        raise RegistryProblem(
            404,
            40408,
            f"Subject '{subject}' does not have subject-level compatibility configured",
        )

    def set_level(self, level: Any, subject: str | None = None) -> str:
        if not isinstance(level, str) or level.upper() not in LEVELS:
            raise invalid_level()
        self._record({"op": "config", "subject": subject, "level": level.upper()})
        return level.upper()

    def clear_level(self, subject: str | None = None) -> str:
        previous = self.level(subject)
        self._record({"op": "config", "subject": subject, "level": None})
        return previous
