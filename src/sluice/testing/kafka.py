"""A private Apache Kafka broker for the tests: one KRaft node, broker and controller in one
JVM (or the controller in a JVM of its own: ``controller_apart=True``), in a temp dir on free
ports, with the lifecycle of the other private brokers (``sluice.testing.brokers``)::

    with PrivateKafka() as kafka:          # formats the storage, starts kafka.Kafka, waits
        ...                                # kafka.bootstrap == "127.0.0.1:PORT"
        kafka.kill()                       # SIGKILL: the log stays
        kafka.restart()                    # same ports, same cluster, same topics

There is no Kafka in Debian's packages or on PyPI: ``make setup`` (its ``kafka-jars`` step)
has Maven copy Kafka's jars, pinned in ``java/kafka/pom.xml``, into
``$SLUICE_CACHE/kafka-VERSION/libs`` (``SLUICE_CACHE`` defaults to ``~/.cache/sluice/maven``),
and this class runs ``java -cp 'libs/*'`` on them. Starting takes 6-9 s on a two-core machine
(up to 13 s measured while other tests ran): the JVM, the controller's quorum of one, the
broker's registration.
"""

from __future__ import annotations

import base64
import os
import subprocess
from collections.abc import Sequence
from pathlib import Path

from sluice.testing.brokers import BrokerNotAvailable, _find, _PrivateServer
from sluice.testing.mariadb import free_port

KAFKA_VERSION = "4.4.0"  # the pom's; the cache folder is named after it
_HEAP = "-Xmx512m"  # a test broker holds little; the JVM's default is a quarter of the RAM
_FORMAT_TIMEOUT_S = 120.0

# A combined broker+controller's settings (the ports and paths are added at start). One node,
# so every internal topic has one replica; topics are only made on purpose.
_SETTINGS = {
    "process.roles": "broker,controller",
    "node.id": "1",
    "controller.listener.names": "CONTROLLER",
    "inter.broker.listener.name": "PLAINTEXT",
    "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
    "num.partitions": "1",
    "offsets.topic.replication.factor": "1",
    "transaction.state.log.replication.factor": "1",
    "transaction.state.log.min.isr": "1",
    "share.coordinator.state.topic.replication.factor": "1",
    "share.coordinator.state.topic.min.isr": "1",
    "group.initial.rebalance.delay.ms": "0",
    # After a SIGKILL the dead incarnation stays registered until its session expires, and
    # the restarted broker cannot register before that (9 s by default: restarts took 13 s)
    "broker.heartbeat.interval.ms": "1000",
    "broker.session.timeout.ms": "4000",
    "auto.create.topics.enable": "false",
}

# Eligible leader replicas (KIP-966, on by default since 4.1) off. After a SIGKILL the restarted
# node first acts on its old metadata: its transaction coordinator sends a committed
# transaction's markers, fails (it is not registered yet), and retries them once the controller
# has fenced the dead incarnation and re-registered the new one. With ELR the fencing empties
# the ISR and the re-election is "unclean": the coordinator then dropped the markers for good,
# and read_committed consumers never saw that transaction (1 run in 2). Without it the ISR
# keeps the one replica and the markers went out after every restart tried.
_FEATURES = ("--feature", "eligible.leader.replicas.version=0")

# Kafka's own layout, into server.log (the JVM's stdout) like the other brokers' output.
_LOG4J2 = """\
rootLogger.level = INFO
rootLogger.appenderRef.stdout.ref = STDOUT
appender.stdout.type = Console
appender.stdout.name = STDOUT
appender.stdout.layout.type = PatternLayout
appender.stdout.layout.pattern = [%d] %p %m (%c)%n
logger.state.name = state.change.logger
logger.state.level = WARN
"""


def kafka_libs() -> Path:
    """The folder ``make kafka-jars`` fills: ``$SLUICE_CACHE/kafka-VERSION/libs``."""
    cache = os.environ.get("SLUICE_CACHE") or Path.home() / ".cache" / "sluice" / "maven"
    return Path(cache) / f"kafka-{KAFKA_VERSION}" / "libs"


