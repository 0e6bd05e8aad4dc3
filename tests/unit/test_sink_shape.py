"""Shaping and planning for sinks, without servers: bodies equal the relay's JSON, column
selection keeps keys, the filter drops (or, for tables, deletes), routes render, ids are
stable; a window's changes collapse to their net effect per key; ``[[sinks]]`` config."""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from sluice.client import RecordWindow
from sluice.core import wire
from sluice.core.checkpoint import Online
from sluice.errors import ConfigError
from sluice.schemas import RowCodec, TableSchema
from sluice.schemas.columns import Column
from sluice.schemas.events import window_json
from sluice.sink.config import load_sink_config, redact
from sluice.sink.shape import Shaper, ShapeSettings, check_template
from sluice.sink.sql.plan import Clear, KeyedChanges, KeylessChange, plan

SCHEMA = TableSchema(
    "shop.orders",
    1,
    (
        Column("id", "int", False, "int"),
        Column("status", "string", False, "varchar(10)"),
        Column("amount", "decimal", True, "decimal(10,2)", 10, 2),
        Column("secret", "string", True, "text"),
    ),
    ("id",),
)
KEYLESS = TableSchema("shop.log", 1, (Column("msg", "string", True, "text"),), ())
CODECS = {("shop.orders", 1): RowCodec(SCHEMA), ("shop.log", 1): RowCodec(KEYLESS)}


def _window(*events: tuple[str, str, Any, Any], scn: int = 4_295_000_000) -> RecordWindow:
    raw = []
    for source, op, before, after in events:
        payload = b"" if op == "t" else CODECS[(source, 1)].encode(before, after)
        raw.append(wire.encode_event(wire.RawEvent(source, op, 1, 0, payload)))  # type: ignore[arg-type]
    record = wire.encode_window(scn, scn - 1, 1_700_000_000_000, raw)
    return RecordWindow(
        scn, 1_700_000_000_000, record, lambda s, v: CODECS[(s, v)], 0, True, Online(scn)
    )


def _row(i: int, status: str = "new", amount: str = "1.50") -> list[Any]:
    return [i, status, Decimal(amount), f"s{i}"]


def test_json_bodies_are_the_relays_lines_and_ids_are_stable() -> None:
    window = _window(
        ("shop.orders", "c", None, _row(1)),
        ("shop.orders", "u", _row(1), _row(1, "paid")),
        ("shop.log", "c", None, ["hello"]),
        ("shop.orders", "t", None, None),
    )
    shaper = Shaper(ShapeSettings(origin="o1", route="cdc.{table}.{op}"), {})
    batch = shaper.batch(window)
    relay_lines = list(window_json(window.record, window.codec_for).lines)
    assert [c.body.decode() for c in batch.changes] == relay_lines
    assert [c.id for c in batch.changes] == [f"o1-{window.scn}-{i}" for i in range(4)]
    assert [c.route for c in batch.changes] == [
        "cdc.orders.c",
        "cdc.orders.u",
        "cdc.log.c",
        "cdc.orders.t",
    ]
    assert batch.checkpoint == Online(window.scn) and batch.first and batch.last
    assert Shaper(ShapeSettings(origin="o1"), {}).batch(window).changes[1].id == batch.changes[1].id


def test_excluded_columns_leave_bodies_and_images_but_keys_stay() -> None:
    settings = ShapeSettings(exclude_columns=("shop.orders.secret", "shop.orders.id"))
    change = Shaper(settings, {}).batch(_window(("shop.orders", "c", None, _row(3)))).changes[0]
    body = json.loads(change.body)
    assert body["after"] == {"id": 3, "status": "new", "amount": "1.50"}
    assert change.after == [3, "new", Decimal("1.50")] and change.key == '{"id":3}'
    only = ShapeSettings(include_columns=("shop.orders.amount",))
    change = Shaper(only, {}).batch(_window(("shop.orders", "c", None, _row(3)))).changes[0]
    assert json.loads(change.body)["after"] == {"id": 3, "amount": "1.50"}


