"""``sluice sink`` throughput to the brokers (NATS JetStream, Redis Streams, RabbitMQ) and to an
HTTP webhook, each against a plain loop of the same client library writing the same events
(issue 26; target >= 1.5x). The replica half is ``benchmarks/sinks.py``.

One table (5 columns) on a private MariaDB, a relay in a thread of this process, and two
workloads: ``bulk`` (WINDOWS transactions of 1,000 inserts, then WINDOWS of 1,000 updates:
2,000 x WINDOWS events) and ``small`` (3,000 single-row update transactions). Each workload is
written and captured, every target is measured on it, then the next one is written: a run
from the workload's first SCN to "caught up" holds exactly its events. WINDOWS is 100 (200,000
events) for NATS, Redis and the webhook; RabbitMQ gets 20 (40,000 events; ``bulk20`` in the
results): its baseline awaits each publisher confirm (~1,300 events/s here), so 200,000 events
would take ~2.5 minutes for the loop alone. ``small`` is 3,000 transactions everywhere.

Per target and workload, in this order: the sink, run in-process
(``asyncio.run(Sink(load_sink_config(...)).run(until_caught_up=True))``, default options,
``--format json``), timed from its start (connecting to its target) to caught up and stopped;
then the baseline, an ``AsyncClient`` (the asyncio ``Client``) with a ``JsonConsumer`` that
gets each window's JSON lines and writes them the way a user would, timed alike (its
connection included):

- NATS: ``await js.publish(subject, line, headers={"Nats-Msg-Id": "SCN-I"})`` per event
  (awaiting each ack) into a file-storage stream with JetStream's default 2-minute duplicate
  window (what the sink makes for itself);
- Redis: one pipeline of ``XADD stream * value LINE`` per window (``redis.asyncio``); the
  server's append-only file is fsynced on every write (``PrivateRedis``);
- RabbitMQ: aio-pika, a channel with publisher confirms, ``await exchange.publish(...)`` per
  event (persistent, ``message_id``), so each confirm is awaited before the next publish; both
  exchanges are durable topic exchanges with a durable queue bound to ``#``;
- webhook: one POST per window, ``{"events": [...]}`` (aiohttp); the sink POSTs chunks of its
  default ``--batch-events`` (1,000). The receiver is an aiohttp server in a thread of this
  process: it reads the body, counts the events and answers 200.

Every destination is fresh per run (its own stream, key, exchange and queue, path); afterwards
the stored events are counted and must equal the workload's (then the destination is dropped).
Third, the write-only loop (issue 40; target: the sink >= 0.8x of it): what the target itself
can take. The workload's windows are read once (untimed) and the same entries built in memory,
with the sink's IDs, fields and headers; then only the writes are timed (connection included):
JetStream publishes 1,000 in flight with ``Nats-Msg-Id``; Redis pipelines of 1,000 ``XADD
stream SCN-INDEX`` with the sink's fields; RabbitMQ persistent, mandatory messages with the
sink's headers, 1,000 published before their confirms are awaited; webhook POSTs of the sink's
``--batch-events`` (1,000) with an ``Idempotency-Key``. The sink also reads the relay, decodes
and encodes; the loop does not. The sink runs with what ``sluice sink`` sets for its process
(``core/process.py``: the startup heap frozen, rarer young collections), restored after it.

The relay, the webhook receiver and the sink or loop share this process (one GIL), as they do
in ``benchmarks/sinks.py``; the brokers are their own processes. Each contender runs ``ROUNDS``
times, interleaved (sink, client loop, write-only, then again), each on fresh destinations, and
its best round counts: one round's ratios moved by up to 1.5x between runs on this host.

Run alone: ``python -m benchmarks.sink_brokers``.
"""

from __future__ import annotations

import asyncio
import json
import os
import tempfile
import threading
import time
import urllib.request
from collections import Counter
from collections.abc import Awaitable, Callable, Coroutine
from pathlib import Path
from typing import Any

