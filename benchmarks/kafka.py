"""Sluice -> Kafka against Debezium in Kafka Connect -> the same broker (issue 41): same rows,
same broker, same run.

One private MariaDB, one KRaft broker (``PrivateKafka``) and one standalone Kafka Connect
worker (``PrivateKafkaConnect``) whose plugin folder holds Debezium's MariaDB source connector
(``make connect-jars``; 3.5.0.Final, the newest with a jar on the registry) and the shim
``java/connect/shim`` compiled here (Debezium 3.5/3.6 still call Kafka 3's ``Sanitizer``,
which Kafka 4 moved: without it the task fails at start). Debezium is configured as its users
do: the worker's ``JsonConverter`` with schemas (Connect's default), a schema history topic on
the same broker, ``snapshot.mode=no_data``, its own defaults otherwise. Every topic is made
before its run with one partition, so neither side makes topics on the clock. Consumers are
``confluent_kafka`` in this process; Sluice's read ``read_committed`` (its sink is
transactional), Debezium's the default (its producer is not).

- **catch-up** (target >= 5x): ROUNDS rounds of CATCHUP_TXNS transactions x 1,000 rows of an
  11-column table (``benchmarks/capture.py``'s). Per round a new Debezium connector starts
  with ``no_data`` before the rows (its offset is then the binlog's end) and is stopped
  (``PUT /connectors/NAME/stop``) once that offset is stored; the rows are written; then each
  contender reads the range, order alternating: Sluice is a fresh ``sluice relay`` process
  (``--since-scn`` the same position) and a ``sluice sink --to kafka://`` process (defaults:
  Debezium's JSON without schemas, transactions, ``--commit-interval`` 0.02), timed from
  launching the relay; Sluice again with ``--debezium-option schemas.enable=true`` (Debezium's
  own bytes); Debezium is resumed (``PUT .../resume``: its task starts, reads the schema
  history topic, then the binlog). Each is timed to the last row a consumer receives.
  Medians over the rounds.
- **latency** (target: Sluice p99 <= 1/10 of Debezium's): per contender alone, LATENCY_S
  seconds of 1,000 single-row commits/s (``benchmarks/latency.py``'s writer: the commit time
  of each id as ``COMMIT`` returns), to the moment the consumer's ``poll`` returns that id's
  message; Debezium with ``poll.interval.ms`` 500 (its default) and 1, Sluice (one relay
  process for the whole run, a sink process per setting) at ``--commit-interval`` 0.1, 0.02
  and 0.005. Each starts streaming first and a warm-up row must arrive before the clock.
- **sink vs a user's loop** (target >= 1.5x): over the last catch-up round's rows, held by the
  run's relay, as ``benchmarks/sink_brokers.py`` does: the sink in this process
  (``Sink(...).run(until_caught_up=True)``, timed from its start to caught up and its last
  transaction committed) against a user's loop, ``AsyncClient`` with Debezium envelopes
  (``ClientConfig(debezium=())``, a ``JsonConsumer``) producing each line with its key
  (``{"id": N}``, from the envelope) through an idempotent ``confluent_kafka.Producer``,
  flushed once 20,000 rows or 0.1 s are held (the sink's ``--commit-rows`` and
  ``--commit-interval``) and at the end. The write-only loop: the sink's own messages (key,
  value, headers), read back from its topic untimed, produced by the same producer settings,
  flushed per 20,000. ROUNDS rounds, order alternating; medians.

``SLUICE_BENCH_SCALE`` shrinks the rows and the seconds. Run alone: ``python -m
benchmarks.kafka``.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from benchmarks.capture import DDL, ROW_SQL
from benchmarks.common import relay_process, table, write_results
from benchmarks.latency import percentiles
from sluice.capture.mysql.metadata import end_scn
from sluice.client import AsyncClient, ClientConfig
from sluice.core.event import JsonWindow
from sluice.sink import Sink, load_sink_config
from sluice.testing import PrivateMariaDB
from sluice.testing.kafka import PrivateKafka
from sluice.testing.kafka_connect import PrivateKafkaConnect, connect_home

_SCALE = float(os.environ.get("SLUICE_BENCH_SCALE", "1"))
CATCHUP_TXNS = max(1, round(100 * _SCALE))
ROWS_PER_TXN = 1000
ROUNDS = int(os.environ.get("SLUICE_BENCH_KAFKA_ROUNDS", "3"))
LATENCY_RATE = 1000
LATENCY_S = max(1.0, 10 * _SCALE)
COMMIT_INTERVALS = (0.1, 0.02, 0.005)
COMMIT_ROWS, COMMIT_S = 20_000, 0.1  # the sink's defaults, for the loops' flushes
MARIADB_PLUGIN = "debezium-connector-mariadb"
SHIM = Path(__file__).parent.parent / "java" / "connect" / "shim"
LAT_DDL = "CREATE TABLE bench.lat (id BIGINT PRIMARY KEY, v VARCHAR(8))"


# -- the Connect worker's home: the cached jars, and the shim beside Debezium's --------------
def _connect_home(work: Path) -> Path:
    cache = connect_home()
    cached = cache / "plugins" / MARIADB_PLUGIN
    if not (cached / ".pom.sha256").is_file():
        raise SystemExit(f"Debezium's MariaDB connector is not in {cached}: run `make setup`")
    home = work / "connect-home"
    (home / "plugins").mkdir(parents=True)
    (home / "libs").symlink_to(cache / "libs")
    for plugin in (cache / "plugins").iterdir():
        if plugin.name != MARIADB_PLUGIN:
            (home / "plugins" / plugin.name).symlink_to(plugin)
    plugin = home / "plugins" / MARIADB_PLUGIN
    shutil.copytree(cached, plugin)
    classes = work / "shim-classes"
    clients = next((cache / "libs").glob("kafka-clients-*.jar"))
    sources = [str(p) for p in SHIM.rglob("*.java")]
    subprocess.run(["javac", "-d", str(classes), "-cp", str(clients), *sources], check=True)
    subprocess.run(["jar", "cf", str(plugin / "sanitizer-shim.jar"), "-C", str(classes), "."],
                   check=True)  # fmt: skip
    return home


class _Debezium:
    """Debezium's MariaDB connector in the worker, one per measured run."""

    def __init__(self, connect: PrivateKafkaConnect, db: PrivateMariaDB, bootstrap: str) -> None:
        self.connect, self.db, self.bootstrap = connect, db, bootstrap
        self.made = 0

    def start(self, prefix: str, table_: str, **more: str) -> str:
        """A connector with ``snapshot.mode=no_data`` streaming ``table_`` into
        ``prefix.TABLE``, RUNNING, its first offset stored; its name."""
        self.made += 1
        name = prefix
        self.connect.add_connector(name, {
            "connector.class": "io.debezium.connector.mariadb.MariaDbConnector",
            "tasks.max": "1",
            "database.hostname": "127.0.0.1",
            "database.port": str(self.db.port),
            "database.user": "root",
            "database.password": "",
            "database.server.id": str(5400 + self.made),
            "topic.prefix": prefix,
            "table.include.list": table_,
            "snapshot.mode": "no_data",
            "schema.history.internal.kafka.bootstrap.servers": self.bootstrap,
            "schema.history.internal.kafka.topic": f"{prefix}-history",
            "topic.creation.default.replication.factor": "1",
            "topic.creation.default.partitions": "1",
            **more,
        })  # fmt: skip
        self.connect.wait_running(name)
        offsets = self.connect.data_dir / "connect.offsets"
        deadline = time.monotonic() + 60
        while f'"server":"{prefix}"'.encode() not in _read(offsets):
            if time.monotonic() > deadline:
                raise RuntimeError(f"Debezium's connector {name} stored no offset")
            time.sleep(0.1)
        return name

    def stop(self, name: str) -> None:
        _rest(self.connect, "PUT", f"/connectors/{name}/stop")
        self._wait_state(name, "STOPPED")

    def resume(self, name: str) -> None:
        _rest(self.connect, "PUT", f"/connectors/{name}/resume")

    def delete(self, name: str) -> None:
        self.connect.delete_connector(name)

    def _wait_state(self, name: str, state: str) -> None:
        deadline = time.monotonic() + 60
        while self.connect.status(name)["connector"]["state"] != state:
            if time.monotonic() > deadline:
                raise RuntimeError(f"connector {name} not {state}")
            time.sleep(0.1)


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError:
        return b""


