"""The cluster client (``sluice tail --group``, ``sluice.cluster.GroupClient``) on a private
ZooKeeper: members share the partitions, a SIGKILLed member's partitions go on elsewhere
from their checkpoints in ZooKeeper, and together they see every event (at least once)."""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import sys
import threading
from collections import Counter
from pathlib import Path
from typing import Any

from sluice.client import ClientConfig
from sluice.cluster import GroupClient, GroupSettings, parse_coordinator_url
from sluice.core.event import JsonWindow
from sluice.testing import PrivateMariaDB, key_text
from sluice.testing.relays import RelayThread
from sluice.testing.zookeeper import PrivateZooKeeper
from tests.integration.sink_support import SOURCE_TABLES, newest_window, relay_events, workload
from tests.integration.support import create_database, relay_config, run_sluice, wait_for

_names = itertools.count(1)


def _ident(event: dict[str, Any]) -> tuple[int, str, str, str]:
    return (event["scn"], event["source"], event["op"],
            "" if event["key"] is None else key_text(event["key"]))  # fmt: skip


class TailMember:
    def __init__(self, args: list[str], out: Path) -> None:
        self.out = out
        with out.open("w") as stdout, out.with_suffix(".log").open("w") as stderr:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "sluice.cli.main", "-v", "tail", *args],
                stdout=stdout, stderr=stderr, env=dict(os.environ, PYTHONUNBUFFERED="1"),
            )  # fmt: skip

    def events(self) -> list[dict[str, Any]]:
        text = self.out.read_text()
        complete = text[: text.rfind("\n") + 1]  # a SIGKILL may cut the last line
        return [json.loads(line) for line in complete.splitlines() if line]

    def log(self) -> str:
        return self.out.with_suffix(".log").read_text()


def test_tail_members_share_partitions_and_see_every_event_through_a_sigkill(
    mariadb: PrivateMariaDB, zookeeper_server: PrivateZooKeeper, tmp_path: Path
) -> None:
    db = f"cg_{next(_names)}"
    conn = create_database(mariadb, db, *SOURCE_TABLES)
    sources = [f"{db}.orders", f"{db}.items", f"{db}.audit"]
    group = f"t{next(_names)}"
    with RelayThread(relay_config(mariadb, sources, tmp_path / "r")) as relay:
        args = ["--relay", relay.url, "--group", group, "--coordinator", zookeeper_server.url(),
                "--partitions", "4", "--session-timeout", "3"]  # fmt: skip
        a = TailMember(args, tmp_path / "a.jsonl")
        wait_for(lambda: a.log().count("holds partition") >= 4, 60, "the first member")
        b = TailMember(args, tmp_path / "b.jsonl")
        try:
            # the workload starts once the partitions are shared (a loaded machine may take
            # seconds to start the second member)
            wait_for(lambda: "holds partition" in b.log(), 60, "the second member's share")
            worker = threading.Thread(target=workload, args=(conn, 150), kwargs={"pace_s": 0.01})
            worker.start()
            wait_for(lambda: len(a.events()) > 20 and len(b.events()) > 20, 60,
                     "both members to print")  # fmt: skip
            a.proc.send_signal(signal.SIGKILL)
            a.proc.wait()
            worker.join(120)
            expected = Counter(_ident(e) for e in relay_events(relay.url))
            newest = newest_window(relay.url, conn)

            def everything() -> bool:
                seen = {_ident(e) for e in a.events() + b.events()}
                return set(expected) <= seen and max(e["scn"] for e in b.events()) >= newest

            wait_for(everything, 120, "the members to print every event")
        finally:
            for member in (a, b):
                if member.proc.poll() is None:
                    member.proc.send_signal(signal.SIGTERM)
                    member.proc.wait(30)
    assert b.proc.returncode == 0, b.log()
    # B took A's partitions: after the kill, B printed events of all 4 partitions' keys
    assert "holds partition" in b.log() and "Traceback" not in b.log()
    printed_b = Counter(_ident(e) for e in b.events())
    # within one member, each event is printed once (a re-read only follows a takeover, from
    # the checkpoint the previous holder saved: events this member never printed); a truncate
    # once per partition it held (each partition's consumer applies it to its own keys)
    assert all(printed_b[k] <= expected[k] for k in printed_b if k[2] != "t")
    assert all(printed_b[k] <= 4 for k in printed_b if k[2] == "t")


def test_the_python_group_client_shares_partitions(
    mariadb: PrivateMariaDB, zookeeper_server: PrivateZooKeeper, tmp_path: Path
) -> None:
    """Two ``GroupClient``s in threads: each is told the partitions it holds, they hold all
    four between them, and their windows together are every window."""
    db = f"cg_{next(_names)}"
    conn = create_database(mariadb, db, *SOURCE_TABLES)
    sources = [f"{db}.orders", f"{db}.items", f"{db}.audit"]
    with RelayThread(relay_config(mariadb, sources, tmp_path / "r")) as relay:
        workload(conn, 60)
        settings = GroupSettings(
            parse_coordinator_url(zookeeper_server.url()), f"py{next(_names)}", 4,
            session_timeout_s=3,
        )  # fmt: skip

        class Lines:
            def __init__(self) -> None:
                self.lines: list[str] = []
                self.held: frozenset[int] = frozenset()

            def on_json_window(self, window: JsonWindow) -> None:
                self.lines.extend(window.lines)

            def on_rollback(self, scn: int, error: BaseException) -> None:
                return None

            def on_partitions(self, held: frozenset[int]) -> None:
                self.held = held

        config = ClientConfig(relays=(relay.url,))
        consumers = [Lines(), Lines()]
        clients = [GroupClient(config, c, settings) for c in consumers]
        threads = [threading.Thread(target=c.run, daemon=True) for c in clients]
        for t in threads:
            t.start()
        try:
            expected = {_ident(e) for e in relay_events(relay.url)}

            def done() -> bool:
                seen = {_ident(json.loads(line)) for c in consumers for line in c.lines}
                return seen >= expected and consumers[0].held | consumers[1].held == {0, 1, 2, 3}

            wait_for(done, 60, "the two clients to see every event")
            assert consumers[0].held and consumers[1].held
            assert not consumers[0].held & consumers[1].held
        finally:
            for c in clients:
                c.stop()
            for t in threads:
                t.join(30)
    assert not any(t.is_alive() for t in threads)


def test_bad_tail_group_settings_are_one_line(zookeeper_server: PrivateZooKeeper) -> None:
    base = ["tail", "--relay", "http://127.0.0.1:9"]
    for args, says in [
        (["--group", "g"], "a group needs --group NAME"),
        (["--group", "g", "--coordinator", zookeeper_server.url(), "--partitions", "2",
          "--until-caught-up"], "--until-caught-up is for one tail"),
        (["--group", "g", "--coordinator", "zk://x:1", "--partitions", "2"], "needs a path"),
    ]:  # fmt: skip
        result = run_sluice(*base, *args)
        assert result.returncode == 2 and says in result.stderr, (args, result.stderr)
