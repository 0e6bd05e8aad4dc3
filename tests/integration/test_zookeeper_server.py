"""The private ZooKeeper server the coordination code will be tested against: a real standalone
node that keeps sessions and ephemeral nodes, keeps its znodes and its port across kill() +
restart(), leaves nothing behind when stopped, and says how to get its jars when they are
missing."""

from __future__ import annotations

import re
import socket
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from sluice.testing.brokers import BrokerNotAvailable
from sluice.testing.zookeeper import ZOOKEEPER_VERSION, PrivateZooKeeper, serving
from tests.integration.support import wait_for

pytestmark = pytest.mark.timeout(120)

_ROOT = Path(__file__).resolve().parents[2]
_SESSION_S = 2.0  # short sessions: what the server's minSessionTimeout (1 s) allows


@contextmanager
def _client(hosts: str) -> Iterator[KazooClient]:
    client = KazooClient(hosts=hosts, timeout=_SESSION_S)
    client.start(timeout=15)
    try:
        yield client
    finally:
        client.stop()
        client.close()


def _path() -> str:
    return f"/t{uuid.uuid4().hex[:12]}"


def _refuses(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    except ConnectionRefusedError:
        return True
    except OSError:
        return False
    return False


def _processes_in(base_dir: Path) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and (entry / "cwd").readlink().is_relative_to(base_dir):
                found.append(int(entry.name))
        except OSError:  # gone meanwhile, or a zombie
            continue
    return found


def test_ephemeral_node_lives_as_long_as_its_session(zookeeper_server: PrivateZooKeeper) -> None:
    path = _path()
    with _client(zookeeper_server.hosts) as watcher:
        with _client(zookeeper_server.hosts) as owner:
            # the short session was granted, not raised to the server's default minimum (2 ticks
            # of 2 s would be 4 s)
            assert owner._session_timeout == _SESSION_S * 1000
            owner.create(f"{path}/member", b"one", ephemeral=True, makepath=True)
            assert watcher.get(f"{path}/member")[0] == b"one"
        # the owner closed its session: the server deletes its ephemeral node
        wait_for(lambda: watcher.exists(f"{path}/member") is None, 10, "the node's deletion")
        assert watcher.exists(path) is not None  # its persistent parent stays


def test_answers_four_letter_words(zookeeper_server: PrivateZooKeeper) -> None:
    assert zookeeper_server.four_letter_word("ruok") == "imok"
    assert serving(zookeeper_server.four_letter_word("srvr"))
    assert f"zk_version\t{ZOOKEEPER_VERSION}" in zookeeper_server.four_letter_word("mntr")
    port = zookeeper_server.port
    assert zookeeper_server.hosts == f"127.0.0.1:{port}"
    assert zookeeper_server.url() == f"zk://127.0.0.1:{port}/sluice"
    assert zookeeper_server.url("/a/b") == f"zk://127.0.0.1:{port}/a/b"


def test_chroot_in_the_hosts_string(zookeeper_server: PrivateZooKeeper) -> None:
    root = _path()
    with _client(zookeeper_server.hosts) as client:
        client.ensure_path(root)
    with _client(zookeeper_server.hosts + root) as chrooted:
        chrooted.create("/inside", b"x")
    with _client(zookeeper_server.hosts) as client:
        assert client.get(f"{root}/inside")[0] == b"x"


def test_paused_server_answers_nothing_until_resumed(zookeeper_server: PrivateZooKeeper) -> None:
    zookeeper_server.pause()  # SIGSTOP: the port stays open, nothing answers
    try:
        assert zookeeper_server.four_letter_word("ruok") == ""
    finally:
        zookeeper_server.resume()
    wait_for(lambda: serving(zookeeper_server.four_letter_word("srvr")), 10, "srvr")


def test_kill_and_restart_keep_the_znodes_and_the_port_and_stop_leaves_nothing() -> None:
    server = PrivateZooKeeper()
    try:
        started = time.monotonic()
        server.start()
        print(f"ZooKeeper started in {time.monotonic() - started:.2f} s")
        base_dir, port = server.base_dir, server.port
        assert _processes_in(base_dir)
        client = KazooClient(hosts=server.hosts, timeout=_SESSION_S)
        client.start(timeout=15)
        try:
            client.create("/kept/a", b"persistent", makepath=True)
            client.create("/kept/ephemeral", b"", ephemeral=True)
            server.kill()  # SIGKILL: no clean shutdown; the txn log is replayed at start
            assert _refuses(port)
            assert not _processes_in(base_dir)
        finally:
            client.stop()  # the session cannot be closed: the server is down
            client.close()

        started = time.monotonic()
        server.restart()
        print(f"ZooKeeper restarted after SIGKILL in {time.monotonic() - started:.2f} s")
        assert server.port == port
        with _client(server.hosts) as client:
            assert client.get("/kept/a")[0] == b"persistent"
            # the dead client's session came back with the log, and expires on the new server
            wait_for(lambda: client.exists("/kept/ephemeral") is None, 30, "session expiry")
    finally:
        server.stop()

    assert not base_dir.exists()
    assert _refuses(port)
    assert not _processes_in(base_dir)
    server.stop()  # twice is fine
    with pytest.raises(BrokerNotAvailable, match="stopped for good"):
        server.restart()


def test_failed_start_shows_the_log() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        server = PrivateZooKeeper()
        server.port = taken.getsockname()[1]
        try:
            with pytest.raises(BrokerNotAvailable, match=r"(?s)exited with status.*in use"):
                server.start()
        finally:
            server.stop()
    assert not server.base_dir.exists()


def test_missing_jars_name_make_zookeeper_jars(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("SLUICE_KEEP_BROKERS", raising=False)
    server = PrivateZooKeeper(libs=tmp_path / "libs")
    try:
        with pytest.raises(BrokerNotAvailable, match="make zookeeper-jars"):
            server.start()
    finally:
        server.stop()
    assert not server.base_dir.exists()


def test_the_pom_and_the_makefile_pin_the_version_the_fixture_looks_for() -> None:
    pom = (_ROOT / "java" / "zookeeper" / "pom.xml").read_text()
    makefile = (_ROOT / "Makefile").read_text()
    assert re.findall(r"<zookeeper.version>(.+)</zookeeper.version>", pom) == [ZOOKEEPER_VERSION]
    assert re.findall(r"^ZOOKEEPER_LIBS = \S+/zookeeper-(\S+)/libs$", makefile, re.M) == [
        ZOOKEEPER_VERSION
    ]