def _rest(connect: PrivateKafkaConnect, method: str, path: str) -> None:
    request = urllib.request.Request(connect.url + path, method=method)
    with urllib.request.urlopen(request, timeout=30) as response:
        response.read()


# -- Sluice's processes ----------------------------------------------------------------------
@contextmanager
def _sink_process(
    relay_url: str, to: str, name: str, since: int, logs: Path, *more: str
) -> Iterator[subprocess.Popen[bytes]]:
    args = [sys.executable, "-m", "sluice.cli.main", "sink", "--to", to, "--relay", relay_url,
            "--since-scn", str(since), "--name", name, "--port", "0",
            "--checkpoint-dir", str(logs / f"{name}.checkpoints"), *more]  # fmt: skip
    with (logs / f"{name}.log").open("ab") as log:
        proc = subprocess.Popen(args, stdout=log, stderr=log)
    try:
        yield proc
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


# -- the broker side -------------------------------------------------------------------------
def _make_topics(bootstrap: str, *topics: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(t, 1, 1) for t in topics]).values():
        future.result(30)


def _consumer(bootstrap: str, topic: str, committed: bool) -> Consumer:
    consumer = Consumer({
        "bootstrap.servers": bootstrap,
        "group.id": f"bench-{topic}",
        "enable.auto.commit": False,
        "isolation.level": "read_committed" if committed else "read_uncommitted",
    })  # fmt: skip
    consumer.assign([TopicPartition(topic, 0, -2)])  # from the beginning
    return consumer


