"""Sink groups (``sluice sink --group``) on real servers: a private ZooKeeper, MariaDB as the
source, a PostgreSQL replica and Redis Streams as targets. Members are ``sluice sink``
processes, SIGKILLed, SIGSTOPped past their session and joined by more while a workload runs;
ZooKeeper itself restarts once. The replica must equal the source and Redis must hold every
event once."""

from __future__ import annotations

import asyncio
import itertools
import signal
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import redis

from sluice.cluster import GroupSettings, Membership, parse_coordinator_url
from sluice.core.checkpoint import Online, decode_checkpoint
from sluice.errors import Fenced
from sluice.sink.config import SinkConfig
from sluice.sink.sql.target import SqlTarget
from sluice.testing import PrivateMariaDB, key_text
from sluice.testing.brokers import PrivateRedis
from sluice.testing.postgres import PrivatePostgres
from sluice.testing.relays import RelayThread
from sluice.testing.zookeeper import PrivateZooKeeper
from tests.integration.sink_support import (
    SOURCE_TABLES,
    SinkProcess,
    newest_window,
    relay_events,
    workload,
)
from tests.integration.support import (
    create_database,
    get_json,
    http_status,
    relay_config,
    run_sluice,
    wait_for,
)
from tests.integration.test_sink_replicas import Replica, assert_same_tables

SESSION_S = 4.0
PARTITIONS = 8
_names = itertools.count(1)


class Members:
    """The group's ``sluice sink`` processes."""

    def __init__(self, base: list[str], tmp: Path) -> None:
        self.base, self.tmp, self.all = base, tmp, []
        self.events: dict[int, int] = {}  # the last /stats events of each member

    def add(self) -> SinkProcess:
        n = len(self.all)
        member = SinkProcess(self.base, self.tmp / f"member{n}.log").start()
        self.all.append(member)
        return member

    def stats(self, member: SinkProcess) -> dict[str, Any] | None:
        return member.stats()

    def held(self, members: list[SinkProcess]) -> dict[int, SinkProcess]:
        """Partition -> the member whose /stats says it holds it; empty while two say so (a
        member back from a pause says so until it notices its session expired: fencing is
        what keeps its writes out meanwhile)."""
        held: dict[int, SinkProcess] = {}
        for member in members:
            stats = member.stats()
            # a member's events count what its targets acknowledged, partitions that moved
            # away included: it never goes down while partitions move (a counter)
            events = (stats or {}).get("events")
            if events is not None:
                last = self.events.get(id(member), 0)
                assert events >= last, f"events went down from {last} to {events}"
                self.events[id(member)] = events
            for p in (stats or {}).get("group", {}).get("held", {}):
                if int(p) in held:
                    return {}
                held[int(p)] = member
        return held

    def stop(self) -> None:
        for member in self.all:
            assert member.proc is not None
            if member.proc.poll() is None:
                member.proc.send_signal(signal.SIGCONT)
            member.stop()


def wait_all_held(
    members: Members, alive: list[SinkProcess], timeout: float, partitions: int = PARTITIONS
) -> float:
    """Seconds until the ``alive`` members hold all partitions between them."""
    started = time.monotonic()
    wait_for(lambda: len(members.held(alive)) == partitions, timeout,
             f"{len(alive)} members to hold all {partitions} partitions")  # fmt: skip
    return time.monotonic() - started


def pg_checkpoints(postgres: PrivatePostgres, db: str, group: str) -> dict[str, tuple[int, int]]:
    """The replica's checkpoint rows of ``group``: name -> (SCN, epoch)."""
    conn = postgres.connect(db)
    try:
        cur = conn.cursor()
        cur.execute("SELECT name, checkpoint, epoch FROM sluice_sink_checkpoint WHERE name LIKE %s",
                    (f"{group}.p%",))  # fmt: skip
        return {
            name: (decode_checkpoint(text, where=name).scn if text else -1, epoch)
            for name, text, epoch in cur.fetchall()
        }
    finally:
        conn.close()


