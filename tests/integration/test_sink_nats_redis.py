"""``sluice sink`` to NATS JetStream and Redis Streams, on real servers: the workload with the
sink SIGKILLed twice, the broker killed for a while, routing templates, a filter, bad URLs.

Both targets are exactly once: what the target holds, deduplicated by nothing but the target
itself (JetStream's ``Nats-Msg-Id`` window, Redis's rising entry IDs), equals the relay's
events, in the relay's order on each subject or stream."""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import shutil
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import nats
import pymysql
import pytest
import redis
from pydantic import SecretStr

from sluice.client import RecordWindow
from sluice.core import wire
from sluice.core.checkpoint import Online, Snapshot
from sluice.schemas import RowCodec, TableSchema
from sluice.schemas.columns import Column
from sluice.sink.config import SinkConfig
from sluice.sink.shape import Shaper, ShapeSettings
from sluice.sink.target import Batch
from sluice.sink.targets import open_target
from sluice.testing import PrivateMariaDB
from sluice.testing.brokers import PrivateNats, PrivateRedis
from sluice.testing.relays import RelayThread
from tests.integration.sink_support import (
    SOURCE_TABLES,
    SinkProcess,
    relay_events,
    run_with_kills,
    workload,
)
from tests.integration.support import (
    create_database,
    get_json,
    http_status,
    relay_config,
    run_sluice,
    wait_for,
    wait_relay_caught_up,
)

pytestmark = pytest.mark.timeout(600)
OUTAGE_S = float(os.environ.get("SLUICE_TEST_OUTAGE_S", "30"))
TABLES = [t.split(" ", 1)[0] for t in SOURCE_TABLES]
Event = dict[str, Any]
_ids = itertools.count(1)


@pytest.fixture(autouse=True)
def _fast_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    # the sink processes inherit these: back to a target within ~2 s of its return
    monkeypatch.setenv("SLUICE_SINK_RETRY_INITIAL_S", "0.1")
    monkeypatch.setenv("SLUICE_SINK_RETRY_MAX_S", "2")


@dataclass
class Shop:
    """A source database with the sink workload's tables, and a relay on them."""

    name: str
    conn: pymysql.Connection[Any]
    relay: RelayThread
    tmp: Path

    @property
    def sources(self) -> list[str]:
        return [f"{self.name}.{t}" for t in TABLES]

    def sink(self, to: str, *args: str) -> SinkProcess:
        return SinkProcess(
            ["--to", to, "--relay", self.relay.url, "--checkpoint-dir", str(self.tmp / "ckpt"),
             "--name", "n", *args],
            self.tmp / "sink.log",
        )  # fmt: skip

    def deliver_all(self, to: str, *args: str) -> None:
        """The sink from its checkpoint until it delivered what the relay holds (exit 0)."""
        wait_relay_caught_up(self.relay.url, self.conn)
        result = run_sluice(
            "sink", "--to", to, "--relay", self.relay.url, "--checkpoint-dir",
            str(self.tmp / "ckpt"), "--name", "n", "--port", "0", "--until-caught-up", *args,
        )  # fmt: skip
        assert result.returncode == 0, result.stderr

    def wait_delivered(self, sink: SinkProcess) -> dict[str, Any]:
        wait_relay_caught_up(self.relay.url, self.conn)
        stats = sink.wait_scn(int(get_json(self.relay.url + "/stats")["max_scn"]))
        assert stats["delivery"] == "exactly-once" and stats["target_up"], stats
        return stats

    def events(self) -> list[Event]:
        events = relay_events(self.relay.url, self.sources)
        assert {e["op"] for e in events} == {"c", "u", "d", "t"}
        return events


@pytest.fixture
def shop(mariadb: PrivateMariaDB, tmp_path: Path) -> Iterator[Shop]:
    name = f"shop_nr{next(_ids)}"
    conn = create_database(mariadb, name, *SOURCE_TABLES)
    sources = [f"{name}.{t}" for t in TABLES]
    try:
        with RelayThread(relay_config(mariadb, sources, tmp_path / "relay")) as relay:
            yield Shop(name, conn, relay, tmp_path)
    finally:
        conn.close()


# -- reading what the targets hold -----------------------------------------------------------


@dataclass(frozen=True)
class Message:
    route: str  # the NATS subject or the Redis stream
    body: Event
    meta: dict[str, str]  # NATS headers or the Redis entry's other fields (and its ID)