class _Reader(threading.Thread):
    """Counts a topic's rows (messages with a value) from its start until ``expected``:
    the arrival time of the first and the last, and their mean value size."""

    def __init__(self, bootstrap: str, topic: str, expected: int, committed: bool) -> None:
        super().__init__(daemon=True)
        self.consumer = _consumer(bootstrap, topic, committed)
        self.expected = expected
        self.rows = self.bytes = 0
        self.first = self.last = 0.0
        self.done = threading.Event()

    def run(self) -> None:
        deadline = time.monotonic() + 600
        while self.rows < self.expected and time.monotonic() < deadline:
            for message in self.consumer.consume(10_000, 0.05):
                value = message.value()
                if message.error() is None and value is not None:
                    self.rows += 1
                    self.bytes += len(value)
            if self.rows and not self.first:
                self.first = time.perf_counter()
        self.last = time.perf_counter()
        self.consumer.close()
        self.done.set()

    def wait(self) -> None:
        if not self.done.wait(620) or self.rows < self.expected:
            raise RuntimeError(f"{self.rows} of {self.expected} rows arrived")


# -- catch-up --------------------------------------------------------------------------------
def _write_rows(db: PrivateMariaDB, first_id: int) -> tuple[int, int]:
    """CATCHUP_TXNS x 1,000 rows from ``first_id``: (the SCN before them, the rows)."""
    conn = db.connect("bench")
    with conn.cursor() as cur:
        start = end_scn(conn)
        for off in range(first_id, first_id + CATCHUP_TXNS * ROWS_PER_TXN, ROWS_PER_TXN):
            cur.execute("INSERT INTO bench.t " + ROW_SQL.format(off=off, n=ROWS_PER_TXN))
            conn.commit()
    conn.close()
    return start, CATCHUP_TXNS * ROWS_PER_TXN


def _timed(reader: _Reader, launch: Callable[[], Any]) -> dict[str, float]:
    """Start ``reader``, then ``launch`` the contender: seconds to the last row."""
    reader.start()
    began = time.perf_counter()
    launch()
    reader.wait()
    seconds = reader.last - began
    after_first = reader.last - reader.first
    return {
        "seconds": round(seconds, 3),
        "rows_per_s": round(reader.rows / seconds),
        "rows_per_s_after_first": round(reader.rows / after_first) if after_first > 0 else 0,
        "bytes_per_row": round(reader.bytes / reader.rows),
    }


