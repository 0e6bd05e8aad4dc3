"""Rendering Debezium's JSON (issue 41's Kafka sink): events/s of one 1,000-event window of
``benchmarks/capture.py``'s 11-column table, in process, no servers. Three paths:

- ``dicts``: ``DebeziumFormatter.event`` and ``json.dumps`` of the envelope and the key, what
  the sink did before the text renderers (the dicts stay for Spark rows and Avro records);
- ``text``: ``DebeziumFormatter.text`` per event (value and key text, as bytes);
- ``window``: ``DebeziumFormatter.window_text``, the Kafka sink's shaper on windows of
  ``BULK_EVENTS`` or more (the payloads read in place in the record);
- ``lines``: ``DebeziumWindows.lines`` (the relay's ``format=debezium``, ``sluice tail``).

Each with ``schemas.enable`` false and true; best of REPEAT timings. Run alone:
``python -m benchmarks.debezium_render``.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from decimal import Decimal
from typing import Any

from benchmarks.common import table
from sluice.capture.mysql.capture import described_source
from sluice.core import wire
from sluice.schemas import Column, RowCodec, TableSchema
from sluice.schemas.debezium import DebeziumOptions, DebeziumWindows

EVENTS = 1000
REPEAT = int(os.environ.get("SLUICE_BENCH_REPEAT", "5"))
COLUMNS = (
    Column("id", "int", False, "bigint"),
    Column("a", "int", True, "int"),
    Column("b", "int", True, "int unsigned"),
    Column("c", "string", True, "varchar"),
    Column("d", "string", True, "varchar"),
    Column("e", "decimal", True, "decimal(10,2)", 10, 2),
    Column("f", "double", True, "double"),
    Column("g", "datetime", True, "datetime(0)"),
    Column("h", "date", True, "date"),
    Column("i", "int", True, "tinyint"),
    Column("j", "string", True, "text"),
)
SCHEMA = TableSchema("bench.t", 1, COLUMNS, ("id",))


def _record() -> bytes:
    codec = RowCodec(SCHEMA)
    events = []
    for seq in range(1, EVENTS + 1):
        row = (
            seq + 10**6, seq, seq * 7, f"name-{seq}", "x" * 40, Decimal(seq).scaleb(-2),
            seq * 1.5, 1_704_164_645_000_000, 19_724, seq % 100, "some text",
        )  # fmt: skip
        payload = codec.encode(None, row)
        events.append(wire.encode_event(wire.RawEvent(SCHEMA.source, "c", 1, seq, payload)))
    return wire.encode_window((7 << 32) | 4_000, 0, 1_700_000_000_123, events)


def _best(run: Callable[[], Any]) -> float:
    times = []
    for _ in range(REPEAT):
        began = time.perf_counter()
        run()
        times.append(time.perf_counter() - began)
    return EVENTS / min(times)


def _paths(schemas: bool) -> dict[str, Callable[[], Any]]:
    record = _record()
    codec = RowCodec(SCHEMA)
    lookup = lambda source, version: codec  # noqa: E731
    settings = {"schemas.enable": str(schemas).lower()}
    options = DebeziumOptions.parse(settings)
    windows = DebeziumWindows(described_source(1, "mariadb-bin"), options)
    formatter = windows.formatter(SCHEMA.source, 1, lookup)
    header = wire.read_window_header(record)
    raws = list(wire.decode_events(record))

    def dumps(value: Any) -> bytes:
        return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode()

    def dicts() -> None:
        for raw in raws:
            key, value = formatter.event(raw.op, raw.payload, header.scn, header.ts_ms, None, True)
            dumps(value), dumps(key)

    def text() -> None:
        for raw in raws:
            key, value = formatter.text(raw.op, raw.payload, header.scn, header.ts_ms, None, True)
            value.encode(), key and key.encode()

    spans = wire.event_spans(record)

    def window() -> None:
        keys, values, _ = formatter.window_text(
            record, spans.starts[0], spans.ops[0], header.scn, header.ts_ms
        )
        [v.encode() for v in values], [k and k.encode() for k in keys]

    return {
        "dicts": dicts,
        "text": text,
        "window": window,
        "lines": lambda: list(windows.lines(record, lookup)),
    }


def run() -> dict[str, Any]:
    results: dict[str, Any] = {"events": EVENTS}
    for schemas in (False, True):
        for name, path in _paths(schemas).items():
            results[f"{name}{'_schemas' if schemas else ''}_events_per_s"] = round(_best(path))
    return results


if __name__ == "__main__":
    found = run()
    print(table([("path", "events/s")] + [(k, f"{v:,}") for k, v in found.items()]))