async def _nats_read(url: str, stream: str) -> list[Message]:
    nc = await nats.connect(url, allow_reconnect=False)
    try:
        js = nc.jetstream()
        state = (await js.stream_info(stream)).state
        out = []
        for seq in range(state.first_seq, state.last_seq + 1):
            msg = await js.get_msg(stream, seq)
            out.append(Message(msg.subject or "", json.loads(msg.data or b""), msg.headers or {}))
        return out
    finally:
        await nc.close()


async def _nats_delete(url: str, stream: str) -> None:
    nc = await nats.connect(url, allow_reconnect=False)
    try:
        await nc.jetstream().delete_stream(stream)
    except nats.js.errors.NotFoundError:
        pass
    finally:
        await nc.close()


def redis_read(url: str, pattern: str = "*") -> list[Message]:
    """Every entry of every stream, stream by stream."""
    client: Any = redis.Redis.from_url(url)  # its replies: bytes
    try:
        out = []
        for key in sorted(client.scan_iter(match=pattern)):
            for entry_id, fields in client.xrange(key):
                meta = {k.decode(): v.decode() for k, v in fields.items() if k != b"value"}
                meta["id"] = entry_id.decode()
                out.append(Message(key.decode(), json.loads(fields[b"value"]), meta))
        return out
    finally:
        client.close()


@pytest.fixture
def stream(nats_server: PrivateNats) -> Iterator[str]:
    """A JetStream stream name of its own, deleted afterwards (streams' subjects may not
    overlap, and the server is the session's)."""
    name = f"SHOP{next(_ids)}"
    yield name
    if nats_server.running:
        asyncio.run(_nats_delete(nats_server.url, name))


@pytest.fixture
def redis_url(redis_server: PrivateRedis) -> Iterator[str]:
    """A Redis database of its own (the server is the session's)."""
    db = next(_ids) % 15 + 1
    url = redis_server.url.rsplit("/", 1)[0] + f"/{db}"
    client = redis.Redis.from_url(url)
    client.flushdb()
    client.close()
    yield url


def by_route(messages: list[Message]) -> dict[str, list[Event]]:
    routes: dict[str, list[Event]] = defaultdict(list)
    for m in messages:
        routes[m.route].append(m.body)
    return dict(routes)


def expected_by_route(events: list[Event], route: Callable[[Event], str]) -> dict[str, list[Event]]:
    routes: dict[str, list[Event]] = defaultdict(list)
    for e in events:
        routes[route(e)].append(e)
    return dict(routes)


def assert_nats_exactly_once(messages: list[Message], events: list[Event]) -> None:
    bodies = [m.body for m in messages]
    assert len(bodies) == len(events), f"{len(bodies)} messages for {len(events)} events"
    assert bodies == events  # one stream: the relay's order throughout
    ids = [m.meta["Nats-Msg-Id"] for m in messages]
    assert len(set(ids)) == len(ids)
    for m in messages:
        assert m.meta["sluice-scn"] == str(m.body["scn"])
        assert m.meta["sluice-op"] == m.body["op"]
        assert m.meta["Content-Type"] == "application/json"


def assert_redis_exactly_once(messages: list[Message], events: list[Event], prefix: str) -> None:
    assert len(messages) == len(events), f"{len(messages)} entries for {len(events)} events"
    assert by_route(messages) == expected_by_route(events, lambda e: prefix + e["source"])
    for m in messages:
        assert m.meta["id"].split("-")[0] == m.meta["scn"] == str(m.body["scn"])
        assert m.meta["op"] == m.body["op"] and m.meta["source"] == m.body["source"]
        assert (json.loads(m.meta["key"]) if m.meta["key"] else None) == m.body["key"]
        assert m.meta["schema_version"] == str(m.body["schema_version"])


# -- exactly once through SIGKILLs -----------------------------------------------------------


def test_nats_exactly_once_after_two_sigkills(
    shop: Shop, nats_server: PrivateNats, stream: str
) -> None:
    sink = shop.sink(f"{nats_server.url}/{stream}")
    try:
        run_with_kills(shop.conn, sink, 300)
        stats = shop.wait_delivered(sink)
    finally:
        sink.stop()
    messages = asyncio.run(_nats_read(nats_server.url, stream))
    events = shop.events()
    assert_nats_exactly_once(messages, events)
    assert {m.route for m in messages} == {f"sluice.{shop.name}.{t}" for t in TABLES}
    assert stats["target_stats"]["stream"] == stream