def _catch_up_sluice(
    db: PrivateMariaDB, kafka: PrivateKafka, start: int, rows: int, tag: str, work: Path,
    *options: str,
) -> dict[str, float]:  # fmt: skip
    topic = f"sluice-{tag}"
    _make_topics(kafka.bootstrap, topic)
    reader = _Reader(kafka.bootstrap, topic, rows, committed=True)
    processes: list[Any] = []

    def launch() -> None:
        relay = relay_process(db.url, "bench.t", work / f"relay-{tag}", "--since-scn", str(start))
        processes.append(relay)
        sink = _sink_process(relay.url, f"{kafka.url}?topic={topic}", f"s-{tag}", start, work,
                             *options)  # fmt: skip
        processes.append(sink)
        sink.__enter__()

    try:
        return _timed(reader, launch)
    finally:
        if len(processes) > 1:
            processes[1].__exit__(None, None, None)
        if processes:
            processes[0].stop()


def _catch_up_debezium(
    debezium: _Debezium, kafka: PrivateKafka, name: str, rows: int
) -> dict[str, float]:
    reader = _Reader(kafka.bootstrap, f"{name}.bench.t", rows, committed=False)
    try:
        return _timed(reader, lambda: debezium.resume(name))
    finally:
        debezium.delete(name)


def _catch_up(
    db: PrivateMariaDB, kafka: PrivateKafka, debezium: _Debezium, work: Path
) -> tuple[dict[str, Any], tuple[int, int]]:
    rounds: list[dict[str, Any]] = []
    first_id = 0
    start = rows = 0
    for r in range(ROUNDS):
        name = f"dbz-cu{r}"
        _make_topics(kafka.bootstrap, f"{name}.bench.t")
        debezium.stop(debezium.start(name, "bench.t"))
        start, rows = _write_rows(db, first_id)
        first_id += rows
        order = ["sluice", "sluice_schemas", "debezium"]
        if r % 2:
            order.reverse()
        found = {}
        for who in order:
            if who == "debezium":
                found[who] = _catch_up_debezium(debezium, kafka, name, rows)
            else:
                schemas = ("--debezium-option", "schemas.enable=true")
                more = schemas if who == "sluice_schemas" else ()
                found[who] = _catch_up_sluice(db, kafka, start, rows, f"{who}{r}", work, *more)
        print(f"catch-up round {r + 1}: {found}", flush=True)
        rounds.append(found)
    result: dict[str, Any] = {"rows": rows, "rounds": rounds}
    for who in ("sluice", "sluice_schemas", "debezium"):
        result[who] = {
            key: statistics.median(round_[who][key] for round_ in rounds)
            for key in ("seconds", "rows_per_s", "rows_per_s_after_first", "bytes_per_row")
        }
    result["ratio"] = round(result["sluice"]["rows_per_s"] / result["debezium"]["rows_per_s"], 2)
    result["ratio_same_bytes"] = round(
        result["sluice_schemas"]["rows_per_s"] / result["debezium"]["rows_per_s"], 2
    )
    return result, (start, rows)