from benchmarks.common import SMALL_TABLE_ROWS, table, write_results
from sluice.client import AsyncClient, ClientConfig
from sluice.core.event import JsonWindow
from sluice.core.process import long_lived, restore
from sluice.relay import RelayConfig
from sluice.sink import Sink, load_sink_config
from sluice.sink.config import SinkConfig
from sluice.testing import PrivateMariaDB, RelayThread
from sluice.testing.brokers import PrivateNats, PrivateRabbitMQ, PrivateRedis
from sluice.testing.mariadb import free_port

# SLUICE_BENCH_SCALE shrinks the workloads for a quick check of the benchmark itself
_SCALE = float(os.environ.get("SLUICE_BENCH_SCALE", "1"))
BULK_WINDOWS = max(1, round(100 * _SCALE))
REDUCED_BULK_WINDOWS = max(1, round(20 * _SCALE))  # RabbitMQ: its baseline awaits each confirm
SMALL_TXNS = max(1, round(3000 * _SCALE))
ROUNDS = 3  # each contender's best of three interleaved rounds, as in benchmarks/sinks.py
SOURCE = "bench.t"
WEBHOOK_BATCH = int(SinkConfig.model_fields["batch_events"].default)  # events per POST

Write = Callable[[JsonWindow], Awaitable[None]]
Windows = list[tuple[int, list[str]]]
Close = Callable[[], Awaitable[None]]


# -- the source and its workloads ------------------------------------------------------------
def _max_scn(relay_url: str) -> int:
    with urllib.request.urlopen(relay_url + "/stats", timeout=30) as resp:
        return int(json.loads(resp.read())["max_scn"])


def _wait_end(relay_url: str, conn: Any) -> int:
    from sluice.capture.mysql.metadata import end_scn

    end = end_scn(conn)
    while _max_scn(relay_url) < end:
        time.sleep(0.02)
    return _max_scn(relay_url)


def _bulk(db: PrivateMariaDB, relay_url: str, windows: int, first_id: int) -> tuple[int, int]:
    """``windows`` 1,000-row insert transactions of fresh ids from ``first_id``, then as many
    1,000-row updates of them: (after_scn, events)."""
    conn = db.connect("bench")
    start = _max_scn(relay_url)
    with conn.cursor() as cur:
        for off in range(first_id - 1, first_id - 1 + windows * 1000, 1000):
            cur.execute(SMALL_TABLE_ROWS.format(off=off, n=1000))
            conn.commit()
        for off in range(first_id - 1, first_id - 1 + windows * 1000, 1000):
            cur.execute(f"UPDATE t SET a = a + 1 WHERE id BETWEEN {off + 1} AND {off + 1000}")
            conn.commit()
    _wait_end(relay_url, conn)
    conn.close()
    return start, windows * 2000


def _small(db: PrivateMariaDB, relay_url: str, txns: int) -> tuple[int, int]:
    conn = db.connect("bench")
    start = _max_scn(relay_url)
    with conn.cursor() as cur:
        for i in range(txns):
            cur.execute("UPDATE t SET a = a + 1 WHERE id = %s", (i + 1,))
            conn.commit()
    _wait_end(relay_url, conn)
    conn.close()
    return start, txns


# -- the two contenders ----------------------------------------------------------------------
def _sink(url: str, relay_url: str, after: int, checkpoints: Path) -> tuple[float, int]:
    """(seconds, events) of a sink in this process delivering everything after ``after``,
    from its start (connecting to its target) to caught up."""
    config = load_sink_config(
        None, None, to=url, relays=[relay_url], since_scn=after, port=0,
        checkpoint_dir=checkpoints,
    )  # fmt: skip
    began = time.perf_counter()
    sink = Sink(config)
    before = long_lived()  # what ``sluice sink`` sets for its process (core/process.py)
    try:
        asyncio.run(sink.run(until_caught_up=True))
    finally:
        restore(before)
    return time.perf_counter() - began, sink.events


