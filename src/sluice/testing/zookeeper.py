"""A private Apache ZooKeeper server for the tests: one standalone node in a temp dir on a free
port, with the lifecycle of the other private brokers (``sluice.testing.brokers``)::

    with PrivateZooKeeper() as zk:         # writes zoo.cfg, starts ZooKeeperServerMain, waits
        ...                                # zk.hosts == "127.0.0.1:PORT" (kazoo's hosts=)
        zk.kill()                          # SIGKILL: the snapshot and the txn log stay
        zk.restart()                       # same port, same znodes

Sessions may be as short as 1 s (``minSessionTimeout``), so tests can let one expire in a few
seconds. The admin server (Jetty) is off; the four-letter words ``ruok``, ``srvr``, ``stat`` and
``mntr`` answer.

There is no ZooKeeper server on PyPI: ``make setup`` (its ``zookeeper-jars`` step) has Maven
copy its jars, pinned in ``java/zookeeper/pom.xml``, into
``$SLUICE_CACHE/zookeeper-VERSION/libs`` (``SLUICE_CACHE`` defaults to
``~/.cache/sluice/maven``), and this class runs ``java -cp 'libs/*'`` on them. Starting takes
about 0.5 s (one small JVM, an empty tree).
"""

from __future__ import annotations

import os
import socket
from collections.abc import Sequence
from pathlib import Path

from sluice.testing.brokers import BrokerNotAvailable, _PrivateServer

ZOOKEEPER_VERSION = "3.9.5"  # the pom's; the cache folder is named after it
# A test server holds a few znodes; the JVM's default is a quarter of the RAM. The serial
# collector: the machine has two cores, shared with Kafka's and Spark's JVMs.
_JVM_OPTIONS = ("-Xmx256m", "-XX:+UseSerialGC", "-Djava.awt.headless=true")
_MAIN = "org.apache.zookeeper.server.ZooKeeperServerMain"

# The settings of a standalone node (dataDir and the client port are added at start).
_SETTINGS = {
    "tickTime": "500",
    "minSessionTimeout": "1000",  # 2 ticks would be the floor; tests ask for 2-4 s sessions
    "maxSessionTimeout": "60000",
    "admin.enableServer": "false",  # Jetty is not on the classpath, and no port to pick
    "4lw.commands.whitelist": "ruok,srvr,stat,mntr",
    "autopurge.purgeInterval": "0",
}


def zookeeper_libs() -> Path:
    """The folder ``make zookeeper-jars`` fills: ``$SLUICE_CACHE/zookeeper-VERSION/libs``."""
    cache = os.environ.get("SLUICE_CACHE") or Path.home() / ".cache" / "sluice" / "maven"
    return Path(cache) / f"zookeeper-{ZOOKEEPER_VERSION}" / "libs"


def _check_libs(libs: Path) -> None:
    # make writes .pom.sha256 after the last jar: without it the copy is missing or partial
    if not (libs / ".pom.sha256").is_file() or not any(libs.glob("zookeeper-3*.jar")):
        raise BrokerNotAvailable(
            f"ZooKeeper {ZOOKEEPER_VERSION}'s jars are not in {libs}; run `make zookeeper-jars` "
            "(or `make setup`; SLUICE_CACHE says where the cache is)"
        )


def zoo_cfg(data_dir: Path, port: int) -> str:
    """The text of ``zoo.cfg`` for a standalone node on 127.0.0.1:``port``."""
    settings = {
        "dataDir": str(data_dir),
        "clientPort": str(port),
        "clientPortAddress": "127.0.0.1",
        **_SETTINGS,
    }
    return "".join(f"{key}={value}\n" for key, value in settings.items())


def serving(srvr: str) -> bool:
    """Whether a ``srvr`` answer comes from a node that serves clients.

    Not ``ruok``: it says ``imok`` as soon as the port is open, before the database is loaded
    (and kept saying it while a server whose main thread had died served nothing).
    """
    return any(line.strip() == "Mode: standalone" for line in srvr.splitlines())


class PrivateZooKeeper(_PrivateServer):
    """A standalone ZooKeeper on 127.0.0.1:``port``, its snapshot and txn log in the temp dir;
    no auth, no admin server."""

    kind = "zookeeper"
    binary = "java"
    package = "default-jre-headless"  # ZooKeeper 3.9 runs on Java 8+; Debian 12's is 17
    start_timeout = 60.0

    def __init__(self, base_dir: Path | None = None, *, libs: Path | None = None) -> None:
        super().__init__(base_dir)
        self.libs = libs or zookeeper_libs()

    @property
    def hosts(self) -> str:
        """The connect string a client takes (kazoo's ``hosts``)."""
        return f"127.0.0.1:{self.port}"

    def url(self, path: str = "/sluice") -> str:
        """``zk://127.0.0.1:PORT/path``: this server with a chroot."""
        return f"zk://{self.hosts}/{path.lstrip('/')}"

    @property
    def config_path(self) -> Path:
        return self.base_dir / "zoo.cfg"

    def four_letter_word(self, word: str) -> str:
        """The server's answer to a four-letter word (``ruok``, ``srvr``, ``stat``, ``mntr``),
        or "" when it does not answer within a second."""
        return _four_letter_word(self.port, word)

    def _prepare(self) -> None:
        _check_libs(self.libs)
        self.config_path.write_text(zoo_cfg(self.data_dir, self.port))

    def _command(self, binary: str) -> Sequence[str]:
        return [
            binary,
            *_JVM_OPTIONS,
            "-cp",
            str(self.libs / "*"),  # the JVM expands it: every jar in the folder
            _MAIN,
            str(self.config_path),
        ]

    def _ready(self) -> bool:
        return serving(self.four_letter_word("srvr"))


def _four_letter_word(port: int, word: str) -> str:
    received = b""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1) as sock:
            sock.sendall(word.encode())
            while chunk := sock.recv(4096):  # the server closes after its answer
                received += chunk
    except OSError:
        return ""
    return received.decode(errors="replace")


__all__ = ["ZOOKEEPER_VERSION", "PrivateZooKeeper", "serving", "zoo_cfg", "zookeeper_libs"]
