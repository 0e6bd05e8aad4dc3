"""A private Spark standalone cluster (a master and two workers) for tests that must prove a
job runs on executors of a real cluster, not only in ``local[N]``::

    with PrivateSparkCluster() as cluster:   # start() waits until both workers are ALIVE
        ...                                  # --master cluster.master_url
        cluster.status()                     # the master's /json/ (apps, workers)
    # stop(): every process of the cluster (executors and their Python workers too) is gone

It runs the standalone daemons from the installed pyspark distribution (``bin/spark-class``:
``deploy.master.Master`` and ``deploy.worker.Worker``), each in its own process group, with
output to a log file in a temp dir and a work dir per worker (executors' logs land there:
``work_dirs[i]/app-ID/EXECUTOR/stderr``), on free ports of 127.0.0.1. Executors' Python
workers run this interpreter (``PYSPARK_PYTHON``), so they import the installed ``sluice``.
Set ``SLUICE_KEEP_SPARK_CLUSTER=1`` to keep the temp dir for a post-mortem.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any, Self

from sluice.core.component import Component
from sluice.errors import SluiceError
from sluice.testing.brokers import _alive, _process_tree, _signal_all
from sluice.testing.mariadb import free_port

_POLL_S = 0.1  # between looks at the master's status (the wait itself is bounded)
MASTER = "org.apache.spark.deploy.master.Master"
WORKER = "org.apache.spark.deploy.worker.Worker"
# A test's JVMs live for seconds and handle little data: the JIT's first tier and the serial
# collector start them (and run their first queries) in less than half the time on a small
# busy machine.
JAVA_OPTS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"


class SparkClusterNotAvailable(SluiceError):
    """pyspark or Java is missing here, or the cluster would not start."""


def spark_bin(name: str) -> Path:
    """``bin/NAME`` of the installed pyspark distribution (``spark-class``, ``spark-submit``)."""
    spec = importlib.util.find_spec("pyspark")
    if spec is None or spec.origin is None:
        raise SparkClusterNotAvailable("pyspark is not installed: pip install 'sluice[spark]'")
    found = Path(spec.origin).parent / "bin" / name
    if not found.is_file():
        raise SparkClusterNotAvailable(f"{found} is missing: the pyspark install is incomplete")
    return found


class PrivateSparkCluster(Component):
    """Start with ``start()`` (or ``with``): a master and ``workers`` workers of ``cores``
    cores and ``memory`` each; ``master_url`` is what ``--master`` takes."""

    def __init__(
        self,
        base_dir: Path | None = None,
        *,
        workers: int = 2,
        cores: int = 1,
        memory: str = "1g",
    ) -> None:
        self._own_dir = base_dir is None
        self.base_dir = Path(base_dir or tempfile.mkdtemp(prefix="sluice-spark-cluster-"))
        self.workers, self.cores, self.memory = workers, cores, memory
        self.port = self.web_port = 0
        self._procs: list[tuple[str, subprocess.Popen[bytes], Path]] = []

    @property
    def master_url(self) -> str:
        return f"spark://127.0.0.1:{self.port}"

    def submit(self, *args: str) -> list[str]:
        """A ``spark-submit`` command running ``args`` (a Python file and its arguments) with
        its driver here and its executors on the cluster (run it in ``env()``)."""
        return [str(spark_bin("spark-submit")), "--master", self.master_url, *args]

    @property
    def web_url(self) -> str:
        return f"http://127.0.0.1:{self.web_port}"

    @property
    def work_dirs(self) -> list[Path]:
        return [self.base_dir / f"worker-{i}" / "work" for i in range(self.workers)]

    def env(self) -> dict[str, str]:
        """The environment the daemons run in (executors inherit it from their worker), and
        the one for a driver using the cluster: on 127.0.0.1, Python workers on this
        interpreter, and JVMs tuned for short lives (``JAVA_OPTS`` unless set already)."""
        return {
            "JAVA_TOOL_OPTIONS": JAVA_OPTS,
            **os.environ,
            "SPARK_LOCAL_IP": "127.0.0.1",
            "PYSPARK_PYTHON": sys.executable,
        }

    def start(self, timeout: float = 90.0) -> Self:
        """Launch the master, then the workers, and wait until the master lists every worker
        ALIVE (raises ``SparkClusterNotAvailable`` with the logs' last lines)."""
        if self._procs:
            raise SparkClusterNotAvailable("the private Spark cluster is already running")
        script = str(spark_bin("spark-class"))
        if shutil.which("java") is None and "JAVA_HOME" not in os.environ:
            raise SparkClusterNotAvailable(
                "java not found; install it with `apt-get install -y default-jre-headless` "
                "(or run `make setup`)"
            )
        deadline = time.monotonic() + timeout
        self.port, self.web_port = free_port(), free_port()
        master = ["--host", "127.0.0.1", "--port", str(self.port)]
        # (no REST submission server: it would take the fixed port 6066)
        no_rest = {"SPARK_MASTER_OPTS": "-Dspark.master.rest.enabled=false"}
        command = [script, MASTER, *master, "--webui-port", str(self.web_port)]
        self._launch("master", command, no_rest)
        try:
            # Workers started before the master is ALIVE retry registering only after ~10 s.
            self._wait_for(lambda: self._master_state() == "ALIVE", "master ALIVE", deadline)
            for i, work in enumerate(self.work_dirs):
                work.mkdir(parents=True, exist_ok=True)
                args = [
                    *("--host", "127.0.0.1", "--cores", str(self.cores)),
                    *("--memory", self.memory, "--webui-port", str(free_port())),
                    *("--work-dir", str(work), self.master_url),
                ]
                self._launch(f"worker-{i}", [script, WORKER, *args])
            self._wait_for(
                lambda: self.alive_workers() >= self.workers,
                f"{self.workers} workers ALIVE",
                deadline,
            )
        except BaseException:
            self._kill_all()
            raise
        return self

    def _launch(self, name: str, command: list[str], env: dict[str, str] | None = None) -> None:
        log_path = self.base_dir / f"{name}.log"
        with log_path.open("ab") as log:
            proc = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.base_dir,
                env={**self.env(), **(env or {})},
                start_new_session=True,  # its own process group: stop() reaches executors too
            )
        self._procs.append((name, proc, log_path))

    def status(self) -> dict[str, Any]:
        """The master's ``/json/``: ``workers``, ``activeapps``, ``completedapps``, ..."""
        with urllib.request.urlopen(self.web_url + "/json/", timeout=5) as resp:
            body: dict[str, Any] = json.loads(resp.read())
            return body

    def alive_workers(self) -> int:
        try:
            workers = self.status().get("workers", [])
        except (OSError, ValueError):  # not listening yet, or a half-written answer
            return 0
        return sum(1 for w in workers if w.get("state") == "ALIVE")

    def _master_state(self) -> str | None:
        try:
            state = self.status().get("status")
        except (OSError, ValueError):  # not listening yet, or a half-written answer
            return None
        return str(state)

    def _wait_for(self, condition: Callable[[], bool], what: str, deadline: float) -> None:
        while not condition():
            for name, proc, _log in self._procs:
                if proc.poll() is not None:
                    raise SparkClusterNotAvailable(
                        self._failure(f"the {name} exited with status {proc.returncode}")
                    )
            if time.monotonic() > deadline:
                raise SparkClusterNotAvailable(self._failure(f"no {what} in time"))
            time.sleep(_POLL_S)

    def _failure(self, what: str, lines: int = 20) -> str:
        tails = []
        for name, _proc, log_path in self._procs:
            try:
                tail = log_path.read_text(errors="replace").splitlines()[-lines:]
            except OSError:
                tail = []
            tails.append(f"--- {log_path} ({name}) ends:\n" + "\n".join(tail))
        return f"the private Spark cluster at {self.master_url} did not start: {what}\n" + (
            "\n".join(tails)
        )

    def _kill_all(self) -> None:
        """SIGTERM each daemon's process group (workers first: they stop their executors),
        then SIGKILL whatever of their process trees is left."""
        trees = [_process_tree(proc.pid) for _name, proc, _log in self._procs]
        for _name, proc, _log in reversed(self._procs):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
        for (_name, proc, _log), tree in zip(self._procs, trees, strict=True):
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                _signal_all(tree, signal.SIGKILL)
                proc.wait()
        everything = set().union(*trees) if trees else set()
        # executors started after the trees were listed are in the daemons' process groups
        everything |= _group_members({proc.pid for _name, proc, _log in self._procs})
        deadline = time.monotonic() + 10
        while (left := _alive(everything)) and time.monotonic() < deadline:
            time.sleep(_POLL_S)
        _signal_all(left, signal.SIGKILL)
        self._procs = []

    def stop(self) -> None:
        """Stop every process of the cluster and remove the temp dir made here. Safe twice."""
        self._kill_all()
        if self._own_dir and os.environ.get("SLUICE_KEEP_SPARK_CLUSTER") != "1":
            shutil.rmtree(self.base_dir, ignore_errors=True)


def _group_members(groups: set[int]) -> set[int]:
    """Live processes whose process group is one of ``groups``."""
    found = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat.rpartition(")")[2].split()  # state, ppid, pgrp, ...
        if int(fields[2]) in groups:
            found.add(int(entry.name))
    return found