def test_redis_exactly_once_after_two_sigkills(shop: Shop, redis_url: str) -> None:
    sink = shop.sink(redis_url)
    try:
        run_with_kills(shop.conn, sink, 300)
        shop.wait_delivered(sink)
    finally:
        sink.stop()
    assert_redis_exactly_once(redis_read(redis_url), shop.events(), "sluice:")


# -- the broker away for a while -------------------------------------------------------------


def _outage(shop: Shop, sink: SinkProcess, server: PrivateNats | PrivateRedis) -> None:
    """The workload with the broker killed a quarter in, for OUTAGE_S seconds."""
    killed: list[float] = []

    def kill_once(t: int) -> None:
        if t == 75:
            sink.wait_events(1)
            server.kill()
            killed.append(time.monotonic())

    work = threading.Thread(target=workload, args=(shop.conn, 300, 7, kill_once), daemon=True)
    sink.start()
    work.start()
    try:
        wait_for(lambda: killed, 120, "the workload to kill the broker")
        wait_for(
            lambda: (s := sink.stats()) and not s["target_up"] and s["retries"] > 0,
            60,
            "the sink to show its target down",
        )
        # the sink must stay up (and down) for the whole outage
        wait_for(
            lambda: (s := sink.stats()) and not s["target_up"]
            and time.monotonic() - killed[0] >= OUTAGE_S,
            OUTAGE_S + 30,
            "the outage to last",
        )  # fmt: skip
    finally:
        if not server.running:
            server.restart()
    work.join(120)
    assert not work.is_alive()
    stats = shop.wait_delivered(sink)
    assert stats["retries"] > 0 and stats["target_error"] is None


def test_nats_away_for_a_while_loses_nothing(
    shop: Shop, nats_server: PrivateNats, stream: str
) -> None:
    sink = shop.sink(f"{nats_server.url}/{stream}")
    try:
        _outage(shop, sink, nats_server)
    finally:
        sink.stop()
    assert_nats_exactly_once(asyncio.run(_nats_read(nats_server.url, stream)), shop.events())
    log = (shop.tmp / "sink.log").read_text()
    assert "unavailable" in log or "lost the windows it held" in log


def test_redis_away_for_a_while_loses_nothing(
    shop: Shop, redis_server: PrivateRedis, redis_url: str
) -> None:
    sink = shop.sink(redis_url)
    try:
        _outage(shop, sink, redis_server)
    finally:
        sink.stop()
    assert_redis_exactly_once(redis_read(redis_url), shop.events(), "sluice:")
    log = (shop.tmp / "sink.log").read_text()
    assert "unavailable" in log or "lost the windows it held" in log


# -- a frozen target (SIGSTOP: connections open, nothing answered) ----------------------------
FREEZE_S = float(os.environ.get("SLUICE_TEST_FREEZE_S", "8"))


def _frozen(shop: Shop, sink: SinkProcess, server: PrivateNats | PrivateRedis) -> None:
    """The target frozen while windows keep coming: every sample of the sink's ``/stats`` and
    ``/healthz`` says down, for longer and longer, with nothing counted as delivered; once it
    thaws, the count equals the relay's events (issue 40: it read "back" between retries,
    its down time restarted at each, and re-read events were counted again)."""
    sink.start()
    workload(shop.conn, 30)
    before = shop.wait_delivered(sink)
    server.pause()
    try:
        workload(shop.conn, 40, seed=8, first_id=10_000)  # read, and cannot be delivered
        wait_for(
            lambda: (s := sink.stats()) and not s["target_up"] and s["rewinds"] >= 1,
            60, "the sink to show its frozen target down",
        )  # fmt: skip
        began, samples, last_down = time.monotonic(), [], 0.0
        while time.monotonic() - began < FREEZE_S:  # sampled the way a prober would
            stats, health = sink.stats(), http_status(sink.url + "/healthz")[0]
            assert stats is not None
            samples.append((stats["target_up"], health, stats["target_down_s"]))
            assert not stats["target_up"] and health == 503, (stats, health)
            assert stats["target_down_s"] >= last_down, samples  # never restarts mid-outage
            last_down = stats["target_down_s"]
            assert stats["events"] == before["events"], stats  # nothing acknowledged
            assert stats["checkpoint_scn"] == before["checkpoint_scn"], stats
            time.sleep(0.1)
        final = sink.stats()
        assert final is not None and final["rewinds"] >= 2, final  # it did try again, and lost
        assert final["lag_s"] >= FREEZE_S, final  # measured from what the target committed
    finally:
        server.resume()
    after = shop.wait_delivered(sink)
    events = shop.events()
    assert after["events"] == len(events), after  # each acknowledged once, re-reads apart
    assert after["reread_events"] > 0 and after["read_events"] > len(events), after
    log = (shop.tmp / "sink.log").read_text()
    assert log.count("is back after") == 1, log[-3000:]
    assert " ERROR " not in log, log[-3000:]  # an outage is WARNINGs, never an ERROR