def test_a_replica_group_through_kills_a_join_a_pause_and_a_coordinator_restart(
    mariadb: PrivateMariaDB,
    postgres: PrivatePostgres,
    zookeeper_server: PrivateZooKeeper,
    tmp_path: Path,
) -> None:
    """The workload has inserts, updates, deletes, key changes, a TRUNCATE, an ADD COLUMN and
    a table without a key; the replica must equal the source, with no duplicate row."""
    db = f"grp_{next(_names)}"
    conn = create_database(mariadb, db, *SOURCE_TABLES)
    replica = Replica("postgresql", tmp_path, mariadb, postgres)
    group = f"g{next(_names)}"
    sources = [f"{db}.orders", f"{db}.items", f"{db}.audit"]
    with RelayThread(relay_config(mariadb, sources, tmp_path / "r")) as relay:
        members = Members(
            ["--to", replica.url, "--relay", relay.url, "--group", group,
             "--coordinator", zookeeper_server.url(), "--partitions", str(PARTITIONS),
             "--session-timeout", str(SESSION_S)],
            tmp_path,
        )  # fmt: skip
        failures: list[BaseException] = []

        def work() -> None:
            try:
                workload(conn, 1500, pace_s=0.01)
            except BaseException as exc:  # reported by the test's thread
                failures.append(exc)

        worker = threading.Thread(target=work, daemon=True)
        try:
            a, b, c = members.add(), members.add(), members.add()
            wait_all_held(members, [a, b, c], 60)
            worker.start()
            wait_for(lambda: sum((m.stats() or {}).get("events", 0) for m in (a, b, c)) > 200,
                     60, "the group to deliver")  # fmt: skip
            # one member SIGKILLed: its partitions resume elsewhere once its session expires
            a.kill()
            moved = wait_all_held(members, [b, c], SESSION_S + 5 + 20)
            # a fourth member joins: the partitions are dealt again
            d = members.add()
            wait_for(lambda: d in members.held([b, c, d]).values()
                     and len(members.held([b, c, d])) == PARTITIONS,
                     60, "the fourth member")  # fmt: skip
            # one member paused past its session: the others take its partitions; resumed,
            # it must not write (its epochs moved on) and it joins again
            assert b.proc is not None
            b.proc.send_signal(signal.SIGSTOP)
            wait_all_held(members, [c, d], SESSION_S + 30)
            b.proc.send_signal(signal.SIGCONT)
            wait_for(lambda: len(members.held([b, c, d])) == PARTITIONS
                     and b in members.held([b, c, d]).values(),
                     60, "the paused member back")  # fmt: skip
            # ZooKeeper itself restarts once (sessions survive a quick restart)
            zookeeper_server.kill()
            zookeeper_server.restart()
            wait_for(lambda: len(members.held([b, c, d])) == PARTITIONS, 60, "after ZooKeeper")
            worker.join(300)
            assert not failures, failures
            newest = newest_window(relay.url, conn)

            def caught_up() -> bool:
                rows = pg_checkpoints(postgres, replica.name, group)
                return len(rows) == PARTITIONS and all(s >= newest for s, _ in rows.values())

            wait_for(caught_up, 120, f"every partition's checkpoint to reach {newest}")
            followers = {f["name"] for f in get_json(relay.url + "/stats")["followers"]}
            assert {f"{group}.p{p}" for p in range(PARTITIONS)} <= followers, followers
        finally:
            members.stop()
    # the replica equals the source (the keyless table without a duplicate row), and the
    # paused member wrote nothing after its pause (it would show as a difference)
    assert_same_tables(conn, db, replica)
    logs = "".join(m.log_path.read_text() for m in members.all)
    assert "session expired" in (tmp_path / "member1.log").read_text()
    assert "Traceback" not in logs
    epochs = [epoch for _, epoch in pg_checkpoints(postgres, replica.name, group).values()]
    assert max(epochs) >= 2  # partitions changed hands (each take raised its epoch)
    print(f"partitions resumed {moved:.1f} s after the SIGKILL")


def _redis_events(url: str, prefix: str) -> Counter[tuple[int, str, str, str]]:
    """Every entry of the group's streams as (SCN, source, op, key), counted."""
    client = redis.Redis.from_url(url)
    try:
        seen: Counter[tuple[int, str, str, str]] = Counter()
        for key in client.scan_iter(f"{prefix}*"):
            for _, fields in client.xrange(key):
                f = {k.decode(): v.decode() for k, v in fields.items()}
                seen[(int(f["scn"]), f["source"], f["op"], f["key"])] += 1
        return seen
    finally:
        client.close()


def _text(browser: Any, css: str) -> str:
    script = "const e = document.querySelector(arguments[0]); return e ? e.textContent : ''"
    return str(browser.execute_script(script, css)).strip()