def _check_libs(libs: Path) -> None:
    # make writes .pom.sha256 after the last jar: without it the copy is missing or partial
    if not (libs / ".pom.sha256").is_file() or not any(libs.glob("kafka_2.13-*.jar")):
        raise BrokerNotAvailable(
            f"Kafka {KAFKA_VERSION}'s jars are not in {libs}; run `make setup` "
            "(or `make kafka-jars`; SLUICE_CACHE says where the cache is)"
        )


def new_cluster_id() -> str:
    """What ``kafka-storage random-uuid`` prints (a Uuid in URL-safe base64, never starting
    with '-'), made here to spare a JVM start."""
    while True:
        text = base64.urlsafe_b64encode(os.urandom(16)).rstrip(b"=").decode()
        if not text.startswith("-"):
            return text


class PrivateKafka(_PrivateServer):
    """A single-node KRaft cluster: PLAINTEXT clients on ``port``, the controller's quorum on
    ``controller_port``, the log in the temp dir; no auth. Transactions work (the internal
    topics have one replica), topics are never created implicitly."""

    kind = "kafka"
    binary = "java"
    package = "default-jre-headless"  # Kafka 4 needs Java 17; Debian 12's default is 17
    start_timeout = 120.0

    def __init__(
        self, base_dir: Path | None = None, *, libs: Path | None = None,
        controller_apart: bool = False,
    ) -> None:  # fmt: skip
        super().__init__(base_dir)
        self.libs = libs or kafka_libs()
        self.controller_port = 0
        self.cluster_id = ""
        # The controller in a JVM of its own (as production runs KRaft): kill() and restart()
        # are then a broker's crash, the quorum stays up. In one JVM a restarted node first
        # acts on the metadata of its dead incarnation, and the controller fences that one a
        # session later: partitions have no leader for a moment, and a prepared transaction's
        # markers sent then are dropped for good ("likely deleted already and hence can be
        # skipped", KAFKA-5202): read_committed consumers see that transaction only once the
        # producer writes those partitions again, and its checkpoint not at all meanwhile.
        self.controller: _KafkaController | None = (
            _KafkaController(self.base_dir / "controller", self) if controller_apart else None
        )

    @property
    def bootstrap(self) -> str:
        """``bootstrap.servers`` for a client."""
        return f"127.0.0.1:{self.port}"

    @property
    def url(self) -> str:
        return f"kafka://{self.bootstrap}"

    @property
    def properties_path(self) -> Path:
        return self.base_dir / "server.properties"

    def _prepare(self) -> None:
        _check_libs(self.libs)
        meta = self.data_dir / "meta.properties"
        if meta.exists():  # a restart (or a kept dir): formatted already
            self.cluster_id = _property(meta, "cluster.id")
        if self.controller is not None:
            if not self.cluster_id:
                self.cluster_id = new_cluster_id()
            if not self.controller.running:
                self.controller.start()
            self.controller_port = self.controller.port
            self._write_settings({
                **_SETTINGS,
                "process.roles": "broker",
                "controller.quorum.voters": f"{_CONTROLLER_ID}@127.0.0.1:{self.controller_port}",
                "listeners": f"PLAINTEXT://127.0.0.1:{self.port}",
            })  # fmt: skip
            if not meta.exists():
                self._format(features=False)
            return
        while self.controller_port in (0, self.port):
            self.controller_port = free_port()
        self._write_settings({
            **_SETTINGS,
            "controller.quorum.voters": f"1@127.0.0.1:{self.controller_port}",
            "listeners": (
                f"PLAINTEXT://127.0.0.1:{self.port},CONTROLLER://127.0.0.1:{self.controller_port}"
            ),
        })  # fmt: skip
        if not meta.exists():
            self.cluster_id = new_cluster_id()
            self._format()

    def _write_settings(self, settings: dict[str, str]) -> None:
        settings = {
            **settings,
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{self.port}",
            "log.dirs": str(self.data_dir),
        }
        self.properties_path.write_text("".join(f"{k}={v}\n" for k, v in settings.items()))
        (self.base_dir / "log4j2.properties").write_text(_LOG4J2)

    def stop(self, *, keep_data: bool = False) -> None:
        # the broker first (its shutdown asks the controller), then the quorum, then the dir
        super().stop(keep_data=True)
        if keep_data:
            return
        if self.controller is not None:
            self.controller.stop()
        super().stop()

    def _format(self, *, features: bool = True) -> None:
        java = _find(self.binary, self.package)
        tool = ["kafka.tools.StorageTool", "format", "-t", self.cluster_id,
                *(_FEATURES if features else ())]  # fmt: skip
        with self.log_path.open("ab") as log:
            try:
                done = subprocess.run(
                    self._java(java, [*tool, "-c", str(self.properties_path)]),
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    cwd=self.base_dir,
                    timeout=_FORMAT_TIMEOUT_S,
                    check=False,
                )
            except subprocess.TimeoutExpired:
                raise BrokerNotAvailable(self._failure("storage format timed out")) from None
        if done.returncode != 0:
            raise BrokerNotAvailable(self._failure(f"storage format exited {done.returncode}"))

    def _java(self, java: str, main: Sequence[str]) -> list[str]:
        log4j = self.base_dir / "log4j2.properties"
        return [
            java,
            _HEAP,
            "-Djava.awt.headless=true",
            f"-Dlog4j2.configurationFile={log4j}",
            "-cp",
            str(self.libs / "*"),  # the JVM expands it: every jar in the folder
            *main,
        ]

    def _command(self, binary: str) -> Sequence[str]:
        return self._java(binary, ["kafka.Kafka", str(self.properties_path)])

    def _ready(self) -> bool:
        # The client port opens once the broker is unfenced; a metadata answer naming this
        # cluster proves it is the broker started here, serving.
        return self._accepts() and _kafka_cluster_id(self.bootstrap) == self.cluster_id


