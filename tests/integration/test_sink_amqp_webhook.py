"""``sluice sink`` to RabbitMQ and to webhooks, on real servers: the workload with the sink
SIGKILLed twice, the target down for a while, a receiver that fails, dead letters, bad URLs.

Both targets are at least once: after deduplicating (RabbitMQ by ``message_id``, webhooks by
``Idempotency-Key``) what arrived equals the relay's events, nothing missing, in order."""

from __future__ import annotations

import asyncio
import json
import os
import random
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import aio_pika
import pymysql
import pytest
from aiohttp import web

from sluice.client import FileCheckpointStore
from sluice.sink.target import Change
from sluice.sink.webhook import chunks, full_jitter
from sluice.testing import PrivateMariaDB
from sluice.testing.brokers import PrivateRabbitMQ
from sluice.testing.mariadb import free_port
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
Event = dict[str, Any]


@pytest.fixture(autouse=True)
def _fast_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    # the sink processes inherit these: back to a target within ~2 s of its return
    monkeypatch.setenv("SLUICE_SINK_RETRY_INITIAL_S", "0.1")
    monkeypatch.setenv("SLUICE_SINK_RETRY_MAX_S", "2")


def _tables(name: str) -> list[str]:
    return [f"{name}.{t.split()[0]}" for t in SOURCE_TABLES]


def _sink(tmp_path: Path, relay_url: str, to: str, *extra: str, name: str = "t") -> SinkProcess:
    args = ["--to", to, "--relay", relay_url, "--checkpoint-dir", str(tmp_path / "ckpt")]
    return SinkProcess([*args, "--name", name, *extra], tmp_path / "sink.log")


def _caught_up(relay_url: str, conn: pymysql.Connection[Any], sink: SinkProcess) -> dict[str, Any]:
    """Wait until the sink's checkpoint reaches the relay's max SCN; the sink's stats."""
    wait_relay_caught_up(relay_url, conn)
    max_scn = int(get_json(relay_url + "/stats")["max_scn"])
    return sink.wait_scn(max_scn, timeout=180)


def _per_key(events: list[Event]) -> dict[tuple[str, str], list[Event]]:
    """Events per (source, key); a truncate is its source's (key null)."""
    out: dict[tuple[str, str], list[Event]] = defaultdict(list)
    for event in events:
        out[(event["source"], json.dumps(event["key"], sort_keys=True))].append(event)
    return out


# -- RabbitMQ ---------------------------------------------------------------------------------


async def _declare(url: str, exchange: str, kind: str, queue: str, bind: bool = True) -> None:
    connection = await aio_pika.connect(url)
    async with connection:
        channel = await connection.channel()
        ex = await channel.declare_exchange(exchange, aio_pika.ExchangeType(kind), durable=True)
        q = await channel.declare_queue(queue, durable=True)
        if bind:
            await q.bind(ex, "#")


async def _drain(url: str, queue: str) -> list[aio_pika.abc.AbstractIncomingMessage]:
    """Every message in ``queue``, in queue order (acknowledged)."""
    connection = await aio_pika.connect(url)
    messages = []
    async with connection:
        channel = await connection.channel()
        q = await channel.declare_queue(queue, durable=True)
        while (message := await q.get(fail=False)) is not None:
            await message.ack()
            messages.append(message)
    return messages


async def _exchange_exists(url: str, exchange: str) -> bool:
    connection = await aio_pika.connect(url)
    async with connection:
        try:
            await (await connection.channel()).get_exchange(exchange, ensure=True)
        except aio_pika.exceptions.ChannelClosed:
            return False
    return True


def _check_amqp(url: str, queue: str, truth: list[Event]) -> int:
    """The queue after dedupe by message_id equals ``truth``: none missing, none extra, in
    order per key. Returns how many duplicates arrived."""
    messages = asyncio.run(_drain(url, queue))
    first: dict[str, Event] = {}
    arrival: list[Event] = []
    for m in messages:
        assert m.message_id is not None and m.delivery_mode == aio_pika.DeliveryMode.PERSISTENT
        assert m.content_type == "application/json"
        if m.message_id not in first:
            event = json.loads(m.body)
            assert m.headers["sluice-scn"] == str(event["scn"])
            first[m.message_id] = event
            arrival.append(event)
    by_position = sorted(first.values(), key=lambda e: e["scn"])  # stable: index order kept
    assert len(first) == len(truth), f"{len(first)} distinct messages, relay has {len(truth)}"
    assert by_position == truth
    assert _per_key(arrival) == _per_key(truth)
    return len(messages) - len(first)