def test_a_redis_group_delivers_every_event_once_through_a_sigkill(
    browser: Any,
    mariadb: PrivateMariaDB,
    redis_server: PrivateRedis,
    zookeeper_server: PrivateZooKeeper,
    tmp_path: Path,
) -> None:
    db = f"grp_{next(_names)}"
    conn = create_database(mariadb, db, *SOURCE_TABLES)
    sources = [f"{db}.orders", f"{db}.items", f"{db}.audit"]
    group, prefix = f"r{next(_names)}", f"grp{next(_names)}:"
    with RelayThread(relay_config(mariadb, sources, tmp_path / "r")) as relay:
        members = Members(
            ["--to", f"{redis_server.url}?stream={prefix}{{source}}:{{partition}}",
             "--relay", relay.url, "--group", group, "--coordinator", zookeeper_server.url(),
             "--partitions", "4", "--session-timeout", str(SESSION_S)],
            tmp_path,
        )  # fmt: skip
        try:
            a, b = members.add(), members.add()
            wait_all_held(members, [a, b], 60, 4)
            worker = threading.Thread(target=workload, args=(conn, 200), kwargs={"pace_s": 0.01})
            worker.start()
            wait_for(lambda: sum((m.stats() or {}).get("events", 0) for m in (a, b)) > 100,
                     60, "the group to deliver")  # fmt: skip
            a.kill()  # mid-group: what it delivered without saving its checkpoint comes again
            wait_all_held(members, [b], 60, 4)
            c = members.add()
            worker.join(120)
            newest = newest_window(relay.url, conn)

            def caught_up() -> bool:
                held = members.held([b, c])
                stats = [m.stats() or {} for m in (b, c)]
                scns = [h["checkpoint_scn"] or 0 for s in stats
                        for h in s.get("group", {}).get("held", {}).values()]  # fmt: skip
                return len(held) == 4 and len(scns) == 4 and min(scns) >= newest

            wait_for(caught_up, 120, f"every partition to reach {newest}")
            events = relay_events(relay.url)
            # the member's console shows the group and the partitions it holds
            browser.get(b.url + "/ui")
            wait_for(lambda: _text(browser, "#group-name") == group, 30, "the group on the page")
            shown = (b.stats() or {})["group"]
            held = len(shown["held"])
            assert _text(browser, "#group-held") == f"{held} of 4"
            rows = browser.execute_script(
                "return document.querySelectorAll('#group-partitions tr[data-partition]').length"
            )
            assert rows == held
            assert shown["member"] in _text(browser, "#group-members")
        finally:
            members.stop()
    expected: Counter[tuple[int, str, str, str]] = Counter()
    for event in events:
        key = "" if event["key"] is None else key_text(event["key"])
        times = 4 if event["op"] == "t" else 1  # a truncate reaches every partition
        expected[(event["scn"], event["source"], event["op"], key)] += times
    got = _redis_events(redis_server.url, prefix)
    missing, twice = list((expected - got).items()), list((got - expected).items())
    assert got == expected, f"missing {missing[:10]}, more than once {twice[:10]}"


@pytest.mark.parametrize("kind", ["sqlite", "postgresql", "mariadb"])
def test_a_checkpoint_row_is_fenced_by_the_newest_epoch(
    kind: str, mariadb: PrivateMariaDB, postgres: PrivatePostgres, tmp_path: Path
) -> None:
    """Two members' targets for one partition: once the newer epoch took the row, the older
    one's commits are refused (and commit nothing); a stale take is refused too."""
    if kind == "sqlite":
        url = f"sqlite:///{tmp_path / 'fence.db'}"
    elif kind == "postgresql":
        name = f"fence_{next(_names)}"
        admin = postgres.connect()
        admin.autocommit = True
        admin.cursor().execute(f"CREATE DATABASE {name}")
        admin.close()
        url = f"postgresql://postgres@127.0.0.1:{postgres.port}/{name}"
    else:
        name = f"fence_{next(_names)}"
        create_database(mariadb, name).close()
        url = f"mariadb://root@127.0.0.1:{mariadb.port}/{name}"
    config = SinkConfig(to=url, relays=["http://127.0.0.1:1"], name="g.p3", partition="3/8")

    async def scenario() -> None:
        old, new = SqlTarget(config), SqlTarget(config)
        await old.start()
        await new.start()
        try:
            await old.fence(1, 3)
            assert await old.load_checkpoint() is None  # a row made by the take: no checkpoint
            await old.save_checkpoint(Online(10))
            await old.save_checkpoint(Online(10))  # the same again: still ours
            await new.fence(2, 3)
            assert await new.load_checkpoint() == Online(10)
            with pytest.raises(Fenced, match="another member took the partition over"):
                await old.save_checkpoint(Online(20))
            await new.save_checkpoint(Online(30))
            with pytest.raises(Fenced, match="holds epoch 2, newer than this member's 1"):
                await old.fence(1, 3)
            assert await new.load_checkpoint() == Online(30)
        finally:
            await old.stop()
            await new.stop()

    asyncio.run(scenario())


