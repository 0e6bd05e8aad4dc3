"""The web console in headless Chromium, against a real relay (a SQLite query source with a
workload running and one table that stops) and a real sink that follows it: the page renders
the sources and an SCN, the SCN and the chart advance while it stays open, the stopped table
shows as stopped, the sink appears as a follower with a link to its own console, and a
killed relay shows as unreachable until it comes back, when the page recovers by itself."""

from __future__ import annotations

import os
import re
import sqlite3
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sluice.bootstrap.seed.records import Seeded, SeedRecords
from sluice.bootstrap.store import BootstrapStore
from sluice.testing import RelayProcess, free_port
from tests.integration.sink_support import SinkProcess
from tests.integration.support import SLUICE, get_json, http_status, wait_for

ORDERS, BAD = "main.orders", "main.bad"


def shot(browser: Any, tmp_path: Path, name: str) -> None:
    """A screenshot of the page: beside the test, and into ``$SLUICE_SCREENSHOTS`` (docs/
    when the README's pictures are made again)."""
    browser.save_screenshot(str(tmp_path / f"{name}.png"))
    folder = os.environ.get("SLUICE_SCREENSHOTS")
    if folder:
        browser.save_screenshot(str(Path(folder) / f"{name}.png"))


def text(browser: Any, css: str) -> str:
    """The element's text as written (``.text`` would apply CSS, such as upper case); read in
    one script call, as the page redraws itself every second."""
    script = "const e = document.querySelector(arguments[0]); return e ? e.textContent : ''"
    return str(browser.execute_script(script, css)).strip()


def attr(browser: Any, css: str, name: str) -> str:
    script = (
        "const e = document.querySelector(arguments[0]);"
        "return e ? (arguments[1] === 'href' ? e.href : e.getAttribute(arguments[1])) : null"
    )
    return str(browser.execute_script(script, css, name) or "")


def hidden(browser: Any, css: str) -> bool:
    return bool(browser.execute_script("return document.querySelector(arguments[0]).hidden", css))


class Workload(threading.Thread):
    """Inserts an order every 20 ms until stopped."""

    def __init__(self, path: Path) -> None:
        super().__init__(daemon=True)
        self.db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self.stop_event = threading.Event()
        self.rows = 0

    def run(self) -> None:
        while not self.stop_event.wait(0.02):
            self.rows += 1
            self.db.execute("INSERT INTO orders (n, note) VALUES (?, 'x')", (self.rows,))


@pytest.fixture
def workload(tmp_path: Path) -> Iterator[tuple[Path, Workload]]:
    path = tmp_path / "app.db"
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("CREATE TABLE orders (id INTEGER PRIMARY KEY, n INT, note TEXT)")
    db.execute("CREATE TABLE bad (id INTEGER PRIMARY KEY, n INT)")
    db.execute("INSERT INTO bad VALUES (1, 'seven')")  # SQLite keeps it; INT cannot decode it
    db.close()
    writer = Workload(path)
    writer.start()
    yield path, writer
    writer.stop_event.set()
    writer.join(10)


def _relay_config(tmp_path: Path, db: Path, port: int) -> Path:
    config = tmp_path / "relay.toml"
    tables = "".join(
        f'[tables."{t}"]\nmode = "incrementing"\nincrementing_column = "id"\npoll_interval = 0.1\n'
        for t in (ORDERS, BAD)
    )
    config.write_text(
        f'source = "query+sqlite:///{db}"\ndata_dir = "{tmp_path / "relay"}"\nport = {port}\n'
        f'name = "orders-relay"\n[links]\nlake = "http://127.0.0.1:7080/ui"\n{tables}'
    )
    return config


