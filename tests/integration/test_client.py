"""Client behaviour against a real relay: retries, rollback, failover, partitions, formats."""

from __future__ import annotations

import asyncio
import json
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pymysql
import pytest

from sluice.client import (
    AsyncClient,
    ClientConfig,
    ConsumerFailed,
    MemoryCheckpointStore,
    RetryPolicy,
)
from sluice.core.event import Event, JsonWindow, Window
from sluice.testing import PrivateMariaDB, RecordingConsumer, RelayThread, free_port
from tests.integration.support import consume, get_json, relay_config, wait_relay_caught_up

FAST = RetryPolicy(initial_s=0.01, max_s=0.05, max_window_attempts=3)


@pytest.fixture
def relay(
    mariadb: PrivateMariaDB, database: str, conn: pymysql.Connection[Any], tmp_path: Path
) -> Iterator[RelayThread]:
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE kv (k INT PRIMARY KEY, v VARCHAR(20))")
        cur.execute("CREATE TABLE other (id INT PRIMARY KEY)")
    tables = [f"{database}.kv", f"{database}.other"]
    with RelayThread(relay_config(mariadb, tables, tmp_path / "relay")) as running:
        with conn.cursor() as cur:
            for k in range(40):
                cur.execute("INSERT INTO kv VALUES (%s, %s)", (k, f"v{k}"))
                cur.execute("INSERT INTO other VALUES (%s)", (k,))
        wait_relay_caught_up(running.url, conn)
        yield running


class Flaky(RecordingConsumer):
    """Fails on the events of one window a given number of times."""

    def __init__(self, fail_scn_index: int, failures: int) -> None:
        super().__init__()
        self.fail_index = fail_scn_index
        self.failures = failures
        self.starts: list[int] = []

    def on_window_start(self, scn: int) -> None:
        self.starts.append(scn)

    def on_event(self, event: Event) -> None:
        if len(self.windows) == self.fail_index and self.failures > 0:
            self.failures -= 1
            raise RuntimeError("downstream is down")


def test_failing_window_is_rolled_back_and_retried(relay: RelayThread) -> None:
    flaky = Flaky(fail_scn_index=3, failures=2)
    consume(relay.url, flaky, retry=FAST)
    assert len(flaky.rollbacks) == 2 and flaky.rollbacks[0] == flaky.rollbacks[1]
    assert flaky.windows[3].scn == flaky.rollbacks[0]
    assert len(flaky.windows) == 80 and flaky.starts.count(flaky.rollbacks[0]) == 3


def test_consumer_that_keeps_failing_stops_without_losing_its_place(relay: RelayThread) -> None:
    flaky = Flaky(fail_scn_index=5, failures=100)
    store = MemoryCheckpointStore()
    with pytest.raises(ConsumerFailed, match="failed 3 times"):
        consume(relay.url, flaky, store, retry=FAST)
    assert store.checkpoint is not None and store.checkpoint.scn == flaky.windows[4].scn
    again = RecordingConsumer()
    consume(relay.url, again, store)  # resumes at the failed window
    assert again.windows[0].scn > flaky.windows[4].scn and len(again.windows) == 75


def test_failover_to_the_next_relay(relay: RelayThread) -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    recorder = RecordingConsumer()
    client = AsyncClient(
        ClientConfig(relays=(dead, relay.url), retry=RetryPolicy(initial_s=0.01)), recorder
    )
    asyncio.run(client.run(until_caught_up=True))
    assert len(recorder.windows) == 80


def test_partitions_split_keys_and_cover_the_stream(relay: RelayThread, database: str) -> None:
    whole = RecordingConsumer()
    consume(relay.url, whole, sources=(f"{database}.kv",))
    keys: list[set[int]] = []
    for i in range(3):
        part = RecordingConsumer()
        consume(relay.url, part, sources=(f"{database}.kv",), partition=f"{i}/3")
        keys.append({e.key["k"] for e in part.events})  # type: ignore[index]
    assert sum(len(k) for k in keys) == 40 and set().union(*keys) == set(range(40))
    assert all(k for k in keys)
    assert {e.source for e in whole.events} == {f"{database}.kv"} and len(whole.events) == 40


def test_async_consumer_hooks_and_json_format(relay: RelayThread, database: str) -> None:
    seen: list[int] = []

    class AsyncConsumer(RecordingConsumer):
        async def on_window_end(self, window: Window) -> None:  # type: ignore[override]
            await asyncio.sleep(0)
            seen.append(window.scn)

    client = AsyncClient(ClientConfig(relays=(relay.url,)), AsyncConsumer())
    asyncio.run(client.run(until_caught_up=True))
    assert len(seen) == 80 and seen == sorted(seen)
    url = f"{relay.url}/stream?since_scn=0&format=json&timeout_ms=0&sources={database}.kv"
    start = get_json(relay.url + "/stats")["min_scn"]
    url = url.replace("since_scn=0", f"since_scn={start}")
    with urllib.request.urlopen(url, timeout=30) as resp:
        lines = [json.loads(x) for x in resp.read().splitlines()]
    assert [x["key"]["k"] for x in lines] == list(range(40))
    assert lines[0]["after"] == {"k": 0, "v": "v0"} and lines[0]["op"] == "c"


def test_sources_metrics_and_stats(relay: RelayThread, database: str) -> None:
    sources = get_json(relay.url + "/sources")["sources"]
    assert {s["source"] for s in sources} == {f"{database}.kv", f"{database}.other"}
    with urllib.request.urlopen(relay.url + "/metrics", timeout=30) as resp:
        text = resp.read().decode()
    assert "sluice_relay_max_scn " in text and "sluice_relay_capture_up 1" in text
    stats = get_json(relay.url + "/stats")
    assert stats["events"] == 80 and stats["capture"]["connected"] is True
    assert stats["min_scn"] < stats["max_scn"] and "mysql://" not in json.dumps(stats)


class FlakyJson:
    """A JSON consumer failing twice on its fourth window."""

    def __init__(self) -> None:
        self.windows: list[JsonWindow] = []
        self.rollbacks: list[int] = []
        self.failures = 2

    def on_json_window(self, window: JsonWindow) -> None:
        if len(self.windows) == 3 and self.failures:
            self.failures -= 1
            raise RuntimeError("disk full")
        self.windows.append(window)

    def on_rollback(self, scn: int, error: BaseException) -> None:
        self.rollbacks.append(scn)


def test_json_consumer_gets_the_event_paths_text(relay: RelayThread, database: str) -> None:
    """A JsonConsumer's lines are the JSON of the events an ordinary consumer gets, and it
    keeps the same retry and checkpoint rules."""
    events, store = RecordingConsumer(), MemoryCheckpointStore()
    json_consumer = FlakyJson()
    consume(relay.url, events, sources=(f"{database}.kv",))
    consume(relay.url, json_consumer, store, sources=(f"{database}.kv",), retry=FAST)
    lines = [line for w in json_consumer.windows for line in w.lines]
    assert lines == [
        json.dumps(e.to_json_dict(), ensure_ascii=False) for w in events.windows for e in w.events
    ]
    assert len(lines) == 40 and json.loads(lines[7])["after"] == {"k": 7, "v": "v7"}
    assert json_consumer.rollbacks == [json_consumer.windows[3].scn] * 2
    # Caught up: past its last window (a heartbeat also covers the filtered-out table's).
    assert store.checkpoint is not None and store.checkpoint.scn >= json_consumer.windows[-1].scn