class _LoopConsumer:
    """The baseline's ``JsonConsumer``: each window's JSON lines through ``write``."""

    def __init__(self, write: Write) -> None:
        self.write = write
        self.events = 0

    async def on_json_window(self, window: JsonWindow) -> None:
        if window.lines:
            await self.write(window)
            self.events += len(window.lines)

    def on_rollback(self, scn: int, error: BaseException) -> None:
        return None


def _baseline(
    open_loop: Callable[[], Awaitable[tuple[Write, Close]]], relay_url: str, after: int
) -> tuple[float, int]:
    async def main() -> int:
        write, close = await open_loop()
        consumer = _LoopConsumer(write)
        try:
            await AsyncClient(ClientConfig(relays=(relay_url,), since_scn=after), consumer).run(
                until_caught_up=True
            )
        finally:
            await close()
        return consumer.events

    began = time.perf_counter()
    events = asyncio.run(main())
    return time.perf_counter() - began, events


class _Recorder:
    """Reads the workload once, untimed: each window's SCN and JSON lines, for the write-only
    loops (the same entries, already built in memory)."""

    def __init__(self) -> None:
        self.windows: list[tuple[int, list[str]]] = []

    async def on_json_window(self, window: JsonWindow) -> None:
        if window.lines:
            self.windows.append((window.scn, list(window.lines)))

    def on_rollback(self, scn: int, error: BaseException) -> None:
        return None


def _recorded(relay_url: str, after: int) -> list[tuple[int, list[str]]]:
    recorder = _Recorder()
    config = ClientConfig(relays=(relay_url,), since_scn=after)
    asyncio.run(AsyncClient(config, recorder).run(until_caught_up=True))
    return recorder.windows


WriteAll = Callable[[], Coroutine[Any, Any, int]]


def _write_only(write_all: WriteAll) -> tuple[float, int]:
    """(seconds, events) of a target's own client writing entries built before the clock
    starts (its connection included): what the target itself can take."""
    began = time.perf_counter()
    events = asyncio.run(write_all())
    return time.perf_counter() - began, events


def _headers(scn: int, index: int, line: str) -> dict[str, str]:
    """The ``sluice-*`` headers the sink puts on each message (``Change.headers``)."""
    event = json.loads(line)
    return {
        "sluice-scn": str(scn), "sluice-index": str(index), "sluice-source": SOURCE,
        "sluice-op": event["op"], "sluice-schema-version": str(event["schema_version"]),
    }  # fmt: skip


def _chunks(windows: Windows, size: int) -> list[list[tuple[int, int, str]]]:
    """(scn, index, line) in runs of ``size``, across windows (as the sink groups them)."""
    flat = [(scn, i, line) for scn, lines in windows for i, line in enumerate(lines)]
    return [flat[at : at + size] for at in range(0, len(flat), size)]