# -- commit -> consumer latency --------------------------------------------------------------
class _Arrivals(threading.Thread):
    """The arrival time of each id's message (key ``{"id": N}``, or with its schema)."""

    def __init__(self, bootstrap: str, topic: str, committed: bool) -> None:
        super().__init__(daemon=True)
        self.consumer = _consumer(bootstrap, topic, committed)
        self.seen: dict[int, float] = {}
        self.stopping = threading.Event()

    def run(self) -> None:
        while not self.stopping.is_set():
            message = self.consumer.poll(0.05)
            if message is None or message.error() is not None or message.value() is None:
                continue
            arrived = time.perf_counter()
            key = json.loads(message.key() or b"{}")
            self.seen[int(key.get("payload", key)["id"])] = arrived
        self.consumer.close()

    def wait_for(self, ids: range, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while any(i not in self.seen for i in (ids[0], ids[-1])) or len(
            self.seen.keys() & set(ids)
        ) < len(ids):
            if time.monotonic() > deadline:
                missing = len(set(ids) - self.seen.keys())
                raise RuntimeError(f"{missing} of {len(ids)} ids never arrived")
            time.sleep(0.05)


def _write_paced(db: PrivateMariaDB, ids: range, rate: int) -> dict[int, float]:
    """Single-row commits at ``rate`` per second (autocommit): each id's commit time."""
    commits: dict[int, float] = {}
    conn = db.connect()
    conn.autocommit(True)
    cur = conn.cursor()
    began = time.perf_counter()
    for n, i in enumerate(ids):
        cur.execute("INSERT INTO bench.lat VALUES (%s, 'x')", (i,))
        commits[i] = time.perf_counter()
        time.sleep(max(0.0, began + (n + 1) / rate - time.perf_counter()))
    conn.close()
    return commits


def _latency_run(
    db: PrivateMariaDB, kafka: PrivateKafka, topic: str, committed: bool, first_id: int
) -> dict[str, float]:
    """A warm-up id, then LATENCY_S seconds of commits at LATENCY_RATE into bench.lat, read
    from ``topic`` (whose writer is already streaming)."""
    arrivals = _Arrivals(kafka.bootstrap, topic, committed)
    arrivals.start()
    try:
        _write_paced(db, range(first_id, first_id + 1), 1)
        arrivals.wait_for(range(first_id, first_id + 1), 120)
        ids = range(first_id + 1, first_id + 1 + int(LATENCY_RATE * LATENCY_S))
        commits = _write_paced(db, ids, LATENCY_RATE)
        arrivals.wait_for(ids, 60)
    finally:
        arrivals.stopping.set()
        arrivals.join(10)
    return percentiles([(arrivals.seen[i] - commits[i]) * 1000 for i in ids])


def _latency(
    db: PrivateMariaDB, kafka: PrivateKafka, debezium: _Debezium, relay_url: str, work: Path
) -> dict[str, Any]:
    span = int(LATENCY_RATE * LATENCY_S) + 1
    first_id = 0
    rounds: list[dict[str, dict[str, float]]] = []
    for r in range(ROUNDS):
        found: dict[str, dict[str, float]] = {}
        for poll in (500, 1):
            name = f"dbz-lat{r}-{poll}"
            _make_topics(kafka.bootstrap, f"{name}.bench.lat")
            debezium.start(name, "bench.lat", **{"poll.interval.ms": str(poll)})
            try:
                found[f"debezium_poll_{poll}ms"] = _latency_run(
                    db, kafka, f"{name}.bench.lat", False, first_id
                )
            finally:
                debezium.delete(name)
            first_id += span
        for interval in COMMIT_INTERVALS:
            topic = f"sluice-lat{r}-{interval}"
            sink_name = f"lat{r}-{interval}"
            _make_topics(kafka.bootstrap, topic)
            conn = db.connect()
            since = end_scn(conn)
            conn.close()
            to = f"{kafka.url}?topic={topic}"
            more = ("--commit-interval", str(interval))
            with _sink_process(relay_url, to, sink_name, since, work, *more):
                found[f"sluice_commit_{interval}s"] = _latency_run(db, kafka, topic, True, first_id)
            first_id += span
        print(f"latency round {r + 1}: {found}", flush=True)
        rounds.append(found)
    result: dict[str, Any] = {"rate": LATENCY_RATE, "seconds": LATENCY_S, "rounds": rounds}
    for who in rounds[0]:
        result[who] = {
            key: statistics.median(round_[who][key] for round_ in rounds)
            for key in ("p50_ms", "p99_ms", "max_ms")
        }
    dbz = result["debezium_poll_500ms"]["p99_ms"]
    result["p99_fraction_of_debezium"] = {
        who: round(result[who]["p99_ms"] / dbz, 4) for who in rounds[0] if who.startswith("sl")
    }
    return result


# -- the sink against a user's loop ----------------------------------------------------------
def _count(bootstrap: str, topic: str) -> int:
    consumer = _consumer(bootstrap, topic, committed=True)
    low, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), 30)
    rows = 0
    while True:
        batch = consumer.consume(10_000, 1.0)
        if not batch:
            break
        rows += sum(1 for m in batch if m.error() is None and m.value() is not None)
    consumer.close()
    return rows if high > low else 0


def _producer(bootstrap: str) -> Producer:
    return Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})


def _produce(
    producer: Producer, topic: str, value: bytes | None, key: bytes | None, headers: Any
) -> None:
    while True:
        try:
            producer.produce(topic, value, key, headers=headers)
            return
        except BufferError:  # the local queue is full: serve deliveries, then again
            producer.poll(0.05)