def test_a_frozen_redis_reads_as_down_until_it_acknowledges(
    shop: Shop, redis_server: PrivateRedis, redis_url: str
) -> None:
    sink = shop.sink(redis_url, "--target-timeout", "1")
    try:
        _frozen(shop, sink, redis_server)
    finally:
        sink.stop()
    assert_redis_exactly_once(redis_read(redis_url), shop.events(), "sluice:")


def test_a_frozen_nats_reads_as_down_until_it_acknowledges(
    shop: Shop, nats_server: PrivateNats, stream: str
) -> None:
    sink = shop.sink(f"{nats_server.url}/{stream}", "--target-timeout", "1")
    try:
        _frozen(shop, sink, nats_server)
    finally:
        sink.stop()
    assert_nats_exactly_once(asyncio.run(_nats_read(nats_server.url, stream)), shop.events())


# -- routing and filtering -------------------------------------------------------------------


def test_nats_route_template_puts_each_table_on_its_subject(
    shop: Shop, nats_server: PrivateNats, stream: str
) -> None:
    workload(shop.conn, 90)
    shop.deliver_all(f"{nats_server.url}/{stream}", "--route", "cdc.{table}")
    messages = asyncio.run(_nats_read(nats_server.url, stream))
    events = shop.events()
    assert_nats_exactly_once(messages, events)
    assert by_route(messages) == expected_by_route(
        events, lambda e: "cdc." + e["source"].split(".")[1]
    )
    assert set(by_route(messages)) == {f"cdc.{t}" for t in TABLES}
    # without its checkpoint the sink sends everything again: the stream drops it all
    shutil.rmtree(shop.tmp / "ckpt")
    shop.deliver_all(f"{nats_server.url}/{stream}", "--route", "cdc.{table}")
    assert len(asyncio.run(_nats_read(nats_server.url, stream))) == len(events)


def test_redis_stream_template_puts_each_table_on_its_stream(shop: Shop, redis_url: str) -> None:
    workload(shop.conn, 90)
    shop.deliver_all(redis_url + "?stream=cdc:{table}&maxlen=100000")
    messages = redis_read(redis_url)
    events = shop.events()
    assert len(messages) == len(events)
    assert by_route(messages) == expected_by_route(
        events, lambda e: "cdc:" + e["source"].split(".")[1]
    )
    assert set(by_route(messages)) == {f"cdc:{t}" for t in TABLES}
    # without its checkpoint the sink writes everything again: Redis refuses it all
    shutil.rmtree(shop.tmp / "ckpt")
    shop.deliver_all(redis_url + "?stream=cdc:{table}&maxlen=100000")
    assert redis_read(redis_url) == messages


def _paid(image: Event | None) -> bool:
    return image is not None and image.get("status") == "paid"


def test_redis_filter_passes_matching_rows_and_truncates(shop: Shop, redis_url: str) -> None:
    workload(shop.conn, 120)
    shop.deliver_all(redis_url, "--filter", "status = 'paid'")
    events = [e for e in shop.events() if e["op"] == "t" or _paid(e["before"]) or _paid(e["after"])]
    assert any(e["op"] == "d" for e in events) and any(e["op"] == "t" for e in events)
    messages = redis_read(redis_url)
    assert by_route(messages) == expected_by_route(events, lambda e: "sluice:" + e["source"])


# -- a bootstrap snapshot's windows ---------------------------------------------------------