def test_amqp_sink_sigkilled_twice(
    mariadb: PrivateMariaDB, rabbitmq_server: PrivateRabbitMQ, tmp_path: Path
) -> None:
    conn = create_database(mariadb, "shop_amqp", *SOURCE_TABLES)
    url = rabbitmq_server.url
    asyncio.run(_declare(url, "shop_amqp", "topic", "shop_amqp_all"))
    sources = _tables("shop_amqp")
    with RelayThread(relay_config(mariadb, sources, tmp_path / "relay")) as relay:
        sink = _sink(tmp_path, relay.url, url + "?exchange=shop_amqp&routing_key={db}.{op}")
        try:
            started = time.monotonic()
            run_with_kills(conn, sink, 300)
            stats = _caught_up(relay.url, conn, sink)
            elapsed = time.monotonic() - started
        finally:
            sink.stop()
        truth = relay_events(relay.url, sources)
    duplicates = _check_amqp(url, "shop_amqp_all", truth)
    assert stats["delivery"] == "at-least-once" and stats["target_kind"] == "amqp"
    assert stats["target_stats"]["confirms"] == stats["target_stats"]["published"]
    print(f"amqp: {len(truth)} events, {duplicates} duplicates, {elapsed:.1f} s")


def test_amqp_broker_down_midway(
    mariadb: PrivateMariaDB, rabbitmq_server: PrivateRabbitMQ, tmp_path: Path
) -> None:
    conn = create_database(mariadb, "shop_amqp_down", *SOURCE_TABLES)
    url = rabbitmq_server.url
    # an exchange that exists with another type is used as it is
    asyncio.run(_declare(url, "shop_amqp_fan", "fanout", "shop_amqp_down_all"))
    sources = _tables("shop_amqp_down")
    with RelayThread(relay_config(mariadb, sources, tmp_path / "relay")) as relay:
        sink = _sink(tmp_path, relay.url, url + "?exchange=shop_amqp_fan").start()
        try:
            up = partial(_restart, rabbitmq_server)
            _with_outage(conn, sink, down=rabbitmq_server.kill, up=up, what="amqp")
            stats = _caught_up(relay.url, conn, sink)
        finally:
            sink.stop()
            if not rabbitmq_server.running:
                _restart(rabbitmq_server)
        truth = relay_events(relay.url, sources)
    _check_amqp(url, "shop_amqp_down_all", truth)
    assert stats["retries"] > 0 and stats["target_stats"]["connects"] >= 2


def _restart(server: PrivateRabbitMQ) -> None:
    # Same AMQP port, same data; a fresh Erlang distribution port: the old one may have been
    # taken meanwhile (an ephemeral port of any connection here: "dist_port_already_used").
    server.dist_port = 0
    server.restart()


def test_amqp_declares_its_exchange_and_waits_for_a_queue(
    mariadb: PrivateMariaDB, rabbitmq_server: PrivateRabbitMQ, tmp_path: Path
) -> None:
    conn = create_database(mariadb, "shop_amqp_new", *SOURCE_TABLES)
    url = rabbitmq_server.url
    sources = _tables("shop_amqp_new")
    with RelayThread(relay_config(mariadb, sources, tmp_path / "relay")) as relay:
        sink = _sink(tmp_path, relay.url, url + "?exchange=shop_amqp_new").start()
        try:
            workload(conn, 20)
            # nothing is bound: the broker returns the messages, the sink keeps trying
            stats = wait_for(
                lambda: (s := sink.stats()) and not s["target_up"] and s, 60, "the target down"
            )
            assert "NO_ROUTE" in stats["target_error"], stats
            assert stats["target_stats"]["returned"] > 0
            assert asyncio.run(_exchange_exists(url, "shop_amqp_new"))
            asyncio.run(_declare(url, "shop_amqp_new", "topic", "shop_amqp_new_all"))
            stats = _caught_up(relay.url, conn, sink)
            assert stats["target_up"]
        finally:
            sink.stop()
        truth = relay_events(relay.url, sources)
    _check_amqp(url, "shop_amqp_new_all", truth)