class _UserLoop:
    """A user's ``JsonConsumer``: each Debezium envelope with its key, flushed per group."""

    def __init__(self, producer: Producer, topic: str) -> None:
        self.producer, self.topic = producer, topic
        self.events = self.held = 0
        self.first_held = 0.0

    def on_json_window(self, window: JsonWindow) -> None:
        for line in window.lines:
            envelope = json.loads(line)
            row = envelope["after"] or envelope["before"]
            key = json.dumps({"id": row["id"]}, separators=(",", ":")).encode()
            _produce(self.producer, self.topic, line.encode(), key, None)
        self.producer.poll(0)
        self.events += len(window.lines)
        self.held += len(window.lines)
        self.first_held = self.first_held or time.monotonic()
        if self.held >= COMMIT_ROWS or time.monotonic() - self.first_held >= COMMIT_S:
            self.flush()

    def flush(self) -> None:
        if self.producer.flush(60):
            raise RuntimeError("messages not acknowledged")
        self.held, self.first_held = 0, 0.0

    def on_rollback(self, scn: int, error: BaseException) -> None:
        raise error


def _sink_run(kafka: PrivateKafka, relay_url: str, after: int, tag: str, work: Path) -> float:
    config = load_sink_config(
        None, f"sink-{tag}", to=f"{kafka.url}?topic=sink-{tag}", relays=[relay_url],
        since_scn=after, port=0, checkpoint_dir=work / f"sink-{tag}",
    )  # fmt: skip
    began = time.perf_counter()
    asyncio.run(Sink(config).run(until_caught_up=True))
    return time.perf_counter() - began


def _loop_run(kafka: PrivateKafka, relay_url: str, after: int, tag: str) -> float:
    async def main() -> None:
        producer = _producer(kafka.bootstrap)
        loop = _UserLoop(producer, f"loop-{tag}")
        config = ClientConfig(relays=(relay_url,), since_scn=after, debezium=())
        await AsyncClient(config, loop).run(until_caught_up=True)
        loop.flush()

    began = time.perf_counter()
    asyncio.run(main())
    return time.perf_counter() - began


def _write_only_run(kafka: PrivateKafka, tag: str) -> float:
    """The sink's messages, read back from its topic (untimed), produced again."""
    consumer = _consumer(kafka.bootstrap, f"sink-{tag}", committed=True)
    messages = []
    while batch := consumer.consume(10_000, 1.0):
        messages += [(m.value(), m.key(), m.headers()) for m in batch if m.error() is None]
    consumer.close()
    topic = f"only-{tag}"
    began = time.perf_counter()
    producer = _producer(kafka.bootstrap)
    for at in range(0, len(messages), COMMIT_ROWS):
        for value, key, headers in messages[at : at + COMMIT_ROWS]:
            _produce(producer, topic, value, key, headers)
        if producer.flush(60):
            raise RuntimeError("messages not acknowledged")
    return time.perf_counter() - began


def _sink_vs_loop(
    kafka: PrivateKafka, relay_url: str, after: int, rows: int, work: Path
) -> dict[str, Any]:
    rounds = []
    for r in range(ROUNDS):
        tag = f"r{r}"
        _make_topics(kafka.bootstrap, f"sink-{tag}", f"loop-{tag}", f"only-{tag}")
        runs = {
            "sink": lambda tag=tag: _sink_run(kafka, relay_url, after, tag, work),
            "loop": lambda tag=tag: _loop_run(kafka, relay_url, after, tag),
        }
        order = list(runs) if r % 2 == 0 else list(reversed(runs))
        seconds = {who: runs[who]() for who in order}
        seconds["write_only"] = _write_only_run(kafka, tag)
        counts = {who: _count(kafka.bootstrap, f"{who}-{tag}") for who in ("sink", "loop", "only")}
        if set(counts.values()) != {rows}:
            raise AssertionError(f"sink vs loop, round {r + 1}: {rows} rows; stored {counts}")
        found = {f"{who}_s": round(s, 3) for who, s in seconds.items()}
        found["ratio"] = round(seconds["loop"] / seconds["sink"], 2)
        found["ratio_write_only"] = round(seconds["write_only"] / seconds["sink"], 2)
        print(f"sink vs loop round {r + 1}: {found}", flush=True)
        rounds.append(found)
    result: dict[str, Any] = {"rows": rows, "rounds": rounds}
    for who in ("sink", "loop", "write_only"):
        result[f"{who}_rows_per_s"] = round(rows / statistics.median(x[f"{who}_s"] for x in rounds))
    result["ratio"] = statistics.median(x["ratio"] for x in rounds)
    result["ratio_write_only"] = statistics.median(x["ratio_write_only"] for x in rounds)
    return result


