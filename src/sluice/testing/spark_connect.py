"""A private Spark Connect server for tests and demos::

    with PrivateConnectServer(jars=seed_jars("mysql://x")) as server:
        spark = SparkSession.builder.remote(server.url).getOrCreate()   # sc://127.0.0.1:PORT

It runs the installed pyspark distribution's ``sbin/start-connect-server.sh --wait`` (or, as
pyspark 4.2.0 has no such script, ``bin/spark-submit --class`` its server: in the foreground,
``local[2]``) on a free port of 127.0.0.1, with its output in a log
file of a temp dir. Its Python workers run this interpreter, so they import ``sluice``.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from sluice.core.component import Component
from sluice.errors import SluiceError
from sluice.testing.brokers import _alive, _process_tree, _signal_all
from sluice.testing.mariadb import free_port

START_TIMEOUT_S = 240.0  # a cold JVM on a busy 2-core machine took 52 s
_POLL_S = 0.2


class SparkConnectNotAvailable(SluiceError):
    """pyspark's Connect server is missing here, or it would not start."""


_SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"


def _start_command() -> list[str]:
    """The server in the foreground: ``sbin/start-connect-server.sh --wait`` where pyspark
    ships it (4.3), else what that script runs, ``bin/spark-submit --class`` the server's
    class (pyspark 4.2.0's package has no such script; spark-submit needs no application jar
    for that class)."""
    spec = importlib.util.find_spec("pyspark")
    if spec is None or spec.origin is None:
        raise SparkConnectNotAvailable("pyspark is not installed: pip install 'sluice[spark]'")
    if shutil.which("java") is None and "JAVA_HOME" not in os.environ:
        raise SparkConnectNotAvailable("no Java: install a JRE 17 (apt-get install -y default-jre)")
    home = Path(spec.origin).parent
    script = home / "sbin" / "start-connect-server.sh"
    if script.is_file():
        return [str(script), "--wait"]
    submit = home / "bin" / "spark-submit"
    if not submit.is_file() or not any((home / "jars").glob("spark-connect_*.jar")):
        raise SparkConnectNotAvailable(
            f"{home} has neither sbin/start-connect-server.sh nor bin/spark-submit with the "
            "spark-connect jar: the pyspark install is incomplete"
        )
    return [str(submit), "--class", _SERVER_CLASS, "--name", "Spark Connect server"]


class PrivateConnectServer(Component):
    def __init__(self, jars: tuple[str, ...] = (), master: str = "local[2]") -> None:
        self.jars = jars
        self.master = master
        self.port = 0
        self._dir: Path | None = None
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"sc://127.0.0.1:{self.port}"

    @property
    def log_path(self) -> Path:
        assert self._dir is not None
        return self._dir / "connect.log"

    def start(self) -> None:
        command = _start_command()
        self._dir = Path(tempfile.mkdtemp(prefix="sluice-connect-"))
        self.port = free_port()
        args = [
            *command,
            "--master",
            self.master,
            "--conf",
            f"spark.connect.grpc.binding.port={self.port}",
            "--conf",
            "spark.connect.grpc.binding.address=127.0.0.1",
            "--conf",
            "spark.ui.enabled=false",
            "--conf",
            "spark.driver.host=127.0.0.1",
            "--conf",
            "spark.sql.shuffle.partitions=4",
        ]
        if self.jars:
            args += ["--jars", ",".join(self.jars)]
        env = {
            **os.environ,
            "PYSPARK_PYTHON": sys.executable,
            "SPARK_LOCAL_IP": "127.0.0.1",
            "SPARK_LOG_DIR": str(self._dir),
            "SPARK_PID_DIR": str(self._dir),
        }
        with self.log_path.open("wb") as log:
            self._process = subprocess.Popen(
                args, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True
            )
        try:
            self._wait_ready()
        except BaseException:
            self.stop()
            raise

    def _wait_ready(self) -> None:
        assert self._process is not None
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise SparkConnectNotAvailable(
                    f"the Spark Connect server exited ({self._process.returncode}): {self._tail()}"
                )
            with (
                contextlib.suppress(OSError),
                socket.create_connection(("127.0.0.1", self.port), timeout=1),
            ):
                return
            time.sleep(_POLL_S)  # a bounded wait for the port to open
        raise SparkConnectNotAvailable(
            f"the Spark Connect server did not listen within {START_TIMEOUT_S:.0f} s: "
            + self._tail()
        )

    def _tail(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-2000:]
        except OSError:
            return "(no log)"

    def stop(self) -> None:
        process, self._process = self._process, None
        if process is not None and process.poll() is None:
            tree = _process_tree(process.pid)
            _signal_all(tree, signal.SIGTERM)
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                _signal_all(_alive(tree), signal.SIGKILL)
                process.wait(timeout=10)
            _signal_all(_alive(tree), signal.SIGKILL)  # executors' Python workers
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None