# -- webhooks ---------------------------------------------------------------------------------


class Receiver:
    """A webhook receiver in a thread: dedupes POSTs by Idempotency-Key; can answer 500
    (``fail_next`` times, or ``always_fail``) and can close its port for a while."""

    def __init__(self) -> None:
        self.port = free_port()
        self.lock = threading.Lock()
        self.posts = 0
        self.keys: list[str] = []  # accepted keys, first time each, in arrival order
        self.events: dict[str, list[Event]] = {}
        self.accepted = Counter[str]()
        self.fail_next = 0
        self.always_fail = False
        self.bodies: dict[str, list[list[Event]]] = defaultdict(list)  # every accepted POST
        self.hang_on_windows = 0  # hang (after accepting) on a POST of this many windows or more
        self.hung = threading.Event()
        self._release: asyncio.Event | None = None
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._runner: web.AppRunner | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hook"

    def start(self) -> Receiver:
        self._thread.start()
        self.reopen()
        return self

    def reopen(self) -> None:
        self._call(self._open())

    def close(self) -> None:
        self._call(self._close())

    def stop(self) -> None:
        self.close()
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()

    def received(self) -> list[Event]:
        """The accepted events, each key once, in arrival order."""
        with self.lock:
            return [event for key in self.keys for event in self.events[key]]

    def _call(self, coroutine: Any) -> None:
        asyncio.run_coroutine_threadsafe(coroutine, self._loop).result(30)

    async def _open(self) -> None:
        app = web.Application()
        app.router.add_post("/hook", self._handle)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", self.port, reuse_address=True).start()

    async def _close(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def _handle(self, request: web.Request) -> web.Response:
        body = await request.json()
        key = request.headers["Idempotency-Key"]
        assert request.headers["Content-Type"] == "application/json"
        assert int(request.headers["Sluice-Scn"]) == body["events"][0]["scn"]
        with self.lock:
            self.posts += 1
            if self.always_fail or self.fail_next > 0:
                self.fail_next -= 1
                return web.Response(status=500, text="try again later")
            self.accepted[key] += 1
            self.bodies[key].append(body["events"])
            if key not in self.events:
                self.keys.append(key)
                self.events[key] = body["events"]
            windows = len({event["scn"] for event in body["events"]})
            hang = 0 < self.hang_on_windows <= windows
            if hang:
                self.hang_on_windows = 0
                self._release = asyncio.Event()
        if hang:  # taken, but the answer waits: the sink dies before it
            self.hung.set()
            assert self._release is not None
            await self._release.wait()
        return web.json_response({"ok": True})

    def release(self) -> None:
        if self._release is not None:
            self._loop.call_soon_threadsafe(self._release.set)


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    running = Receiver().start()
    yield running
    running.stop()


def test_webhook_sink_sigkilled_twice(
    mariadb: PrivateMariaDB, receiver: Receiver, tmp_path: Path
) -> None:
    conn = create_database(mariadb, "shop_hook", *SOURCE_TABLES)
    sources = _tables("shop_hook")
    with RelayThread(relay_config(mariadb, sources, tmp_path / "relay")) as relay:
        sink = _sink(tmp_path, relay.url, receiver.url, "--batch-events", "3")
        try:
            started = time.monotonic()
            run_with_kills(conn, sink, 300)
            stats = _caught_up(relay.url, conn, sink)
            elapsed = time.monotonic() - started
        finally:
            sink.stop()
        truth = relay_events(relay.url, sources)
    assert receiver.received() == truth
    assert all(len(events) <= 3 for events in receiver.events.values())
    assert stats["delivery"] == "at-least-once" and stats["target_kind"] == "http"
    duplicates = sum(receiver.accepted.values()) - len(receiver.keys)
    print(f"webhook: {len(truth)} events, {duplicates} repeated chunks, {elapsed:.1f} s")


def test_a_chunk_of_several_windows_goes_again_with_the_same_events_after_a_kill(
    mariadb: PrivateMariaDB, receiver: Receiver, tmp_path: Path
) -> None:
    """Windows grouped by when they came: the receiver takes a chunk of several windows and
    the sink dies before the answer. The restarted sink reads them again, in another rhythm,
    and sends that chunk again under its key with exactly its events."""
    conn = create_database(mariadb, "shop_hook_again", *SOURCE_TABLES)
    sources = _tables("shop_hook_again")
    receiver.hang_on_windows = 3
    with RelayThread(relay_config(mariadb, sources, tmp_path / "relay")) as relay:
        sink = _sink(tmp_path, relay.url, receiver.url).start()
        try:
            with conn.cursor() as cur:
                for i in range(60):
                    cur.execute("INSERT INTO audit VALUES (%s, %s)", (f"m{i}", i))
                    conn.commit()
                    if i % 10 == 9:
                        time.sleep(0.3)  # longer than --commit-interval: groups cut by time
            assert receiver.hung.wait(60), "no POST of three windows or more came"
            sink.kill()
            receiver.release()
            sink.start()
            _caught_up(relay.url, conn, sink)
        finally:
            sink.stop()
        truth = relay_events(relay.url, sources)
    assert receiver.received() == truth
    again = {key: posts for key, posts in receiver.bodies.items() if len(posts) > 1}
    assert again, "the chunk the sink died on was not sent again"
    for key, posts in again.items():
        assert all(p == posts[0] for p in posts), f"{key} named other events when sent again"
    assert any(len({e["scn"] for e in posts[0]}) >= 3 for posts in again.values())


def test_webhook_receiver_down_midway(
    mariadb: PrivateMariaDB, receiver: Receiver, tmp_path: Path
) -> None:
    conn = create_database(mariadb, "shop_hook_down", *SOURCE_TABLES)
    sources = _tables("shop_hook_down")
    with RelayThread(relay_config(mariadb, sources, tmp_path / "relay")) as relay:
        sink = _sink(tmp_path, relay.url, receiver.url).start()
        try:
            _with_outage(conn, sink, down=receiver.close, up=receiver.reopen, what="webhook")
            stats = _caught_up(relay.url, conn, sink)
        finally:
            sink.stop()
        truth = relay_events(relay.url, sources)
    assert receiver.received() == truth
    assert stats["target_stats"]["dead_letters"] == 0
    assert max(receiver.accepted.values()) == 1  # chunks delivered before the outage: once


def test_webhook_retries_a_failing_chunk(
    mariadb: PrivateMariaDB, receiver: Receiver, tmp_path: Path
) -> None:
    conn = create_database(mariadb, "shop_hook_retry", *SOURCE_TABLES)
    sources = _tables("shop_hook_retry")
    receiver.fail_next = 2
    with RelayThread(relay_config(mariadb, sources, tmp_path / "relay")) as relay:
        sink = _sink(tmp_path, relay.url, receiver.url).start()
        try:
            workload(conn, 30)
            stats = _caught_up(relay.url, conn, sink)
        finally:
            sink.stop()
        truth = relay_events(relay.url, sources)
    assert receiver.received() == truth
    assert set(receiver.accepted.values()) == {1}  # delivered once per key
    target = stats["target_stats"]
    assert target["retries"] >= 2 and target["dead_letters"] == 0, target
    assert target["last_status"] == 200 and target["last_error"] is None
    assert stats["target_up"]  # retries of a chunk are not an outage
    assert list((tmp_path / "ckpt" / "dead-letters" / "t").iterdir()) == []  # the default


def test_webhook_dead_letters(mariadb: PrivateMariaDB, receiver: Receiver, tmp_path: Path) -> None:
    conn = create_database(mariadb, "shop_hook_dead", *SOURCE_TABLES)
    sources = _tables("shop_hook_dead")
    receiver.always_fail = True
    dead = tmp_path / "dead"
    with RelayThread(relay_config(mariadb, sources, tmp_path / "relay")) as relay:
        sink = _sink(
            tmp_path, relay.url, receiver.url,
            "--max-attempts", "2", "--batch-events", "2", "--dead-letter-dir", str(dead),
        ).start()  # fmt: skip
        try:
            workload(conn, 25)
            stats = _caught_up(relay.url, conn, sink)  # it moves on past them
            truth = relay_events(relay.url, sources)
            letters = [json.loads(p.read_text()) for p in sorted(dead.glob("*.json"))]
            assert stats["target_stats"]["dead_letters"] == len(letters) > 0
            status, metrics = http_status(sink.url + "/metrics")
            assert status == 200
            assert f"sluice_sink_dead_letters_total {len(letters)}" in metrics.decode()
            letters.sort(key=lambda d: (d["scn"], d["first_index"]))
            assert [e for d in letters for e in d["body"]["events"]] == truth
            assert all(d["attempts"] == 2 and d["last_status"] == 500 for d in letters)
            assert all(d["last_error"].startswith("HTTP 500") for d in letters)
            assert receiver.posts == 2 * len(letters) and not receiver.keys
        finally:
            sink.stop()


def test_webhook_unwritable_dead_letter_stops_the_sink(
    mariadb: PrivateMariaDB, receiver: Receiver, tmp_path: Path
) -> None:
    conn = create_database(mariadb, "shop_hook_stop", *SOURCE_TABLES)
    sources = _tables("shop_hook_stop")
    receiver.always_fail = True
    dead = tmp_path / "dead"
    with RelayThread(relay_config(mariadb, sources, tmp_path / "relay")) as relay:
        sink = _sink(
            tmp_path, relay.url, receiver.url, "--max-attempts", "1", "--dead-letter-dir", str(dead)
        ).start()
        try:
            workload(conn, 3)
            stats = _caught_up(relay.url, conn, sink)
            dead.rename(tmp_path / "dead.done")
            dead.write_text("not a directory")  # the next dead letter cannot be written
            conn.cursor().execute("INSERT INTO audit VALUES ('last', 1)")
            conn.commit()
            wait_relay_caught_up(relay.url, conn)
            last_scn = int(get_json(relay.url + "/stats")["max_scn"])
            assert sink.proc is not None
            assert sink.proc.wait(60) == 1
        finally:
            sink.stop()
    log = sink.log_path.read_text()
    assert "cannot be written" in log and "stopping rather than dropping it" in log
    checkpoint = FileCheckpointStore(tmp_path / "ckpt", "t").load()
    # the window that could not be dead-lettered is not passed (by a heartbeat after it)
    assert checkpoint is not None and stats["checkpoint_scn"] <= checkpoint.scn < last_scn


def _with_outage(
    conn: pymysql.Connection[Any], sink: SinkProcess, down: Any, up: Any, what: str
) -> None:
    """The workload; a third of the way in the target goes down for ``OUTAGE_S`` seconds while
    the rest of the workload runs; then it comes back."""
    midway = threading.Event()
    resume = threading.Event()
    errors: list[BaseException] = []

    def progress(t: int) -> None:
        if t >= 90 and not midway.is_set():  # (some t are a TRUNCATE or an ALTER: not told)
            midway.set()
            resume.wait(60)

    def work() -> None:
        try:
            workload(conn, 300, on_progress=progress)
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=work, daemon=True)
    thread.start()
    assert midway.wait(120)
    sink.wait_events(1)
    down()
    started = time.monotonic()
    resume.set()
    wait_for(lambda: (s := sink.stats()) and not s["target_up"], 60, f"the sink to see {what} down")
    time.sleep(max(0.0, OUTAGE_S - (time.monotonic() - started)))
    stats = sink.stats() or {}
    assert not stats["target_up"] and stats["target_error"], stats
    up()
    thread.join(300)
    assert not errors, errors