def test_the_filter_drops_for_brokers_and_deletes_for_tables() -> None:
    window = _window(
        ("shop.orders", "c", None, _row(1, "draft")),  # never matches: dropped
        ("shop.orders", "c", None, _row(2, "new", "500")),
        ("shop.orders", "u", _row(2, "new", "500"), _row(2, "new", "5")),  # leaves
        ("shop.orders", "d", _row(2, "new", "5"), None),  # a delete of a row already gone
        ("shop.orders", "t", None, None),
    )
    text = "status != 'draft' and amount > 100"
    brokers = Shaper(ShapeSettings(filter=text), {}).batch(window)
    assert [(c.op, c.index) for c in brokers.changes] == [("c", 1), ("u", 2), ("t", 4)]
    tables = Shaper(ShapeSettings(filter=text, bodies=False, filtered_as_deletes=True), {})
    changes = tables.batch(window).changes
    assert [(c.op, c.index) for c in changes] == [("d", 0), ("c", 1), ("d", 2), ("t", 4)]
    assert changes[2].before == _row(2, "new", "500") and changes[2].after is None
    assert tables.filtered == 2  # the draft insert and the delete of a row already gone


def test_a_window_collapses_to_its_net_effect_per_key() -> None:
    shaper = Shaper(ShapeSettings(bodies=False), {})
    window = _window(
        ("shop.orders", "c", None, _row(1)),
        ("shop.orders", "u", _row(1), _row(1, "paid")),
        ("shop.orders", "u", _row(2), _row(20)),  # a key change: 2 goes, 20 comes
        ("shop.orders", "d", _row(3), None),
        ("shop.orders", "c", None, _row(3, "again")),  # deleted then inserted: the insert
        ("shop.log", "c", None, ["a"]),
        ("shop.log", "d", ["a"], None),
        ("shop.orders", "t", None, None),
        ("shop.orders", "c", None, _row(9)),
    )
    steps = plan(shaper.batch(window).changes, {"shop.orders": "o", "shop.log": "l"})
    first, log1, log2, clear, after = steps
    assert isinstance(first, KeyedChanges) and isinstance(after, KeyedChanges)
    assert first.deletes() == [[2]]
    assert [row for _, rows in first.upserts() for row in rows] == [
        _row(1, "paid"), _row(20), _row(3, "again"),
    ]  # fmt: skip
    assert isinstance(log1, KeylessChange) and log1.insert == ["a"] and log1.delete is None
    assert isinstance(log2, KeylessChange) and log2.delete == ["a"] and log2.insert is None
    assert clear == Clear("o")
    assert [row for _, rows in after.upserts() for row in rows] == [_row(9)]


@pytest.mark.parametrize(
    ("template", "ok"), [("{db}_{table}", True), ("{nope}", False), ("{", False), ("x", True)]
)
def test_route_templates(template: str, ok: bool) -> None:
    if ok:
        assert check_template(template) == template
    else:
        with pytest.raises(ConfigError, match="template"):
            check_template(template)


def test_avro_cannot_drop_columns() -> None:
    with pytest.raises(ConfigError, match="--format avro"):
        ShapeSettings(format="avro", exclude_columns=("a.b.c",))