def _snapshot_batches(scn: int, routes: dict[str, str]) -> list[Batch]:
    """A snapshot's windows as the sink gets them, through the shaper: all at the snapshot's
    SCN, each counting its rows from 0, the checkpoint naming its source and last row (a row
    cursor with a generation in its high bits); then a log window after it."""
    generation = 3 << 48
    codecs = {
        (source, 1): RowCodec(TableSchema(source, 1, (Column("id", "int", False, "int"),), ("id",)))
        for source in routes
    }
    shapers = {
        source: Shaper(ShapeSettings(origin="origin", route=route.replace(source, "{source}")), {})
        for source, route in routes.items()
    }

    def window(wscn: int, events: list[tuple[str, str, int]], checkpoint: Any) -> RecordWindow:
        raw = [
            wire.encode_event(
                wire.RawEvent(
                    source,
                    op,
                    1,
                    0,
                    codecs[(source, 1)].encode(None if op == "r" else [row], [row]),
                )  # type: ignore[arg-type]
            )
            for source, op, row in events
        ]
        record = wire.encode_window(wscn, generation, 0, raw)
        return RecordWindow(wscn, 0, record, lambda s, v: codecs[(s, v)], 0, True, checkpoint)

    batches = []
    for source in routes:
        for last in (2, 5):
            events = [(source, "r", last - 2 + i) for i in range(3)]
            cursor = Snapshot(scn, source, generation | last)
            batches.append(shapers[source].batch(window(scn, events, cursor)))
    log_events = [(source, "u", 0) for source in routes]
    first = next(iter(routes))
    batches.append(shapers[first].batch(window(scn + 1, log_events, Online(scn + 1))))
    return batches


async def _deliver(url: str, batches: list[Batch], again: list[Batch]) -> dict[str, Any]:
    target = open_target(SinkConfig(to=SecretStr(url), relays=["http://127.0.0.1:1"]))
    await target.start()
    try:
        for batch in [*batches, *again]:
            await target.deliver(batch)
        return target.stats()
    finally:
        await target.stop()
        await target.stop()  # safe twice


def _bodies(batches: list[Batch]) -> list[Event]:
    return [json.loads(c.body) for b in batches for c in b.changes]


def test_nats_keeps_every_snapshot_window_once(nats_server: PrivateNats, stream: str) -> None:
    """A snapshot's windows share their SCN and indexes: their ids must still differ, and a
    window sent again must still be dropped."""
    batches = _snapshot_batches(9000, {"db.a": "sluice.db.a", "db.b": "sluice.db.b"})
    url = f"{nats_server.url}/{stream}"
    stats = asyncio.run(_deliver(url, batches, [batches[1], batches[-1]]))
    assert stats["published"] == 14 and stats["duplicates"] == 5
    messages = asyncio.run(_nats_read(nats_server.url, stream))
    assert [m.body for m in messages] == _bodies(batches)


def test_redis_keeps_every_snapshot_window_once(redis_url: str) -> None:
    batches = _snapshot_batches(9000, {"db.a": "sluice:db.a", "db.b": "sluice:db.b"})
    stats = asyncio.run(_deliver(redis_url, batches, [batches[1], batches[-1]]))
    assert stats["added"] == 14 and stats["duplicates"] == 5
    messages = redis_read(redis_url)
    assert by_route(messages) == expected_by_route(
        _bodies(batches), lambda e: "sluice:" + e["source"]
    )


# -- bad URLs --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("nats://127.0.0.1:4222", "expected nats://[USER:PASSWORD@]HOST[:PORT]/STREAM"),
        ("nats://127.0.0.1:4222/", "expected nats://"),
        ("nats://127.0.0.1:4222/S?subjects=a.>", "unknown parameter 'subjects'"),
        ("nats://127.0.0.1:99999/S", "not a valid URL"),
        ("nats://127.0.0.1:4222/a.b", "stream name 'a.b' may not contain"),
        ("nats://u:secret@127.0.0.1:4222", "u:***@"),
        ("redis://127.0.0.1:6379/0?maxlen=x", "maxlen must be a positive integer, not 'x'"),
        ("redis://127.0.0.1:6379/0?maxlen=0", "maxlen must be a positive integer"),
        ("redis://127.0.0.1:6379/0?streams=x", "unknown parameter 'streams'"),
        ("redis://127.0.0.1:port/0", "not a valid URL"),
        ("redis://127.0.0.1:6379/zero", "expected redis://"),
        ("redis://:secret@127.0.0.1:6379/x", ":***@"),
    ],
)
def test_bad_urls_get_one_line_and_exit_2(url: str, message: str, tmp_path: Path) -> None:
    result = run_sluice(
        "sink", "--to", url, "--relay", "http://127.0.0.1:1", "--checkpoint-dir", str(tmp_path),
        "--port", "0",
    )  # fmt: skip
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("sluice: error"), result.stderr
    assert message in lines[0], lines[0]
    assert "secret" not in result.stderr
