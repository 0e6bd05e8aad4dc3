"""One table version as a sink shapes it (``TableShape``): its selected columns, images, the
filter's converters and the Arrow builder of its JSON lines, made once per (source, schema
version); and the settings shaping follows (``ShapeSettings``), with the routing templates
they check."""

from __future__ import annotations

import fnmatch
import string
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from sluice.core.names import split_source
from sluice.errors import ConfigError
from sluice.schemas.arrow_decoder import arrow_decodable
from sluice.schemas.avro import RowCodec, TableSchema
from sluice.schemas.columns import KIND
from sluice.schemas.debezium import DebeziumWindows
from sluice.schemas.decoder import canonical_envelope
from sluice.sink.columnar import JsonBodies
from sluice.sink.expr import Expression, parse_filter

Format = Literal["json", "debezium", "avro"]
# prefix: topic.prefix; partition: the sink's key partition (a group's member: per partition)
ROUTE_FIELDS = ("source", "db", "table", "op", "prefix", "partition")


def check_template(template: str, what: str = "route") -> str:
    """A routing template may use ``{source}``, ``{db}``, ``{table}``, ``{op}``, ``{prefix}``,
    ``{partition}``."""
    try:
        names = [name for _, name, _, _ in string.Formatter().parse(template) if name is not None]
    except ValueError as exc:
        raise ConfigError(f"{what} template {template!r} is malformed: {exc}") from None
    for name in names:
        if name not in ROUTE_FIELDS:
            raise ConfigError(
                f"{what} template {template!r} uses {{{name}}}; it may use "
                + ", ".join("{" + f + "}" for f in ROUTE_FIELDS)
            )
    return template


@dataclass(frozen=True, slots=True)
class ShapeSettings:
    format: Format = "json"
    debezium: tuple[tuple[str, str], ...] = ()
    include_columns: tuple[str, ...] = ()  # DB.TABLE.COLUMN, shell-style patterns
    exclude_columns: tuple[str, ...] = ()
    filter: str | None = None  # for every source
    filters: tuple[tuple[str, str], ...] = ()  # (source, expression): that source only
    route: str = "{source}"
    origin: str = ""
    bodies: bool = True  # False: table targets take images, not formatted bodies
    keys: bool = True  # the canonical key text on each change (Redis's ``key`` field)
    message_keys: bool = False  # --format debezium: Debezium's key apart (``Change.key_body``)
    connect_records: bool = False  # Debezium's key and value as objects (``Change.record``)
    filtered_as_deletes: bool = False  # table targets: a row leaving the filter is deleted
    columnar: bool = False  # table targets that decode whole windows (``Batch.columns``)
    partition: int = 0  # ``{partition}`` in routes: the sink's key partition
    parsed: dict[str, Expression | None] = field(default_factory=dict, compare=False)

    def __post_init__(self) -> None:
        check_template(self.route)
        if self.format == "avro" and (self.include_columns or self.exclude_columns):
            raise ConfigError(
                "--format avro sends the relay's Avro payloads as they are, so it cannot drop "
                "columns: remove --include-column/--exclude-column, or use --format json"
            )
        for pattern in (*self.include_columns, *self.exclude_columns):
            if pattern.count(".") < 2:
                raise ConfigError(f"column pattern {pattern!r} must be DB.TABLE.COLUMN (* allowed)")
        self.parsed["*"] = parse_filter(self.filter) if self.filter else None
        for source, text in self.filters:
            self.parsed[source] = parse_filter(text)

    def expression(self, source: str) -> Expression | None:
        return self.parsed.get(source, self.parsed.get("*"))


def _selected(schema: TableSchema, settings: ShapeSettings) -> list[int]:
    """Indexes of the columns kept: included (all when no include pattern names the table),
    minus excluded; key columns are always kept (targets need them to upsert and delete)."""

    def hit(patterns: tuple[str, ...], column: str) -> bool:
        name = f"{schema.source}.{column}"
        return any(fnmatch.fnmatchcase(name, p) for p in patterns)

    table_included = [
        p
        for p in settings.include_columns
        if fnmatch.fnmatchcase(schema.source, p.rsplit(".", 1)[0])
    ]
    keep = []
    for i, col in enumerate(schema.columns):
        if col.name in schema.primary_key:
            keep.append(i)
        elif table_included and not hit(tuple(table_included), col.name):
            continue
        elif not hit(settings.exclude_columns, col.name):
            keep.append(i)
    return keep


def _filter_value(kind: str) -> Callable[[Any], Any]:
    """A canonical value as the filter sees it: the JSON mapping, but decimals stay exact."""
    if (KIND[kind].wire == "decimal" and kind != "uint64") or KIND[kind].wire == "double":
        return lambda v: v  # NaN stays a number here (JSON writes it as a string)
    return KIND[kind].canonical_json()


class TableShape:
    """One table version: its selected columns, images and filter."""

    def __init__(
        self, codec: RowCodec, settings: ShapeSettings, debezium: DebeziumWindows | None
    ) -> None:
        full = codec.schema
        self.codec = codec
        self.keep = _selected(full, settings)
        self.all_columns = len(self.keep) == len(full.columns)
        columns = tuple(full.columns[i] for i in self.keep)
        self.schema = TableSchema(full.source, full.version, columns, full.primary_key)
        self.images = canonical_envelope(full.columns)
        self.expression = settings.expression(full.source)
        self.filter_columns: list[tuple[str, int, Callable[[Any], Any]]] = []
        if self.expression is not None:
            index = {col.name: i for i, col in enumerate(full.columns)}
            self.filter_columns = [
                (name, index[name], _filter_value(full.columns[index[name]].kind))
                for name in sorted(self.expression.names)
                if name in index  # excluded columns can still be filtered on
            ]
        self.json_values = [KIND[col.kind].canonical_json() for col in columns]
        db, table = split_source(full.source)  # the filter's @source @db @table, made once
        self.meta: dict[str, Any] = {"source": full.source, "db": db, "table": table}
        self.debezium = debezium
        self._json_bodies: JsonBodies | None = None
        # Images are decoded only where something reads them: tables, the filter, JSON
        # bodies without some columns (else the body comes straight from Avro).
        self.images_needed = (
            not settings.bodies
            or self.expression is not None
            or (settings.format == "json" and not self.all_columns)
        )

    def json_bodies(self) -> JsonBodies | None:
        """The Arrow builder of this version's JSON lines (None: a kind it cannot read)."""
        if self._json_bodies is None and arrow_decodable(self.codec.schema):
            self._json_bodies = JsonBodies(self.codec.schema)
        return self._json_bodies

    def project(self, image: list[Any] | None) -> list[Any] | None:
        if image is None or self.all_columns:
            return image
        return [image[i] for i in self.keep]

    def matches(self, image: list[Any] | None, meta: Mapping[str, Any]) -> bool:
        if self.expression is None:
            return True
        if image is None:
            return False
        row = {
            name: None if image[i] is None else convert(image[i])
            for name, i, convert in self.filter_columns
        }
        return self.expression.matches(row, meta)

    def json_row(self, image: list[Any] | None) -> dict[str, Any] | None:
        if image is None:
            return None
        return {
            col.name: None if value is None else convert(value)
            for col, convert, value in zip(
                self.schema.columns, self.json_values, image, strict=True
            )
        }