def test_sinks_are_read_from_the_relays_toml(tmp_path: Path) -> None:
    path = tmp_path / "relay.toml"
    path.write_text(
        'source = "mysql://u@h:3306"\ntables = ["shop.orders"]\nport = 7444\n'
        '[[sinks]]\nname = "a"\nto = "sqlite:///a.db"\nfilter = "id > 1"\n'
        '[[sinks]]\nname = "b"\nto = "nats://x:1/S"\nrelays = ["http://r:1"]\n'
    )
    a = load_sink_config(path, "a")
    assert a.relays == ["http://127.0.0.1:7444"] and a.filter == "id > 1"
    b = load_sink_config(path, "b", port=9)
    assert b.relays == ["http://r:1"] and b.port == 9 and b.target_url == "nats://x:1/S"
    with pytest.raises(ConfigError, match="no \\[\\[sinks\\]\\] entry named 'c'"):
        load_sink_config(path, "c")
    with pytest.raises(ConfigError, match="several"):
        load_sink_config(path, None)
    with pytest.raises(ConfigError, match="relays"):
        load_sink_config(None, None, to="sqlite:///x.db")


def test_passwords_never_show() -> None:
    assert redact("postgresql://u:secret@h:5432/db") == "postgresql://u:***@h:5432/db"
    assert "secret" not in repr(
        load_sink_config(None, None, to="redis://u:secret@h:1/0", relays=["http://r"])
    )


def test_snapshot_rows_get_ids_from_their_source_and_row_number() -> None:
    """A snapshot's windows all carry its SCN and count from 0; their indexes rise with the
    row cursor (without its generation bits) and ids name the source, so none repeats."""
    from sluice.core.checkpoint import Snapshot

    shaper = Shaper(ShapeSettings(origin="o"), {})
    seen, last_index = set(), -1
    for last in (1, 3):
        window = _window(
            ("shop.orders", "r", None, _row(last - 1)), ("shop.orders", "r", None, _row(last))
        )
        cursor = Snapshot(window.scn, "shop.orders", (5 << 48) | last)
        batch = shaper.batch(
            RecordWindow(window.scn, 0, window.record, window.codec_for, 0, True, cursor)
        )
        for change in batch.changes:
            assert change.id not in seen and change.index > last_index
            assert change.id.startswith(f"o-{window.scn}-shop.orders-")
            seen.add(change.id)
            last_index = change.index
    assert len(seen) == 4


def test_big_windows_get_the_same_changes_from_the_arrow_path() -> None:
    """Windows of BULK_EVENTS or more build JSON bodies and keys with Arrow: every field of
    every change equals the per-event path's, ids and snapshot indexes included."""
    from sluice.core.checkpoint import Snapshot
    from sluice.sink.shape import BULK_EVENTS

    events: list[tuple[str, str, Any, Any]] = []
    for i in range(BULK_EVENTS + 6):
        events += [
            ("shop.orders", "c", None, _row(i, 'q"\\\n\x01é', f"{i}.25")),
            ("shop.orders", "u", _row(i), [i, "paid", None, None]),
            ("shop.log", "c", None, [None if i % 3 else f"line {i}"]),
        ]
    events.append(("shop.orders", "d", _row(3), None))
    window = _window(*events)
    snapshot = RecordWindow(
        window.scn, window.ts_ms, window.record, window.codec_for, 0, True,
        Snapshot(window.scn, "shop.orders", 5),
    )  # fmt: skip
    single = _window(*[e for e in events if e[0] == "shop.orders"])
    for w in (window, snapshot, single):
        for keys in (True, False):
            shaper = Shaper(ShapeSettings(origin="o1", route="{table}.{op}", keys=keys), {})
            assert shaper._json_changes(w) is not None  # the Arrow path takes it
            assert shaper.batch(w) == shaper._rows(w)


def test_windows_with_a_truncate_or_a_filter_are_shaped_per_event() -> None:
    from sluice.sink.shape import BULK_EVENTS

    rows = [("shop.orders", "c", None, _row(i)) for i in range(BULK_EVENTS)]
    truncated = _window(*rows, ("shop.orders", "t", None, None))
    assert Shaper(ShapeSettings(), {})._json_changes(truncated) is None
    filtered = Shaper(ShapeSettings(filter="id > 3"), {})
    assert filtered._json_changes(_window(*rows)) is None
    assert len(filtered.batch(_window(*rows)).changes) == BULK_EVENTS - 4