def test_the_relay_console_follows_a_live_relay_and_recovers_from_its_death(
    browser: Any, tmp_path: Path, workload: tuple[Path, Workload]
) -> None:
    db, _writer = workload
    args = ["--config", str(_relay_config(tmp_path, db, free_port()))]
    relay = RelayProcess(args, tmp_path / "relay.log").start()
    sink = SinkProcess(
        [
            *("--to", f"sqlite:///{tmp_path / 'replica.db'}", "--relay", relay.url),
            *("--source", ORDERS, "--name", "replica-sink"),
        ],
        tmp_path / "sink.log",
    ).start()
    nowhere = f"postgresql://sluice@127.0.0.1:{free_port()}/replica"  # nothing listens there
    down = SinkProcess(
        ["--to", nowhere, "--relay", relay.url, "--source", ORDERS, "--name", "down-sink"],
        tmp_path / "down.log",
    ).start()
    try:
        browser.get(relay.url + "/ui")
        assert browser.current_url.endswith("/ui/")
        wait_for(lambda: text(browser, "#role") == "relay", 30, "the page to render the relay")
        assert text(browser, "#name") == "orders-relay"
        assert "query+sqlite" in text(browser, "#source-kind")
        assert text(browser, "#source-address") == str(db)
        listed = browser.execute_script(
            "return [...document.querySelectorAll('#source-table tr[data-source]')]"
            ".map(r => r.dataset.source)"
        )
        assert sorted(listed) == [BAD, ORDERS]

        # The SCN advances on the open page; the stopped table shows as stopped, with why.
        first = wait_for(lambda: text(browser, "#max-scn").replace(",", ""), 30, "an SCN")
        wait_for(
            lambda: text(browser, "#max-scn").replace(",", "") not in ("", first),
            30,
            "the SCN to advance on the open page",
        )
        bad = 'tr[data-source="main.bad"]'
        wait_for(lambda: attr(browser, bad, "data-state") == "stopped", 30, "main.bad stopped")
        assert "'seven'" in text(browser, bad + " .state")
        assert attr(browser, 'tr[data-source="main.orders"]', "data-state") == "capturing"
        assert "unhealthy" in text(browser, "#status")  # a stopped table makes /healthz 503

        # The chart gains points (one per 5 s) while the page stays open.
        points = wait_for(lambda: int(attr(browser, "#chart", "data-points") or 0) >= 2, 30, "2")
        last_t = int(attr(browser, "#chart", "data-last-t"))
        wait_for(lambda: int(attr(browser, "#chart", "data-last-t") or 0) > last_t, 30, "the chart")
        assert points

        # The sink said who it is: it is listed, with a link to its own console.
        follower = 'tr[data-follower="replica-sink"] a'
        wait_for(lambda: attr(browser, follower, "href"), 60, "the sink listed as a follower")
        assert attr(browser, follower, "href") == f"{sink.url}/ui"
        assert attr(browser, 'tr[data-link="lake"] a', "href") == "http://127.0.0.1:7080/ui"
        wait_for(lambda: _rate(text(browser, "#rate-now")) > 0, 30, "a rate")
        assert text(browser, "#rate-now").endswith(" events/s")  # a rate says of what
        orders_rate = 'tr[data-source="main.orders"] td:nth-child(3)'
        wait_for(lambda: _rate(text(browser, orders_rate)) > 0, 30, "main.orders' rate")
        assert text(browser, 'tr[data-source="main.bad"] td:nth-child(3)') == "0 events/s"
        # the chart has a time axis: the times of its first, middle and last points
        ticks = browser.execute_script(
            "return [...document.querySelectorAll('#chart-axis span')]"
            ".map(e => [Number(e.dataset.t), e.textContent])"
        )
        assert len(ticks) == 3 and ticks[0][0] < ticks[2][0], ticks
        assert all(re.fullmatch(r"\d\d:\d\d:\d\d", label) for _, label in ticks), ticks
        shot(browser, tmp_path, "console-relay")

        # A killed relay: the page says so, then recovers by itself when it is back.
        relay.kill()
        wait_for(lambda: not hidden(browser, "#banner"), 30, "the page to say unreachable")
        assert "Cannot reach" in text(browser, "#banner")
        assert text(browser, "#status") == "unreachable"
        relay = RelayProcess(args, tmp_path / "relay.log").start()
        wait_for(lambda: hidden(browser, "#banner"), 30, "the page to recover")
        assert text(browser, "#status") != "unreachable"
        after = int(text(browser, "#max-scn").replace(",", ""))
        assert after >= int(first)

        # The sink's own console: target, checkpoint, lag, a link back to the relay.
        browser.get(sink.url + "/ui")
        wait_for(lambda: text(browser, "#role") == "sink", 30, "the sink's page")
        assert text(browser, "#name") == "replica-sink"
        assert "replica.db" in text(browser, "#target")
        wait_for(
            lambda: int(text(browser, "#checkpoint-scn").replace(",", "") or 0) > 0,
            60,
            "the sink's checkpoint on its page",
        )
        assert text(browser, "#dead-letters") == "0"
        assert attr(browser, "#position a", "href") == relay.url + "/ui/"
        shot(browser, tmp_path, "console-sink")

        # A sink whose target is down: its badge says why, not "unhealthy: unhealthy".
        browser.get(down.url + "/ui")
        wait_for(lambda: text(browser, "#role") == "sink", 30, "the second sink's page")
        wait_for(lambda: "unhealthy" in text(browser, "#status"), 60, "the sink unhealthy")
        status = text(browser, "#status")
        assert status.startswith("unhealthy: target down for "), status
        assert "unhealthy: unhealthy" not in status
    finally:
        down.stop()
        sink.stop()
        relay.stop()


