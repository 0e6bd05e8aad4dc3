"""A private PostgreSQL server in a temp dir, on a free port, with ``wal_level=logical``.

``initdb`` and ``postgres`` refuse to run as root: as root they run as the ``postgres`` user,
which then owns the data dir (and every parent is made traversable).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from sluice.core.component import Component
from sluice.errors import SluiceError
from sluice.testing.mariadb import free_port

_BIN_DIRS = tuple(f"/usr/lib/postgresql/{v}/bin" for v in (17, 16, 15))


class PostgresNotAvailable(SluiceError):
    """No PostgreSQL server binaries here, or the server would not start."""


def _find(name: str) -> str:
    for folder in _BIN_DIRS:
        if (Path(folder) / name).exists():
            return str(Path(folder) / name)
    found = shutil.which(name)
    if found is None:
        raise PostgresNotAvailable(
            f"{name} not found; install it with `apt-get install -y postgresql` "
            "(or run `make setup`)"
        )
    return found


def _as_postgres(args: list[str]) -> list[str]:
    if os.geteuid() != 0:
        return args
    runuser = shutil.which("runuser")
    if runuser is None:
        raise PostgresNotAvailable("running as root needs `runuser` to start PostgreSQL")
    return [runuser, "-u", "postgres", "--", *args]


class PrivatePostgres(Component):
    """Start with ``start()`` (or ``with``): superuser ``postgres``, no password (trust)."""

    def __init__(self, base_dir: Path | None = None, *, settings: tuple[str, ...] = ()) -> None:
        self._own_dir = base_dir is None
        self.settings = settings  # extra "name=value" server settings
        self.base_dir = Path(base_dir or tempfile.mkdtemp(prefix="sluice-postgres-"))
        self.port = 0
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def data(self) -> Path:
        return self.base_dir / "data"

    @property
    def url(self) -> str:
        return self.source_url()

    def source_url(self, database: str = "postgres", **query: str) -> str:
        """A source URL for ``database`` (``slot=``, ``publication=`` as query parameters)."""
        tail = "&".join(f"{k}={v}" for k, v in query.items())
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}" + (
            f"?{tail}" if tail else ""
        )

    def dsn(self, database: str = "postgres") -> str:
        return f"host=127.0.0.1 port={self.port} user=postgres dbname={database}"

    def connect(self, database: str = "postgres", **kwargs: Any) -> Any:
        import psycopg2  # noqa: PLC0415 - an optional dependency (sluice[postgres])

        conn = psycopg2.connect(self.dsn(database), **kwargs)
        conn.autocommit = True
        return conn

    def start(self, timeout: float = 60.0) -> PrivatePostgres:
        if not (self.data / "PG_VERSION").exists():
            self._install()
        self.port = self.port or free_port()
        args = [
            _find("postgres"),
            "-D",
            str(self.data),
            "-p",
            str(self.port),
            "-c",
            "listen_addresses=127.0.0.1",
            "-c",
            f"unix_socket_directories={self.base_dir}",
            "-c",
            "wal_level=logical",
            "-c",
            "max_replication_slots=20",
            "-c",
            "max_wal_senders=20",
            "-c",
            "fsync=off",
            "-c",
            "synchronous_commit=off",
            "-c",
            "full_page_writes=off",
            "-c",
            "TimeZone=UTC",
            *(arg for setting in self.settings for arg in ("-c", setting)),
        ]
        log = (self.base_dir / "server.log").open("ab")
        self._proc = subprocess.Popen(
            _as_postgres(args), stdout=log, stderr=log, start_new_session=True
        )
        log.close()
        self._wait_ready(timeout)
        return self

    def _install(self) -> None:
        self.data.mkdir(parents=True, exist_ok=True)
        if os.geteuid() == 0:
            for folder in [self.base_dir, *self.base_dir.parents]:
                if folder != Path("/"):
                    folder.chmod(folder.stat().st_mode | 0o755)
            shutil.chown(self.base_dir, "postgres", "postgres")
            shutil.chown(self.data, "postgres", "postgres")
        result = subprocess.run(
            _as_postgres(
                [
                    _find("initdb"),
                    "-D",
                    str(self.data),
                    "-U",
                    "postgres",
                    "--auth=trust",
                    "-E",
                    "UTF8",
                    "--locale=C.UTF-8",
                ]
            ),
            capture_output=True,
            check=False,
        )
        if result.returncode != 0:
            raise PostgresNotAvailable(
                f"initdb failed: {result.stderr.decode(errors='replace')[-500:]}"
            )
        with (self.data / "pg_hba.conf").open("a") as hba:
            hba.write("host replication all 127.0.0.1/32 trust\n")

    def _wait_ready(self, timeout: float) -> None:
        import psycopg2  # noqa: PLC0415

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._proc is not None and self._proc.poll() is not None:
                raise PostgresNotAvailable(
                    f"postgres exited early; see {self.base_dir / 'server.log'}"
                )
            try:
                psycopg2.connect(self.dsn(), connect_timeout=2).close()
                return
            except psycopg2.OperationalError:
                time.sleep(0.05)
        raise PostgresNotAvailable(f"postgres not ready after {timeout:.0f} s")

    def kill(self) -> None:
        if self._proc is not None:
            os.killpg(self._proc.pid, signal.SIGKILL)
            self._proc.wait()
            self._proc = None

    def stop_server(self) -> None:
        """Shut the server down (fast), keeping its data: ``start()`` brings it back."""
        if self._proc is not None:
            try:
                os.killpg(self._proc.pid, signal.SIGINT)  # fast shutdown
                self._proc.wait(timeout=30)
            except (subprocess.TimeoutExpired, ProcessLookupError):
                self.kill()
            self._proc = None

    def stop(self) -> None:
        self.stop_server()
        if self._own_dir and os.environ.get("SLUICE_KEEP_POSTGRES") != "1":
            shutil.rmtree(self.base_dir, ignore_errors=True)