# -- chunks, and refusals -----------------------------------------------------------------------


def _change(index: int, scn: int = 7) -> Change:
    return Change(
        scn, index, "db.t", "c", 0, 1, None, None, None, None, "db.t", f"o-{scn}-{index}", b"{}"
    )


def test_webhook_chunks_are_cut_again_where_they_were_recorded() -> None:
    # in order, at most ``size`` each, the key naming the first and last event
    events = tuple(_change(i) for i in (0, 1, 2, 4, 5, 7))
    first = chunks(events[:4], 3)
    assert [c.key for c in first] == ["o-7-0..7-2", "o-7-4..7-4"]
    assert first[0].body == b'{"events": [{}, {}, {}]}'
    # read again in another grouping: the recorded chunks come back as they were
    recorded = {c.first_id: (c.last_id, c.key) for c in first}
    again = chunks(events, 3, recorded)
    assert [c.key for c in again] == ["o-7-0..7-2", "o-7-4..7-4", "o-7-5..7-7"]
    assert [c.events for c in again] == [3, 1, 2]
    waits = [full_jitter(n, 0.5, 4.0, random.Random(n)) for n in range(1, 9)]
    assert all(0 <= w <= min(4.0, 0.5 * 2 ** (n - 1)) for n, w in enumerate(waits, 1))