_CONTROLLER_ID = 1000


class _KafkaController(PrivateKafka):
    """The controller quorum (of one) of a ``PrivateKafka(controller_apart=True)``."""

    kind = "kafka-controller"

    def __init__(self, base_dir: Path, broker: PrivateKafka) -> None:
        super().__init__(base_dir, libs=broker.libs)
        self.broker = broker

    def _prepare(self) -> None:
        _check_libs(self.libs)
        self.cluster_id = self.broker.cluster_id
        self.controller_port = self.port
        self._write_settings({
            **{k: v for k, v in _SETTINGS.items() if not k.startswith("inter.broker")},
            "process.roles": "controller",
            "node.id": str(_CONTROLLER_ID),
            "controller.quorum.voters": f"{_CONTROLLER_ID}@127.0.0.1:{self.port}",
            "listeners": f"CONTROLLER://127.0.0.1:{self.port}",
            "listener.security.protocol.map": "CONTROLLER:PLAINTEXT",
        })  # fmt: skip
        if not (self.data_dir / "meta.properties").exists():
            self._format()

    def _write_settings(self, settings: dict[str, str]) -> None:
        settings = {**settings, "log.dirs": str(self.data_dir)}
        self.properties_path.write_text("".join(f"{k}={v}\n" for k, v in settings.items()))
        (self.base_dir / "log4j2.properties").write_text(_LOG4J2)

    def _ready(self) -> bool:
        return self._accepts()


def _property(path: Path, key: str) -> str:
    for line in path.read_text().splitlines():
        name, sep, value = line.partition("=")
        if sep and name.strip() == key:
            return value.strip()
    raise BrokerNotAvailable(f"{path} has no {key}")


def _kafka_cluster_id(bootstrap: str) -> str | None:
    """The cluster id a Kafka broker answers a metadata request with, or None."""
    # Imported here: only Kafka needs this client library (confluent-kafka, in the dev extra).
    from confluent_kafka import KafkaException  # noqa: PLC0415
    from confluent_kafka.admin import AdminClient  # noqa: PLC0415

    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})  # a probe: no logs
    try:
        metadata = admin.list_topics(timeout=2)
    except KafkaException:
        return None
    return metadata.cluster_id if metadata.brokers else None


__all__ = ["KAFKA_VERSION", "PrivateKafka", "kafka_libs", "new_cluster_id"]