def _wait_relay(relay_url: str, db: PrivateMariaDB) -> None:
    conn = db.connect()
    end = end_scn(conn)
    conn.close()
    deadline = time.monotonic() + 120
    while True:
        with urllib.request.urlopen(relay_url + "/stats", timeout=30) as resp:
            if int(json.loads(resp.read())["max_scn"]) >= end:
                return
        if time.monotonic() > deadline:
            raise RuntimeError("the relay did not catch up")
        time.sleep(0.05)


# -- the run ---------------------------------------------------------------------------------
def run() -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        home = _connect_home(work)
        with (
            PrivateMariaDB(work / "mariadb") as db,
            PrivateKafka(work / "kafka") as kafka,
            PrivateKafkaConnect(kafka.bootstrap, work / "connect", home=home) as connect,
        ):
            admin = db.connect()
            with admin.cursor() as cur:
                cur.execute("CREATE DATABASE bench")
                cur.execute(DDL)
                cur.execute(LAT_DDL)
            admin.close()
            debezium = _Debezium(connect, db, kafka.bootstrap)
            relay = relay_process(db.url, "bench.t", work / "relay", "--table", "bench.lat",
                                  "--buffer-size", str(512 << 20))  # fmt: skip
            try:
                catch_up, (after, rows) = _catch_up(db, kafka, debezium, work)
                _wait_relay(relay.url, db)
                loop = _sink_vs_loop(kafka, relay.url, after, rows, work)
                latency = _latency(db, kafka, debezium, relay.url, work)
            finally:
                relay.stop()
    results = {
        "debezium": "MariaDB connector 3.5.0.Final in Kafka Connect 4.4.0 (standalone)",
        "catch_up": catch_up,
        "latency": latency,
        "sink_vs_loop": loop,
    }
    _print(results)
    print(f"results: {write_results('kafka', results)}")
    return results


def _print(results: dict[str, Any]) -> None:
    cu = results["catch_up"]
    rows = [("catch-up, " + f"{cu['rows']:,} rows", "rows/s", "after first", "bytes/row", "s")]
    for who, label in (("sluice", "Sluice relay + sink"),
                       ("sluice_schemas", "Sluice, schemas.enable=true"),
                       ("debezium", "Debezium in Kafka Connect")):  # fmt: skip
        r = cu[who]
        rows.append((label, f"{r['rows_per_s']:,.0f}", f"{r['rows_per_s_after_first']:,.0f}",
                     f"{r['bytes_per_row']:.0f}", f"{r['seconds']:.2f}"))  # fmt: skip
    print(table(rows))
    print(f"catch-up: Sluice {cu['ratio']}x Debezium (target 5x); with Debezium's bytes "
          f"{cu['ratio_same_bytes']}x")  # fmt: skip
    lat = results["latency"]
    lat_rows = [(f"commit -> consumer at {lat['rate']}/s", "p50 ms", "p99 ms", "max ms")]
    lat_rows += [(who, str(lat[who]["p50_ms"]), str(lat[who]["p99_ms"]), str(lat[who]["max_ms"]))
             for who in lat["rounds"][0]]  # fmt: skip
    print(table(lat_rows))
    print(f"p99 as a fraction of Debezium's (target <= 0.1): {lat['p99_fraction_of_debezium']}")
    lp = results["sink_vs_loop"]
    print(table([
        ("sink vs loop", "rows/s"),
        ("sluice sink", f"{lp['sink_rows_per_s']:,}"),
        ("client loop + confluent_kafka", f"{lp['loop_rows_per_s']:,}"),
        ("write-only loop", f"{lp['write_only_rows_per_s']:,}"),
    ]))  # fmt: skip
    print(f"sink {lp['ratio']}x the client loop (target 1.5x), {lp['ratio_write_only']}x the "
          "write-only loop")  # fmt: skip


if __name__ == "__main__":
    run()