def test_a_webhook_sink_restarted_cuts_its_last_group_again(tmp_path: Path) -> None:
    """The cuts written before a group's first POST are read by the next process: the same
    events go under the same keys, and held windows wait until that group is whole."""
    from sluice.sink import load_sink_config
    from sluice.sink.webhook import WebhookTarget

    def target() -> WebhookTarget:
        config = load_sink_config(
            None, None, to="http://127.0.0.1:9/hook", relays=["http://127.0.0.1:9"],
            checkpoint_dir=tmp_path, batch_events=2,
        )  # fmt: skip
        return WebhookTarget(config)

    events = tuple(_change(0, scn) for scn in range(10, 15))  # five single-row windows
    before = target()
    cut = chunks(events[:3], 2, before._recorded)
    asyncio.run(before._record(cut))
    after = target()
    after._load_recorded()
    assert after.incomplete(events[:1])  # the recorded group is not whole yet
    assert not after.incomplete(events[:3]) and not after.incomplete(events[1:2])
    again = chunks(events, 2, after._recorded)
    assert [c.key for c in again[:2]] == [c.key for c in cut]
    assert [c.events for c in again] == [2, 1, 2]


@pytest.mark.parametrize(
    ("to", "extra", "says"),
    [
        ("amqp://127.0.0.1:5672/?exchange=", [], "exchange= is empty"),
        ("amqp://h:p/", [], "is not a valid URL"),
        ("amqp://127.0.0.1/?exchnage=x", [], "unknown parameter 'exchnage'"),
        ("amqp:///vhost", [], "expected amqp://USER:PASSWORD@HOST"),
        ("http://127.0.0.1:9/hook", ["--format", "avro"], "not avro"),
        ("http:///hook", [], "expected http://HOST"),
        ("https://example.com:99999/hook", [], "is not a valid URL"),
        ("http://127.0.0.1:9/hook", ["--dead-letter-dir", "/dev/null/dead"], "is not writable"),
    ],
)
def test_bad_target_urls_and_options(to: str, extra: list[str], says: str, tmp_path: Path) -> None:
    result = run_sluice(
        "sink", "--to", to, "--relay", "http://127.0.0.1:9", "--checkpoint-dir", str(tmp_path),
        "--port", "0", *extra,
    )  # fmt: skip
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and says in lines[0], result.stderr


@pytest.mark.parametrize(
    ("change", "says"),
    [
        (("guest:guest@", "guest:s3cret-pw@"), "ACCESS_REFUSED"),
        (("/", "/no-such-vhost"), "virtual host 'no-such-vhost'"),
    ],
)
def test_amqp_refusals(
    change: tuple[str, str], says: str, rabbitmq_server: PrivateRabbitMQ, tmp_path: Path
) -> None:
    url = rabbitmq_server.url
    to = url.replace(*change) if change[0] != "/" else url + change[1][1:]
    result = run_sluice(
        "sink", "--to", to, "--relay", "http://127.0.0.1:9", "--checkpoint-dir", str(tmp_path),
        "--port", "0",
    )  # fmt: skip
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and says in lines[0] and "s3cret-pw" not in lines[0], result.stderr
