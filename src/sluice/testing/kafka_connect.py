"""A private Kafka Connect worker for the tests: one standalone worker (``ConnectStandalone``)
in a temp dir, its REST API on a free port, Debezium's JDBC sink connector as its plugin,
with the lifecycle of the other private servers (``sluice.testing.brokers``)::

    with PrivateKafkaConnect(kafka.bootstrap) as connect:     # starts the worker, waits
        connect.add_connector("orders-sink", {...})           # POST /connectors
        connect.wait_running("orders-sink")                   # raises ConnectorFailed
        connect.status("orders-sink")                         # GET /connectors/NAME/status
        connect.delete_connector("orders-sink")

``make setup`` (its ``connect-jars`` step) has Maven copy the worker's jars, pinned in
``java/connect/pom.xml``, into ``$SLUICE_CACHE/connect-VERSION/libs`` and the connector with
its dependencies and the PostgreSQL driver into ``.../plugins/debezium-connector-jdbc`` (the
worker loads it in a class loader of its own: ``plugin.path``). Keys and values go through
``JsonConverter`` with schemas (``{"schema": ..., "payload": ...}``) unless told otherwise.

A standalone worker keeps its sink connectors' offsets in Kafka (the consumer group
``connect-NAME``) and their configs in memory only: after ``restart()`` add them again.
Starting takes 1.5-4 s on a two-core machine (the JVM, the plugin scan, the REST server).
"""

from __future__ import annotations

import json
import os
import re
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, cast

from sluice.errors import SluiceError
from sluice.testing.brokers import BrokerNotAvailable, _PrivateServer
from sluice.testing.kafka import KAFKA_VERSION

JDBC_SINK_PLUGIN = "debezium-connector-jdbc"  # the plugin's folder under plugins/
JDBC_SINK_CLASS = "io.debezium.connector.jdbc.JdbcSinkConnector"
_HEAP = "-Xmx512m"
_REST_TIMEOUT_S = 30.0  # a POST /connectors validates the config, which may connect out
_POLL_S = 0.2

_CONVERTER = "org.apache.kafka.connect.json.JsonConverter"
_LOGGED_LINES = 8  # of a failed connector's WARN/ERROR lines, into ConnectorFailed
# the worker's own line on any task failure: it says nothing about why
_GENERIC = re.compile(r"Task threw an uncaught and unrecoverable exception|Task is being killed")

# The worker's own settings (bootstrap, ports and paths are added at start).
_SETTINGS = {
    "offset.flush.interval.ms": "1000",
    # The plugins here all ship ServiceLoader manifests: no reflective scan of every jar.
    # (The scan logs one ERROR at every start: Debezium's CloudEventsConverter, in the plugin
    # folder but unused here, does not initialize against Kafka 4's JsonConverter.)
    "plugin.discovery": "service_load",
    "rest.advertised.host.name": "127.0.0.1",
}

# As Kafka's own connect-log4j2: each line a connector or task logs is tagged "[NAME|task-0] "
# (its MDC), which is how a failure's reasons are found in the log (Debezium's JDBC sink puts
# them there, its task's trace only says "check the logs for details").
_LOG4J2 = """\
rootLogger.level = INFO
rootLogger.appenderRef.stdout.ref = STDOUT
appender.stdout.type = Console
appender.stdout.name = STDOUT
appender.stdout.layout.type = PatternLayout
appender.stdout.layout.pattern = [%d] %p %X{connector.context}%m (%c)%n
logger.reflections.name = org.reflections
logger.reflections.level = ERROR
logger.hibernate.name = org.hibernate
logger.hibernate.level = WARN
"""


class ConnectJarsMissing(BrokerNotAvailable):
    """``make connect-jars`` has not run here (or was interrupted): the one start failure
    the tests may skip on outside CI."""


class ConnectorFailed(SluiceError):
    """A connector or one of its tasks is FAILED, or was refused, or never got RUNNING;
    ``name``, ``state`` and ``trace`` (the worker's Java trace, when it gave one) say which."""

    def __init__(self, message: str, *, name: str, state: str, trace: str = "") -> None:
        super().__init__(message)
        self.name = name
        self.state = state
        self.trace = trace


def connect_home() -> Path:
    """What ``make connect-jars`` fills: ``$SLUICE_CACHE/connect-VERSION``."""
    cache = os.environ.get("SLUICE_CACHE") or Path.home() / ".cache" / "sluice" / "maven"
    return Path(cache) / f"connect-{KAFKA_VERSION}"


