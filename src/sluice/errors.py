"""The one error root of Sluice.

Tree::

    SluiceError
    ├── ConfigError            bad configuration or arguments (not retriable)
    │   └── SchemaRejected     a schema registry refused a schema or a request (HTTP 4xx)
    ├── SourceError            the source database refused or failed
    │   ├── SourceSetupError   server settings or privileges are wrong (not retriable)
    │   └── SourceConnectionError  the server went away (retriable)
    ├── DecodeError            a log event or value could not be decoded exactly
    │   └── UnreadableEvent    a binlog event capture does not read (it stops capture)
    ├── SchemaError            unknown source or schema version
    ├── WindowTooLarge         a window does not fit in the event buffer
    ├── CheckpointError        a checkpoint is corrupt or from the future (not retriable)
    ├── Interrupted            SIGINT/SIGTERM stopped a command; its work so far is kept
    ├── Fenced                 a group member wrote for a partition it no longer owns (refused)
    ├── CoordinatorUnavailable ZooKeeper could not be reached (retriable)
    ├── RegistryUnavailable    a schema registry could not be reached or failed (retriable)
    └── RelayError             a relay answered with an error
        ├── RelayUnavailable   no relay could be reached (retriable)
        ├── BootstrapRequired  the relay no longer holds the requested SCN (HTTP 410)
        ├── LogGap             the bootstrap log lacks part of the requested range (HTTP 410)
        └── BadRequest         the relay rejected the request (HTTP 4xx)
"""

from __future__ import annotations

from typing import Any


class SluiceError(Exception):
    """Root of every error Sluice raises on purpose."""

    retriable: bool = False

    def __init__(self, message: str, *, scn: int | None = None, source: str | None = None) -> None:
        super().__init__(message)
        self.scn = scn
        self.source = source


class ConfigError(SluiceError):
    """Bad configuration or arguments; fix the input and try again."""


class SchemaRejected(ConfigError):
    """A schema registry answered a request with an error (HTTP 4xx): ``subject`` and the
    registry's ``error_code`` (Confluent's, e.g. 42201 invalid schema, 40901 incompatible)."""

    def __init__(self, message: str, *, subject: str | None, error_code: int | None) -> None:
        super().__init__(message)
        self.subject = subject
        self.error_code = error_code


class SourceError(SluiceError):
    """The source database failed."""


class SourceSetupError(SourceError):
    """The source server is not configured for CDC (settings, privileges, unknown table)."""


class SourceConnectionError(SourceError):
    """The source server could not be reached or dropped the connection."""

    retriable = True


class DecodeError(SluiceError):
    """A binlog event or value could not be decoded exactly."""


class UnreadableEvent(DecodeError):
    """The binlog holds an event capture does not read (compressed or partial rows, an XA
    prepare, an unknown type inside a transaction): capture stops there rather than skip
    changes. ``event_type`` is its type code, ``position`` the ``file:pos`` it ends at; the
    message names the setting to fix."""

    def __init__(
        self, message: str, *, event_type: int, position: str, scn: int | None = None
    ) -> None:
        super().__init__(message, scn=scn)
        self.event_type = event_type
        self.position = position


class SchemaError(SluiceError):
    """An unknown source or schema version."""


class WindowTooLarge(SluiceError):
    """A window does not fit in the event buffer."""


class CheckpointError(SluiceError):
    """A checkpoint is corrupt, or ahead of what the relay has ever seen."""


class Interrupted(SluiceError):
    """SIGINT or SIGTERM stopped a command; what it finished is kept (run it again)."""


class Fenced(SluiceError):
    """A write for a partition was refused because another member of its group took the
    partition over (its ownership epoch moved on): nothing was written; the partition is
    that member's now."""

    def __init__(self, message: str, *, partition: int | None = None) -> None:
        super().__init__(message)
        self.partition = partition


class CoordinatorUnavailable(SluiceError):
    """The group's coordinator (ZooKeeper) could not be reached: try again later."""

    retriable = True


class RegistryUnavailable(SluiceError):
    """A schema registry could not be reached, or failed (HTTP 5xx): try again later."""

    retriable = True


class RelayError(SluiceError):
    """A relay (or bootstrap server) answered with an error."""


class RelayUnavailable(RelayError):
    """No relay could be reached."""

    retriable = True


class BootstrapRequired(RelayError):
    """The relay no longer holds the requested SCN: the consumer needs a bootstrap."""

    def __init__(self, message: str, *, scn: int | None = None, oldest_scn: int | None = None):
        super().__init__(message, scn=scn)
        self.oldest_scn = oldest_scn


class LogGap(RelayError):
    """The bootstrap log lacks the windows ``(after_scn, until_scn]``: the job fell behind the
    relay and the source had purged those binlogs. A consumer behind it cannot catch up
    exactly; it must drop its state and start again from a snapshot."""

    def __init__(self, message: str, *, scn: int | None, after_scn: int, until_scn: int) -> None:
        super().__init__(message, scn=scn)
        self.after_scn = after_scn
        self.until_scn = until_scn


class BadRequest(RelayError):
    """The relay rejected the request as malformed."""


def first_line(exc: BaseException) -> str:
    """An exception's message, its first line (a driver's detail lines are context a log line
    or an error sentence does not need), or its repr when it has no message."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else repr(exc)


def raise_for_status(status: int, body: dict[str, Any], url: str, since_scn: int | None) -> None:
    """The error a relay's (or bootstrap server's) HTTP answer ``status`` with its JSON
    ``body`` means (shared by the async client and Spark's blocking reader)."""
    message = f"{url}: {body.get('error', f'HTTP {status}')}"
    if status == 410 and isinstance(body.get("gap"), list) and len(body["gap"]) == 2:
        after, until = (int(v) for v in body["gap"])
        raise LogGap(message, scn=since_scn, after_scn=after, until_scn=until)
    if status == 410:
        raise BootstrapRequired(message, scn=since_scn, oldest_scn=body.get("oldest_scn"))
    if status == 409:
        raise CheckpointError(message, scn=since_scn)
    if status == 404 and "sources" in body:
        raise SchemaError(message)
    if 400 <= status < 500:
        raise BadRequest(message)
    raise RelayUnavailable(message)