def test_the_console_serves_only_its_own_files(
    tmp_path: Path, workload: tuple[Path, Workload]
) -> None:
    db, _writer = workload
    relay = RelayProcess(
        ["--config", str(_relay_config(tmp_path, db, 0))], tmp_path / "relay.log"
    ).start()
    try:
        assert http_status(relay.url + "/ui/secret.txt")[0] == 404
        assert http_status(relay.url + "/ui/%2e%2e%2fstats")[0] == 404
        stats = get_json(relay.url + "/stats")
        assert stats["role"] == "relay" and stats["source"]["kind"] == "query+sqlite"
    finally:
        relay.stop()


def _rate(shown: str) -> float:
    """``1,234.5 events/s`` -> 1234.5 (0 for a dash or nothing yet)."""
    number = shown.split(" ", maxsplit=1)[0].replace(",", "")
    return float(number) if re.fullmatch(r"[\d.]+", number) else 0.0


def _answers(url: str) -> bool:
    try:
        return http_status(url)[0] == 200
    except OSError:  # not listening yet
        return False


def _store_with_seeds(path: Path) -> None:
    """A bootstrap store as `bootstrap run` and `bootstrap seed` leave it mid-way, written
    through the store's own classes: two snapshot generations (the newer served), one table
    seeded in a single chunk and one being seeded (its first chunk done a minute after the
    plan, as when Spark takes that long to start, then two more at a chunk a second)."""
    store = BootstrapStore(str(path))
    store.create(0, (ORDERS, BAD))
    for name in ("scn=100", "scn=200"):
        store.fs.create_dir(store.path("snapshots", name))
    store.publish(200, name="scn=200")
    records = SeedRecords(store)
    now = time.time()
    records.mark_seeded(Seeded(BAD, 1, 90, 90, 7, 1, now - 30))
    gen = records.gen_dir(ORDERS, 1)
    plan: dict[str, Any] = {
        "schema_version": 1,
        "chunk_rows": 10,
        "where": None,
        "ranges": [{}] * 63,
    }
    store.write_json({**plan, "created_at": now - 63}, *gen, "_plan.json")
    for index in range(3):
        body = {"scn": 150, "rows": 1000, "finished_at": now - 2 + index}
        store.write_json(body, *records.done_file(ORDERS, 1, index))


def test_the_bootstrap_console_names_generations_seeds_and_its_relay(
    browser: Any, tmp_path: Path
) -> None:
    _store_with_seeds(tmp_path / "store")
    port, relay = free_port(), "http://127.0.0.1:7070"
    log = (tmp_path / "serve.log").open("w")
    server = subprocess.Popen(
        [*SLUICE, "bootstrap", "serve", "--store", str(tmp_path / "store"), "--port", str(port),
         "--relay", relay],
        stdout=log, stderr=log,
    )  # fmt: skip
    try:
        url = f"http://127.0.0.1:{port}"
        wait_for(lambda: _answers(url + "/stats"), 30, "the bootstrap server")
        browser.get(url + "/ui")
        wait_for(lambda: text(browser, "#role") == "bootstrap", 30, "the bootstrap page")
        # a link back to the relay's console
        assert attr(browser, "#relays a", "href") == relay + "/ui/"
        # snapshots are told apart: not "generation 1" each
        rows = browser.execute_script(
            "return [...document.querySelectorAll('#generations-table tr[data-generation]')]"
            ".map(r => r.textContent)"
        )
        assert len(rows) == 2 and "1 older" in rows[0] and "newest" in rows[1], rows
        assert "served" in rows[1] and "generation" not in " ".join(rows)
        # the table being seeded says so; the seeded one says "1 chunk"
        seeding = f'#source-table tr[data-source="{ORDERS}"]'
        assert text(browser, seeding + " .seed") == "gen 1: seeding now"
        progress = text(browser, seeding + " .progress")
        assert "3/63 chunks, 3,000 rows" in progress and " rows/s, ETA " in progress
        # the ETA counts from the first chunk (60 chunks at one a second), not from the plan
        # (~20 min at the pace since then)
        eta = progress.split("ETA ")[1]
        assert " h " not in eta and int(eta.split(" min")[0] if " min" in eta else 0) < 10, eta
        done = text(browser, f'#source-table tr[data-source="{BAD}"] .seed')
        assert done.startswith("gen 1: 7 rows in 1 chunk,"), done
        shot(browser, tmp_path, "console-bootstrap-seeding")
    finally:
        server.terminate()
        server.wait(30)
        log.close()