def _check_jars(libs: Path, plugin: Path) -> None:
    # make writes .pom.sha256 after the last jar: without it the copy is missing or partial
    complete = (
        (libs / ".pom.sha256").is_file()
        and any(libs.glob("connect-runtime-*.jar"))
        and (plugin / ".pom.sha256").is_file()
        and any(plugin.glob("debezium-connector-jdbc-*.jar"))
    )
    if not complete:
        raise ConnectJarsMissing(
            f"Kafka Connect {KAFKA_VERSION}'s jars are not in {libs} (or its JDBC sink in "
            f"{plugin}); run `make setup` (or `make connect-jars`; SLUICE_CACHE says where "
            "the cache is)"
        )


class PrivateKafkaConnect(_PrivateServer):
    """A standalone Kafka Connect worker for the broker at ``bootstrap``: REST on
    ``127.0.0.1:port``, offsets in the temp dir, ``JsonConverter`` keys and values with
    ``schemas.enable=schemas`` (a connector's config may override its converters)."""

    kind = "kafka-connect"
    binary = "java"
    package = "default-jre-headless"
    start_timeout = 120.0

    def __init__(
        self,
        bootstrap: str,
        base_dir: Path | None = None,
        *,
        home: Path | None = None,
        schemas: bool = True,
    ) -> None:
        super().__init__(base_dir)
        self.bootstrap = bootstrap
        self.home = home or connect_home()
        self.schemas = schemas

    @property
    def libs(self) -> Path:
        return self.home / "libs"

    @property
    def plugin_path(self) -> Path:
        return self.home / "plugins"

    @property
    def url(self) -> str:
        """The REST API's root."""
        return f"http://127.0.0.1:{self.port}"

    @property
    def properties_path(self) -> Path:
        return self.base_dir / "worker.properties"

    # -- connectors --------------------------------------------------------------------------

    def add_connector(self, name: str, config: Mapping[str, str]) -> None:
        """Create connector ``name``; the worker validates ``config`` first and a refusal
        raises ``ConnectorFailed`` with its reasons (state ``REJECTED``)."""
        body = {"name": name, "config": {**config, "name": name}}
        status, answer = self._request("POST", "/connectors", body)
        if status != 201:
            raise ConnectorFailed(
                f"Kafka Connect refused connector {name!r} (HTTP {status}): {_message(answer)}",
                name=name,
                state="REJECTED",
            )

    def delete_connector(self, name: str) -> None:
        """Stop and remove connector ``name`` (its consumer group's offsets stay in Kafka)."""
        status, answer = self._request("DELETE", f"/connectors/{name}")
        if status not in (204, 404):
            raise ConnectorFailed(
                f"could not delete connector {name!r} (HTTP {status}): {_message(answer)}",
                name=name,
                state="UNKNOWN",
            )

    def connectors(self) -> list[str]:
        status, answer = self._request("GET", "/connectors")
        if status != 200:
            raise BrokerNotAvailable(f"GET /connectors answered {status}: {_message(answer)}")
        return sorted(cast("list[str]", answer))

    def status(self, name: str) -> dict[str, Any]:
        """``GET /connectors/NAME/status``: ``{"connector": {"state": ...}, "tasks": [...]}``,
        a FAILED one with its ``trace``."""
        code, answer = self._request("GET", f"/connectors/{name}/status")
        if code != 200:
            raise ConnectorFailed(
                f"no status for connector {name!r} (HTTP {code}): {_message(answer)}",
                name=name,
                state="UNKNOWN",
            )
        return cast("dict[str, Any]", answer)

    def wait_running(self, name: str, timeout: float = 60.0) -> dict[str, Any]:
        """Wait until the connector and all its tasks (at least one) are RUNNING; its status.
        A FAILED connector or task raises ``ConnectorFailed`` with the worker's trace."""
        deadline = time.monotonic() + timeout
        while True:
            current = self.status(name)
            failure = _failure(name, current, self._logged(name))
            if failure is not None:
                raise failure
            if _running(current):
                return current
            if time.monotonic() > deadline:
                raise ConnectorFailed(
                    f"connector {name!r} not RUNNING after {timeout:.0f} s: {current}",
                    name=name,
                    state=str(current.get("connector", {}).get("state", "UNKNOWN")),
                )
            time.sleep(_POLL_S)

    def _logged(self, name: str) -> Callable[[], list[str]]:
        """What the worker logged as WARN or ERROR for connector ``name`` and its tasks."""

        def read() -> list[str]:
            try:
                text = self.log_path.read_text(errors="replace")
            except OSError:
                return []
            tag = re.compile(rf"^\[[^]]+\] (?:WARN|ERROR) \[{re.escape(name)}\|[^]]+\] (.*)$")
            found = (tag.match(line) for line in text.splitlines())
            return [m[1] for m in found if m is not None and not _GENERIC.search(m[1])]

        return read

    # -- the worker process ------------------------------------------------------------------

    def _prepare(self) -> None:
        _check_jars(self.libs, self.plugin_path / JDBC_SINK_PLUGIN)
        schemas = "true" if self.schemas else "false"
        settings = {
            **_SETTINGS,
            "bootstrap.servers": self.bootstrap,
            "listeners": f"http://127.0.0.1:{self.port}",
            "plugin.path": str(self.plugin_path),
            "offset.storage.file.filename": str(self.data_dir / "connect.offsets"),
            "key.converter": _CONVERTER,
            "value.converter": _CONVERTER,
            "key.converter.schemas.enable": schemas,
            "value.converter.schemas.enable": schemas,
        }
        self.properties_path.write_text("".join(f"{k}={v}\n" for k, v in settings.items()))
        (self.base_dir / "log4j2.properties").write_text(_LOG4J2)

    def _command(self, binary: str) -> Sequence[str]:
        log4j = self.base_dir / "log4j2.properties"
        return [
            binary,
            _HEAP,
            "-Djava.awt.headless=true",
            f"-Dlog4j2.configurationFile={log4j}",
            "-cp",
            str(self.libs / "*"),  # the JVM expands it: every jar in the folder
            "org.apache.kafka.connect.cli.ConnectStandalone",
            str(self.properties_path),
        ]

    def _ready(self) -> bool:
        # The REST server answers GET / early; /connectors only once the herder has started
        # (before that it answers 503 or not at all).
        if not self._accepts():
            return False
        try:
            status, _ = self._request("GET", "/connectors", timeout=2.0)
        except OSError:
            return False
        return status == 200

    def _request(
        self, method: str, path: str, body: object = None, timeout: float = _REST_TIMEOUT_S
    ) -> tuple[int, Any]:
        """One REST call: (HTTP status, the decoded JSON answer or None)."""
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(
            self.url + path,
            data=data,
            method=method,
            headers={"Content-Type": "application/json", "Accept": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:
                return response.status, _decode(response.read())
        except urllib.error.HTTPError as error:
            return error.code, _decode(error.read())


def _decode(raw: bytes) -> Any:
    if not raw:
        return None
    try:
        return json.loads(raw)
    except ValueError:
        return raw.decode(errors="replace")


def _message(answer: Any) -> str:
    """The readable part of a Connect REST error (``{"error_code": .., "message": ..}``)."""
    if isinstance(answer, dict) and "message" in answer:
        return str(answer["message"])
    return str(answer)


def _running(status: Mapping[str, Any]) -> bool:
    tasks = status.get("tasks") or []
    return (
        status.get("connector", {}).get("state") == "RUNNING"
        and bool(tasks)
        and all(task.get("state") == "RUNNING" for task in tasks)
    )


def _failure(
    name: str, status: Mapping[str, Any], logged: Callable[[], list[str]]
) -> ConnectorFailed | None:
    parts = [("connector", status.get("connector", {}))]
    parts += [(f"task {task.get('id')}", task) for task in status.get("tasks") or []]
    for what, part in parts:
        if part.get("state") == "FAILED":
            trace = str(part.get("trace", ""))
            lines = logged()[-_LOGGED_LINES:]
            told = "".join(f"\n  {line}" for line in lines)
            return ConnectorFailed(
                f"connector {name!r}: {what} FAILED: {_first_line(trace)}"
                + (f"\nthe worker logged:{told}" if told else ""),
                name=name,
                state="FAILED",
                trace=trace,
            )
    return None


def _first_line(trace: str) -> str:
    """The reason in a Java trace: its first line, and its deepest ``Caused by:`` line."""
    lines = trace.strip().splitlines()
    if not lines:
        return "(no trace)"
    causes = [line.strip() for line in lines if line.startswith("Caused by:")]
    return lines[0] + (f" ({causes[-1]})" if causes else "")


__all__ = [
    "JDBC_SINK_CLASS",
    "ConnectJarsMissing",
    "ConnectorFailed",
    "PrivateKafkaConnect",
    "connect_home",
]