# -- targets: per run tag, a fresh destination for the sink and one for the loop --------------
class _Nats:
    name = "nats"
    bulk_windows = BULK_WINDOWS

    def __init__(self, server: PrivateNats) -> None:
        self.server = server

    def sink_url(self, tag: str) -> str:
        # the sink makes stream SINK_<tag> itself, for subjects sink_<tag>.>
        return f"{self.server.url}/SINK_{tag}?subject=sink_{tag}.{{db}}.{{table}}"

    async def prepare(self, tag: str) -> None:
        from nats.js.api import StorageType, StreamConfig

        nc, js = await self._js()
        for who in ("LOOP", "ONLY"):
            await js.add_stream(
                StreamConfig(name=f"{who}_{tag}", subjects=[f"{who.lower()}_{tag}.>"],
                             storage=StorageType.FILE, duplicate_window=120.0)
            )  # fmt: skip
        await nc.close()

    async def open_loop(self, tag: str) -> tuple[Write, Close]:
        nc, js = await self._js()
        subject = f"loop_{tag}.bench.t"

        async def write(window: JsonWindow) -> None:
            for i, line in enumerate(window.lines):
                await js.publish(
                    subject, line.encode(), headers={"Nats-Msg-Id": f"{window.scn}-{i}"}
                )

        return write, nc.close

    def build_only(self, tag: str, windows: Windows) -> WriteAll:
        """``js.publish`` with ``Nats-Msg-Id``, 1,000 in flight, their acks awaited together."""
        subject = f"only_{tag}.bench.t"
        chunks = [
            [
                (line.encode(), {**_headers(scn, i, line), "Nats-Msg-Id": f"{scn}-{i}",
                                 "Content-Type": "application/json"})
                for scn, i, line in chunk
            ]
            for chunk in _chunks(windows, 1000)
        ]  # fmt: skip

        async def write() -> int:
            nc, js = await self._js()
            for chunk in chunks:
                await asyncio.gather(*(js.publish(subject, b, headers=h) for b, h in chunk))
            await nc.close()
            return sum(map(len, chunks))

        return write

    async def stored_only(self, tag: str) -> int:
        nc, js = await self._js()
        count = int((await js.stream_info(f"ONLY_{tag}")).state.messages)
        await js.delete_stream(f"ONLY_{tag}")
        await nc.close()
        return count

    async def stored(self, tag: str) -> tuple[int, int]:
        nc, js = await self._js()
        counts = []
        for stream in (f"SINK_{tag}", f"LOOP_{tag}"):
            counts.append((await js.stream_info(stream)).state.messages)
            await js.delete_stream(stream)
        await nc.close()
        return counts[0], counts[1]

    async def _js(self) -> tuple[Any, Any]:
        import nats

        nc = await nats.connect(self.server.url)
        return nc, nc.jetstream(timeout=30)


class _Redis:
    name = "redis"
    bulk_windows = BULK_WINDOWS

    def __init__(self, server: PrivateRedis) -> None:
        self.server = server

    def sink_url(self, tag: str) -> str:
        return f"{self.server.url}?stream=sink_{tag}:{{source}}"

    async def prepare(self, tag: str) -> None:
        return None  # streams are made by their first XADD

    async def open_loop(self, tag: str) -> tuple[Write, Close]:
        client = self._client()
        stream = f"loop_{tag}:{SOURCE}"

        async def write(window: JsonWindow) -> None:
            pipe = client.pipeline(transaction=False)
            for line in window.lines:
                pipe.xadd(stream, {"value": line})
            await pipe.execute()

        return write, client.aclose

    def build_only(self, tag: str, windows: Windows) -> WriteAll:
        """Pipelines of 1,000 ``XADD stream SCN-INDEX`` with the sink's fields (value, key,
        op, source, scn, schema_version)."""
        entries = []
        for scn, lines in windows:
            for i, line in enumerate(lines):
                event = json.loads(line)
                key = json.dumps(event["key"], separators=(",", ":"), sort_keys=True)
                fields = {
                    "value": line,
                    "key": key,
                    "op": event["op"],
                    "source": SOURCE,
                    "scn": str(scn),
                    "schema_version": str(event["schema_version"]),
                }
                entries.append((f"{scn}-{i}", fields))  # fmt: skip

        async def write() -> int:
            client, stream = self._client(), f"only_{tag}:{SOURCE}"
            for at in range(0, len(entries), 1000):
                pipe = client.pipeline(transaction=False)
                for entry_id, fields in entries[at : at + 1000]:
                    pipe.xadd(stream, fields, id=entry_id)
                await pipe.execute()
            await client.aclose()
            return len(entries)

        return write

    async def stored_only(self, tag: str) -> int:
        client = self._client()
        count = int(await client.xlen(f"only_{tag}:{SOURCE}"))
        await client.delete(f"only_{tag}:{SOURCE}")
        await client.aclose()
        return count

    async def stored(self, tag: str) -> tuple[int, int]:
        client = self._client()
        keys = (f"sink_{tag}:{SOURCE}", f"loop_{tag}:{SOURCE}")
        counts = [await client.xlen(key) for key in keys]
        await client.delete(*keys)
        await client.aclose()
        return counts[0], counts[1]

    def _client(self) -> Any:
        import redis.asyncio

        return redis.asyncio.Redis(host="127.0.0.1", port=self.server.port)


