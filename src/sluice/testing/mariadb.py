"""A private MariaDB server in a temp dir, on a free port, with the binlog on."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import pymysql

from sluice.core.component import Component
from sluice.errors import SluiceError

_SEARCH = ("/usr/sbin", "/usr/bin", "/usr/local/sbin", "/usr/local/bin")


class MariaDBNotAvailable(SluiceError):
    """No MariaDB server binary here, or it would not start."""


def _find(name: str) -> str:
    found = shutil.which(name) or next(
        (str(Path(d) / name) for d in _SEARCH if (Path(d) / name).exists()), None
    )
    if found is None:
        raise MariaDBNotAvailable(
            f"{name} not found; install it with `apt-get install -y mariadb-server` "
            "(or run `make setup`)"
        )
    return found


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class PrivateMariaDB(Component):
    """Start with ``start()`` (or ``with``); root has no password; binlog ROW/FULL/FULL."""

    def __init__(self, base_dir: Path | None = None, *, extra_args: tuple[str, ...] = ()) -> None:
        self._own_dir = base_dir is None
        self.base_dir = Path(base_dir or tempfile.mkdtemp(prefix="sluice-mariadb-"))
        self.extra_args = extra_args
        self.port = 0
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"mysql://root@127.0.0.1:{self.port}"

    def connect(self, database: str | None = None, **kwargs: Any) -> pymysql.Connection[Any]:
        # A private server on loopback: no TLS (PyMySQL's preferred mode would build a TLS
        # context, ~35 ms, for every connection).
        kwargs.setdefault("ssl_disabled", True)
        conn: pymysql.Connection[Any] = pymysql.connect(
            host="127.0.0.1",
            port=self.port,
            user="root",
            password="",
            database=database,
            autocommit=True,
            **kwargs,
        )
        return conn

    def start(self, timeout: float = 60.0) -> PrivateMariaDB:
        data = self.base_dir / "data"
        if not (data / "mysql").exists():
            self._install(data)
        self.port = self.port or free_port()
        tmp = self.base_dir / "tmp"  # its own: temp tables never meet another process's files
        tmp.mkdir(parents=True, exist_ok=True)
        args = [
            _find("mariadbd"),
            "--no-defaults",
            "--user=root",
            f"--datadir={data}",
            f"--port={self.port}",
            "--bind-address=127.0.0.1",
            f"--socket={self.base_dir / 'mysqld.sock'}",
            f"--pid-file={self.base_dir / 'mysqld.pid'}",
            f"--tmpdir={tmp}",
            f"--log-error={self.base_dir / 'error.log'}",
            f"--log-bin={data / 'binlog'}",
            "--server-id=1",
            "--binlog-format=ROW",
            "--binlog-row-image=FULL",
            "--binlog-row-metadata=FULL",
            "--innodb-buffer-pool-size=64M",
            "--innodb-log-file-size=32M",
            "--skip-name-resolve",
            "--max-connections=200",
            "--character-set-server=utf8mb4",
            "--collation-server=utf8mb4_general_ci",
            *self.extra_args,
        ]
        self._proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self._wait_ready(timeout)
        return self

    def _install(self, data: Path) -> None:
        data.mkdir(parents=True, exist_ok=True)
        result = subprocess.run(
            [
                _find("mariadb-install-db"),
                "--no-defaults",
                "--user=root",
                f"--datadir={data}",
                "--auth-root-authentication-method=normal",
                "--skip-test-db",
            ],
            capture_output=True,
            check=False,
        )
        if result.returncode != 0:
            raise MariaDBNotAvailable(
                f"mariadb-install-db failed: {result.stderr.decode(errors='replace')[-500:]}"
            )

    def _wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._proc is not None and self._proc.poll() is not None:
                raise MariaDBNotAvailable(
                    f"mariadbd exited early; see {self.base_dir / 'error.log'}"
                )
            try:
                self.connect().close()
                return
            except pymysql.err.OperationalError:
                time.sleep(0.05)
        raise MariaDBNotAvailable(f"mariadbd not ready after {timeout:.0f} s")

    def kill(self) -> None:
        """SIGKILL the server (for crash tests); ``start()`` brings it back on the same port."""
        if self._proc is not None:
            self._proc.send_signal(signal.SIGKILL)
            self._proc.wait()
            self._proc = None

    def stop(self) -> None:
        if self._proc is not None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
            self._proc = None
        if self._own_dir and os.environ.get("SLUICE_KEEP_MARIADB") != "1":
            shutil.rmtree(self.base_dir, ignore_errors=True)
