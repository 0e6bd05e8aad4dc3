"""Events and windows as consumers see them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

# c(reate), u(pdate), d(elete), r(ead: a snapshot row), t(runcate: every row of the source
# is gone; no key, no images, an empty payload)
Op = Literal["c", "u", "d", "r", "t"]
OPS: tuple[Op, ...] = ("c", "u", "d", "r", "t")
TRUNCATE = ord("t")

JsonRow = dict[str, Any]


@dataclass(frozen=True, slots=True)
class Event:
    """One row change; values follow the JSON mapping of the design brief."""

    scn: int
    source: str
    op: Op
    key: JsonRow | None
    before: JsonRow | None
    after: JsonRow | None
    ts_ms: int
    schema_version: int

    def to_json_dict(self) -> dict[str, Any]:
        return {
            "scn": self.scn,
            "source": self.source,
            "op": self.op,
            "key": self.key,
            "before": self.before,
            "after": self.after,
            "ts_ms": self.ts_ms,
            "schema_version": self.schema_version,
        }


@dataclass(frozen=True, slots=True)
class Window:
    """The events of one transaction, all with the same SCN."""

    scn: int
    ts_ms: int
    events: tuple[Event, ...]


@dataclass(frozen=True, slots=True)
class JsonWindow:
    """A window as JSON lines, one per event: ``Event.to_json_dict()`` encoded by
    ``json.JSONEncoder(ensure_ascii=False)``, produced without building events."""

    scn: int
    ts_ms: int
    lines: tuple[str, ...]