class _RabbitMQ:
    name = "rabbitmq"
    bulk_windows = REDUCED_BULK_WINDOWS

    def __init__(self, server: PrivateRabbitMQ) -> None:
        self.server = server

    def sink_url(self, tag: str) -> str:
        return f"{self.server.url}?exchange=sink_{tag}"

    async def prepare(self, tag: str) -> None:
        import aio_pika

        connection = await aio_pika.connect(self.server.url)
        async with connection:
            channel = await connection.channel()
            for who in ("sink", "loop", "only"):
                exchange = await channel.declare_exchange(
                    f"{who}_{tag}", aio_pika.ExchangeType.TOPIC, durable=True
                )
                queue = await channel.declare_queue(f"{who}_{tag}", durable=True)
                await queue.bind(exchange, "#")

    async def open_loop(self, tag: str) -> tuple[Write, Close]:
        import aio_pika

        connection = await aio_pika.connect(self.server.url)
        channel = await connection.channel(publisher_confirms=True)
        exchange = await channel.get_exchange(f"loop_{tag}")

        async def write(window: JsonWindow) -> None:
            for i, line in enumerate(window.lines):
                message = aio_pika.Message(
                    line.encode(), delivery_mode=aio_pika.DeliveryMode.PERSISTENT,
                    message_id=f"{window.scn}-{i}", content_type="application/json",
                )  # fmt: skip
                await exchange.publish(message, routing_key=SOURCE)

        return write, connection.close

    def build_only(self, tag: str, windows: Windows) -> WriteAll:
        """Persistent messages with confirms, 1,000 published before their confirms are
        awaited together."""
        import aio_pika

        chunks = [
            [
                aio_pika.Message(
                    line.encode(), delivery_mode=aio_pika.DeliveryMode.PERSISTENT,
                    message_id=f"{scn}-{i}", content_type="application/json",
                    headers=_headers(scn, i, line), app_id="sluice",
                )
                for scn, i, line in chunk
            ]
            for chunk in _chunks(windows, 1000)
        ]  # fmt: skip

        async def write() -> int:
            connection = await aio_pika.connect(self.server.url)
            channel = await connection.channel(publisher_confirms=True, on_return_raises=True)
            exchange = await channel.get_exchange(f"only_{tag}")
            for chunk in chunks:  # mandatory, as the sink publishes (an unrouted one fails)
                await asyncio.gather(
                    *(exchange.publish(m, routing_key=SOURCE, mandatory=True) for m in chunk)
                )
            await connection.close()
            return sum(map(len, chunks))

        return write

    async def stored_only(self, tag: str) -> int:
        import aio_pika

        connection = await aio_pika.connect(self.server.url)
        async with connection:
            channel = await connection.channel()
            queue = await channel.declare_queue(f"only_{tag}", passive=True)
            count = queue.declaration_result.message_count or 0
            await queue.delete(if_unused=False, if_empty=False)
            await channel.exchange_delete(f"only_{tag}")
        return count

    async def stored(self, tag: str) -> tuple[int, int]:
        import aio_pika

        counts = []
        connection = await aio_pika.connect(self.server.url)
        async with connection:
            channel = await connection.channel()
            for who in ("sink", "loop"):
                queue = await channel.declare_queue(f"{who}_{tag}", passive=True)
                counts.append(queue.declaration_result.message_count or 0)
                await queue.delete(if_unused=False, if_empty=False)
                await channel.exchange_delete(f"{who}_{tag}")
        return counts[0], counts[1]


class _Receiver:
    """A webhook receiver in a thread of this process: reads each POST, counts its events per
    path, answers 200."""

    def __init__(self) -> None:
        self.port = free_port()
        self.events: Counter[str] = Counter()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._runner: Any = None

    def __enter__(self) -> _Receiver:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._open(), self._loop).result(30)
        return self

    def __exit__(self, *exc: object) -> None:
        asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(30)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()

    async def _open(self) -> None:
        from aiohttp import web

        async def handle(request: web.Request) -> web.Response:
            body = await request.read()
            self.events[request.match_info["path"]] += body.count(b'"scn"')
            return web.Response(text="ok")

        app = web.Application(client_max_size=64 << 20)
        app.router.add_post("/{path}", handle)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", self.port).start()