def test_zookeeper_checkpoints_are_fenced_by_the_epoch(
    zookeeper_server: PrivateZooKeeper,
) -> None:
    """A broker sink's partition checkpoint in ZooKeeper: the member that took the partition
    last writes; the one before it is refused."""
    group = f"z{next(_names)}"

    class Nothing:
        async def start_partition(self, partition: int, epoch: int) -> None:
            return None

        async def stop_partition(self, partition: int) -> None:
            return None

    async def scenario() -> None:
        settings = GroupSettings(
            parse_coordinator_url(zookeeper_server.url()), group, 2, session_timeout_s=4
        )
        async with Membership(settings, Nothing(), {}) as one:
            await asyncio.to_thread(wait_for, lambda: len(one.owned) == 2, 30, "two partitions")
            old = one.checkpoint_store(1, one.owned[1])
            old.save(Online(7))
            async with Membership(settings, Nothing(), {}) as two:
                await asyncio.to_thread(
                    wait_for, lambda: 1 in two.owned and 1 not in one.owned, 30, "the handover"
                )
                new = two.checkpoint_store(1, two.owned[1])
                assert new.load() == Online(7)
                with pytest.raises(Fenced, match="another member took it over"):
                    old.save(Online(8))
                new.save(Online(9))
                assert new.load() == Online(9)
                assert [m["id"] for m in two.describe()["members"]] == [one.member, two.member]

    asyncio.run(scenario())


def test_bad_group_settings_get_one_line_and_exit_2(
    zookeeper_server: PrivateZooKeeper, redis_server: PrivateRedis, tmp_path: Path
) -> None:
    base = ["sink", "--relay", "http://127.0.0.1:9", "--port", "0"]
    pg = ["--to", "postgresql://postgres@127.0.0.1:9/x"]
    for args, says in [
        ([*pg, "--group", "g"], "a group needs --group NAME, --coordinator"),
        ([*pg, "--group", "g", "--coordinator", "zk://h/x", "--partitions", "4"],
         "not HOST:PORT"),
        ([*pg, "--partition", "4/4"], "0 <= I < N"),
        (["--to", redis_server.url, "--group", "g", "--coordinator", zookeeper_server.url(),
          "--partitions", "4"], "needs {partition} in its route template"),
    ]:  # fmt: skip
        result = run_sluice(*base, *args)
        assert result.returncode == 2 and says in result.stderr, (args, result.stderr)
        assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    # a group's partition count is fixed: a member asking for another one stops
    group = f"fixed{next(_names)}"
    zk = ["--coordinator", zookeeper_server.url(), "--group", group, "--session-timeout", "2"]
    url = f"sqlite:///{tmp_path / 'x.db'}"
    member = SinkProcess([*zk, "--to", url, "--relay", "http://127.0.0.1:9", "--partitions", "4"],
                         tmp_path / "first.log").start()  # fmt: skip
    try:
        wait_for(lambda: (s := member.stats()) and s["group"]["member"], 60, "the first member")
        result = run_sluice(*base, *zk, "--to", url, "--partitions", "8")
        assert result.returncode == 2, result.stderr
        assert f"group {group} at" in result.stderr and "has 4 partitions, not 8" in result.stderr
    finally:
        member.stop()


def test_a_group_below_its_quorum_holds_nothing_and_says_so(
    zookeeper_server: PrivateZooKeeper, tmp_path: Path
) -> None:
    group = f"q{next(_names)}"
    args = ["--to", f"sqlite:///{tmp_path / 'q.db'}", "--relay", "http://127.0.0.1:9",
            "--group", group, "--coordinator", zookeeper_server.url(), "--partitions", "4",
            "--quorum", "2", "--session-timeout", "2"]  # fmt: skip
    members = Members(args, tmp_path)
    try:
        first = members.add()

        def waiting() -> str:
            return str(((first.stats() or {}).get("group") or {}).get("waiting"))

        wait_for(lambda: "members" in waiting(), 60, "the first member to wait")
        status, body = http_status(first.url + "/healthz")
        assert status == 503 and "1 of 2 members (the quorum)" in str(body), body
        stats = first.stats() or {}
        assert stats["group"]["held"] == {} and "1 of 2 members" in stats["group"]["waiting"]
        assert "quorum" in first.log_path.read_text()
        second = members.add()
        wait_all_held(members, [first, second], 60, 4)
        assert (first.stats() or {})["group"]["waiting"] is None
    finally:
        members.stop()