class _Webhook:
    name = "webhook"
    bulk_windows = BULK_WINDOWS

    def __init__(self, receiver: _Receiver) -> None:
        self.receiver = receiver

    def sink_url(self, tag: str) -> str:
        return f"http://127.0.0.1:{self.receiver.port}/sink_{tag}"

    async def prepare(self, tag: str) -> None:
        return None

    async def open_loop(self, tag: str) -> tuple[Write, Close]:
        import aiohttp

        session = aiohttp.ClientSession()
        url = f"http://127.0.0.1:{self.receiver.port}/loop_{tag}"
        headers = {"Content-Type": "application/json"}

        async def write(window: JsonWindow) -> None:
            body = ('{"events": [' + ", ".join(window.lines) + "]}").encode()
            async with session.post(url, data=body, headers=headers) as response:
                response.raise_for_status()
                await response.read()

        return write, session.close

    def build_only(self, tag: str, windows: Windows) -> WriteAll:
        """POSTs of the sink's default ``--batch-events``, one at a time (this loop sent 500
        while the sink sent 1,000: twice the sink's requests for the same events)."""
        bodies = [
            (
                ('{"events": [' + ", ".join(line for _, _, line in chunk) + "]}").encode(),
                {"Content-Type": "application/json",
                 "Idempotency-Key": f"{chunk[0][0]}-{chunk[0][1]}..{chunk[-1][0]}-{chunk[-1][1]}"},
            )
            for chunk in _chunks(windows, WEBHOOK_BATCH)
        ]  # fmt: skip
        url = f"http://127.0.0.1:{self.receiver.port}/only_{tag}"

        async def write() -> int:
            import aiohttp

            async with aiohttp.ClientSession() as session:
                for body, headers in bodies:
                    async with session.post(url, data=body, headers=headers) as response:
                        response.raise_for_status()
                        await response.read()
            return sum(len(lines) for _, lines in windows)

        return write

    async def stored_only(self, tag: str) -> int:
        return self.receiver.events.pop(f"only_{tag}", 0)

    async def stored(self, tag: str) -> tuple[int, int]:
        events = self.receiver.events
        return events.pop(f"sink_{tag}", 0), events.pop(f"loop_{tag}", 0)


Target = _Nats | _Redis | _RabbitMQ | _Webhook


def _measure(
    target: Target, workload: str, after: int, events: int, relay_url: str, work: Path
) -> dict[str, Any]:
    """The best of ``ROUNDS`` interleaved rounds of each contender, each round on fresh
    destinations whose stored events are counted."""
    recorded = _recorded(relay_url, after)
    sink_s = loop_s = only_s = float("inf")
    for round_ in range(ROUNDS):
        tag = f"{workload}_{round_}"
        asyncio.run(target.prepare(tag))
        checkpoints = work / "checkpoints" / f"{target.name}_{tag}"
        took, sink_events = _sink(target.sink_url(tag), relay_url, after, checkpoints)
        sink_s = min(sink_s, took)
        took, loop_events = _baseline(lambda t=tag: target.open_loop(t), relay_url, after)
        loop_s = min(loop_s, took)
        took, only_events = _write_only(target.build_only(tag, recorded))
        only_s = min(only_s, took)
        stored = asyncio.run(target.stored(tag))
        stored_only = asyncio.run(target.stored_only(tag))
        if (sink_events, loop_events, only_events) != (events,) * 3 or (
            *stored,
            stored_only,
        ) != (events,) * 3:
            raise AssertionError(
                f"{target.name}/{workload}: {events} events; sink {sink_events}, loop "
                f"{loop_events}, write-only {only_events}; stored by the sink {stored[0]}, by "
                f"the loop {stored[1]}, by the write-only loop {stored_only}"
            )
    result = {
        "events": events,
        "rounds": ROUNDS,
        "sink_s": round(sink_s, 2),
        "loop_s": round(loop_s, 2),
        "write_only_s": round(only_s, 2),
        "sink_events_per_s": round(events / sink_s),
        "loop_events_per_s": round(events / loop_s),
        "write_only_events_per_s": round(events / only_s),
        "ratio": round(loop_s / sink_s, 2),  # against the client loop: target 1.5x
        "ratio_write_only": round(only_s / sink_s, 2),  # against the target's own: 0.8x
    }
    print(f"{target.name}/{workload}: {result}", flush=True)
    return result


def run() -> dict[str, Any]:
    results: dict[str, Any] = {
        "workloads": {
            "bulk": f"{BULK_WINDOWS} x 1,000-row inserts, then {BULK_WINDOWS} x 1,000-row updates",
            f"bulk{REDUCED_BULK_WINDOWS}": (
                f"{REDUCED_BULK_WINDOWS} x 1,000-row inserts, then {REDUCED_BULK_WINDOWS} x "
                "1,000-row updates (RabbitMQ: its baseline awaits a confirm per event, "
                "~1,300/s)"
            ),
            "small": f"{SMALL_TXNS} single-row update transactions",
        },
        "targets": {},
    }
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        with (
            PrivateMariaDB(work / "mariadb") as db,
            PrivateNats(work / "nats") as nats_server,
            PrivateRedis(work / "redis") as redis_server,
            PrivateRabbitMQ(work / "rabbitmq") as rabbitmq_server,
            _Receiver() as receiver,
        ):
            admin = db.connect()
            with admin.cursor() as cur:
                cur.execute("CREATE DATABASE bench")
                cur.execute(
                    "CREATE TABLE bench.t (id INT PRIMARY KEY, a INT, b VARCHAR(40), "
                    "c DECIMAL(10,2), d DATETIME)"
                )
            admin.close()
            targets: list[Target] = [
                _Nats(nats_server), _Redis(redis_server), _RabbitMQ(rabbitmq_server),
                _Webhook(receiver),
            ]  # fmt: skip
            config = RelayConfig(
                source=db.url, tables=[SOURCE], data_dir=work / "relay", port=0,
                buffer_size=256 << 20,
            )  # fmt: skip
            measured: dict[str, dict[str, Any]] = {}
            with RelayThread(config) as relay:
                first_id = 1
                for windows in sorted({t.bulk_windows for t in targets}, reverse=True):
                    workload = "bulk" if windows == BULK_WINDOWS else f"bulk{windows}"
                    after, events = _bulk(db, relay.url, windows, first_id)
                    first_id += windows * 1000
                    for target in targets:
                        if target.bulk_windows == windows:
                            key = f"{target.name}/{workload}"
                            measured[key] = _measure(
                                target, workload, after, events, relay.url, work
                            )
                after, events = _small(db, relay.url, SMALL_TXNS)
                for target in targets:
                    key = f"{target.name}/small"
                    measured[key] = _measure(target, "small", after, events, relay.url, work)
            for target in targets:  # in table order: per target, its bulk then small
                for key in sorted(k for k in measured if k.startswith(target.name + "/")):
                    results["targets"][key] = measured[key]
    rows = [("target/workload", "events", "sink ev/s", "client loop ev/s", "write-only ev/s",
             "vs client loop (1.5x)", "vs write-only (0.8x)")]  # fmt: skip
    for name, r in results["targets"].items():
        rows.append(
            (name, str(r["events"]), str(r["sink_events_per_s"]), str(r["loop_events_per_s"]),
             str(r["write_only_events_per_s"]), f"{r['ratio']}x", f"{r['ratio_write_only']}x")
        )  # fmt: skip
    print(table(rows))
    print(f"results: {write_results('sink_brokers', results)}")
    return results


if __name__ == "__main__":
    run()
