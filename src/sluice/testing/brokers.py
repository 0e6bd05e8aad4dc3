"""Private message brokers for the sinks' integration tests: NATS (JetStream), Redis, RabbitMQ.

Each one runs as a child process in a temp dir on free ports, as ``PrivateMariaDB`` does, and
never touches the machine's own broker services::

    with PrivateRedis() as redis:     # start() waits until the server answers
        ...                           # redis.url == "redis://127.0.0.1:PORT/0"
        redis.kill()                  # SIGKILL: the target is down, its data stays
        redis.restart()               # same port, same data
    # stop(): graceful, then the temp dir is gone

Lifecycle (every class):

- ``start()`` launches the server (its own process group, output to ``server.log`` in the
  temp dir) and waits until it answers; a server that exits or does not answer in time raises
  ``BrokerNotAvailable`` with the last lines of that log.
- ``kill()`` SIGKILLs the whole process tree and keeps the data.
- ``stop()`` stops it gracefully (SIGKILL after a grace period) and removes the temp dir it
  made; ``stop(keep_data=True)`` keeps it. Safe to call twice.
- ``restart()`` starts it again on the same port with the same data, after ``kill()`` or
  ``stop(keep_data=True)`` (a running server is stopped gracefully first).

Set ``SLUICE_KEEP_BROKERS=1`` to keep the temp dirs for a post-mortem.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import ClassVar, Self

from sluice.core.component import Component
from sluice.errors import SluiceError
from sluice.testing.mariadb import free_port

_SEARCH = ("/usr/sbin", "/usr/bin", "/usr/local/sbin", "/usr/local/bin")
_POLL_S = 0.05  # between readiness probes (the wait itself is bounded by a timeout)
_EPMD_PORT = 4369


class BrokerNotAvailable(SluiceError):
    """A broker's server binary is missing here, or the server would not start."""


def _find(name: str, package: str) -> str:
    found = shutil.which(name) or next(
        (str(Path(d) / name) for d in _SEARCH if (Path(d) / name).exists()), None
    )
    if found is None:
        raise BrokerNotAvailable(
            f"{name} not found; install it with `apt-get install -y {package}` "
            "(or run `make setup`)"
        )
    return found


def _proc_stat(pid: int) -> tuple[str, int] | None:
    """(state, parent pid) of a live process, or None when it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rpartition(")")[2].split()  # the command name may hold spaces
    return fields[0], int(fields[1])


def _process_tree(root: int) -> set[int]:
    """``root`` and its descendants (some, like Erlang's port programs, in other sessions)."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and (stat := _proc_stat(int(entry.name))) is not None:
            parents[int(entry.name)] = stat[1]
    tree, grew = {root}, True
    while grew:
        children = {pid for pid, parent in parents.items() if parent in tree} - tree
        tree |= children
        grew = bool(children)
    return tree


def _alive(pids: set[int]) -> set[int]:
    return {pid for pid in pids if (stat := _proc_stat(pid)) is not None and stat[0] != "Z"}


def _signal_all(pids: set[int], sig: signal.Signals) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)


class _PrivateServer(Component):
    """One broker process: launch, readiness, kill, stop; subclasses say what to run."""

    kind: ClassVar[str]  # for temp dir names and messages
    binary: ClassVar[str]
    package: ClassVar[str]  # the Debian package that installs ``binary``
    start_timeout: ClassVar[float] = 30.0

    def __init__(self, base_dir: Path | None = None) -> None:
        self._own_dir = base_dir is None
        self.base_dir = Path(base_dir or tempfile.mkdtemp(prefix=f"sluice-{self.kind}-"))
        self.port = 0
        self._proc: subprocess.Popen[bytes] | None = None
        self._removed = False

    @property
    def data_dir(self) -> Path:
        return self.base_dir / "data"

    @property
    def log_path(self) -> Path:
        return self.base_dir / "server.log"

    @property
    def running(self) -> bool:
        return self._proc is not None

    def start(self, timeout: float | None = None) -> Self:
        """Launch the server and wait until it answers (raises ``BrokerNotAvailable``)."""
        if self._proc is not None:
            raise BrokerNotAvailable(f"the private {self.kind} server is already running")
        if self._removed:
            raise BrokerNotAvailable(f"the private {self.kind} server was stopped for good")
        binary = _find(self.binary, self.package)
        self.port = self.port or free_port()
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self._prepare()
        with self.log_path.open("ab") as log:
            self._proc = subprocess.Popen(
                self._command(binary),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.base_dir,
                env=self._env(),
                start_new_session=True,  # its own process group: kill() reaches all of it
            )
        self._wait_ready(self.start_timeout if timeout is None else timeout)
        return self

    def restart(self, timeout: float | None = None) -> Self:
        """Start again on the same port with the same data (stopping it first if running)."""
        if self.port == 0:
            raise BrokerNotAvailable(f"the private {self.kind} server never started")
        if self._proc is not None:
            self.stop(keep_data=True)
        return self.start(timeout)

    def kill(self) -> None:
        """SIGKILL the server and everything it started; the data stays for ``restart()``."""
        if self._proc is None:
            return
        tree = _process_tree(self._proc.pid)
        _signal_all(tree, signal.SIGKILL)
        self._reap(tree)

    def pause(self) -> None:
        """SIGSTOP the server: it keeps its connections open and answers nothing (a hung
        target, as a long GC or a frozen VM leaves one)."""
        if self._proc is not None:
            _signal_all(_process_tree(self._proc.pid), signal.SIGSTOP)

    def resume(self) -> None:
        """SIGCONT after ``pause()``."""
        if self._proc is not None:
            _signal_all(_process_tree(self._proc.pid), signal.SIGCONT)

    def stop(self, *, keep_data: bool = False) -> None:
        """Stop gracefully (SIGKILL after 30 s); remove the temp dir made here unless
        ``keep_data``. Safe to call twice."""
        if self._proc is not None:
            tree = _process_tree(self._proc.pid)
            with contextlib.suppress(ProcessLookupError):  # it may have exited on its own
                os.killpg(self._proc.pid, signal.SIGTERM)
            try:
                self._proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                _signal_all(tree, signal.SIGKILL)
            self._reap(tree)
        if keep_data or not self._own_dir or self._removed:
            return
        if os.environ.get("SLUICE_KEEP_BROKERS") != "1":
            shutil.rmtree(self.base_dir, ignore_errors=True)
        self._removed = True

    def _reap(self, tree: set[int]) -> None:
        # The group leader first, then what it left (Erlang's port programs exit once the VM
        # has): the port must be free and no process left when this returns.
        assert self._proc is not None
        try:
            self._proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            _signal_all(tree, signal.SIGKILL)
            self._proc.wait()
        self._proc = None
        deadline = time.monotonic() + 10
        while (left := _alive(tree)) and time.monotonic() < deadline:
            time.sleep(_POLL_S)
        _signal_all(left, signal.SIGKILL)

    def _wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while True:
            assert self._proc is not None
            code = self._proc.poll()
            if code is not None:
                self._proc = None
                raise BrokerNotAvailable(self._failure(f"exited with status {code}"))
            if self._ready():
                return
            if time.monotonic() > deadline:
                self.kill()
                raise BrokerNotAvailable(self._failure(f"did not answer in {timeout:.0f} s"))
            time.sleep(_POLL_S)

    def _failure(self, what: str, lines: int = 30) -> str:
        try:
            tail = self.log_path.read_text(errors="replace").splitlines()[-lines:]
        except OSError:
            tail = []
        return f"{self.binary} on port {self.port} {what}; {self.log_path} ends:\n" + "\n".join(
            tail
        )

    def _accepts(self) -> bool:
        return _port_open(self.port)

    def _prepare(self) -> None:
        """Write what the server reads at start (after ``port`` is chosen)."""

    def _command(self, binary: str) -> Sequence[str]:
        raise NotImplementedError

    def _env(self) -> dict[str, str]:
        return dict(os.environ)

    def _ready(self) -> bool:
        raise NotImplementedError


def _first_line(port: int, send: bytes = b"") -> bytes:
    """The first line a local server sends (after ``send``), or b"" when it does not."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1) as sock:
            sock.sendall(send)
            received = b""
            while b"\r\n" not in received:
                chunk = sock.recv(4096)
                if not chunk:
                    break
                received += chunk
    except OSError:
        return b""
    return received.partition(b"\r\n")[0]


class PrivateNats(_PrivateServer):
    """``nats-server`` with JetStream, its store in the temp dir; no auth."""

    kind = "nats"
    binary = "nats-server"
    package = "nats-server"

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    def _command(self, binary: str) -> Sequence[str]:
        return [binary, "-a", "127.0.0.1", "-p", str(self.port), "-js", "-sd", str(self.data_dir)]

    def _ready(self) -> bool:
        # The INFO line comes once the client listener is up, JetStream (recovered) before it.
        line = _first_line(self.port)
        if not line.startswith(b"INFO "):
            return False
        return bool(json.loads(line[5:]).get("jetstream"))


class PrivateRedis(_PrivateServer):
    """``redis-server`` with an fsync-always append-only file, so ``kill()`` loses nothing."""

    kind = "redis"
    binary = "redis-server"
    package = "redis-server"

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def _command(self, binary: str) -> Sequence[str]:
        return [
            binary,
            "--port", str(self.port),
            "--bind", "127.0.0.1",
            "--save", "",
            "--appendonly", "yes",
            "--appendfsync", "always",
            "--dir", str(self.data_dir),
            "--daemonize", "no",
        ]  # fmt: skip

    def _ready(self) -> bool:
        return _first_line(self.port, b"PING\r\n") == b"+PONG"  # -LOADING while it replays


class PrivateRabbitMQ(_PrivateServer):
    """A private RabbitMQ node (no plugins), user ``guest``/``guest`` from localhost.

    How it runs: the node is ``sluice-test-PORT@localhost``, with its distribution port, mnesia,
    logs, config, enabled-plugins list, env file and ``HOME`` (so the Erlang cookie) all in the
    temp dir; it shares the machine's ``epmd``, started here when none runs (from ``/`` with a bare
    environment: it outlives every node, and must not look like a process of this one). Debian's
    ``/usr/sbin/rabbitmq-server`` is a wrapper that, run as root, switches to the ``rabbitmq``
    user (who cannot enter a root temp dir); the script it wraps runs the node as the calling
    user, root included, so that is what runs. ``RABBITMQ_CONF_ENV_FILE`` points at an empty
    file in the temp dir: the machine's ``/etc/rabbitmq/rabbitmq-env.conf`` would rename the
    node. Starting takes about 5 s (an Erlang VM and the broker's boot steps). The machine's own
    RabbitMQ service, if any, is never used: no fallback to it was needed (tried as root).
    """

    kind = "rabbitmq"
    binary = "rabbitmq-server"
    package = "rabbitmq-server"
    start_timeout = 90.0

    def __init__(self, base_dir: Path | None = None) -> None:
        super().__init__(base_dir)
        self.dist_port = 0

    @property
    def url(self) -> str:
        return f"amqp://guest:guest@127.0.0.1:{self.port}/"

    @property
    def node(self) -> str:
        return f"sluice-test-{self.port}@localhost"

    def rabbitmqctl(self, *args: str, timeout: float = 60.0) -> str:
        """Run ``rabbitmqctl`` against this node (e.g. ``list_queues``); its output."""
        ctl = _unwrapped(_find("rabbitmqctl", self.package))
        result = subprocess.run(
            [ctl, "-n", self.node, *args],
            capture_output=True,
            env=self._env(),
            timeout=timeout,
            check=False,
        )
        if result.returncode != 0:
            raise BrokerNotAvailable(
                f"rabbitmqctl {' '.join(args)} failed: {result.stderr.decode(errors='replace')}"
            )
        return result.stdout.decode()

    def _prepare(self) -> None:
        # a fresh distribution port at every start: another connection may hold the old one
        self.dist_port = free_port()
        (self.base_dir / "rabbitmq.conf").write_text(
            f"listeners.tcp.1 = 127.0.0.1:{self.port}\n"
            "log.console = true\n"  # into server.log, with the VM's own output
            "log.console.level = info\n"
            "log.file = false\n"
        )
        (self.base_dir / "enabled_plugins").write_text("[].\n")
        (self.base_dir / "rabbitmq-env.conf").write_text("")
        _ensure_epmd()

    def _command(self, binary: str) -> Sequence[str]:
        return [_unwrapped(binary)]

    def _env(self) -> dict[str, str]:
        here = self.base_dir
        return {
            **os.environ,
            "HOME": str(here),  # the Erlang cookie, for the node and rabbitmqctl alike
            "RABBITMQ_CONF_ENV_FILE": str(here / "rabbitmq-env.conf"),
            "RABBITMQ_NODENAME": self.node,
            "RABBITMQ_NODE_IP_ADDRESS": "127.0.0.1",
            "RABBITMQ_NODE_PORT": str(self.port),
            "RABBITMQ_DIST_PORT": str(self.dist_port),
            "RABBITMQ_MNESIA_BASE": str(self.data_dir / "mnesia"),
            "RABBITMQ_LOG_BASE": str(self.data_dir / "log"),
            "RABBITMQ_CONFIG_FILE": str(here / "rabbitmq.conf"),
            "RABBITMQ_ADVANCED_CONFIG_FILE": str(here / "advanced.config"),  # none
            "RABBITMQ_ENABLED_PLUGINS_FILE": str(here / "enabled_plugins"),
            "RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS": "-kernel inet_dist_use_interface {127,0,0,1}",
            "ERL_EPMD_ADDRESS": "127.0.0.1",  # only if this node has to start epmd
        }

    def _ready(self) -> bool:
        # The listener opens late in the boot; a real AMQP login proves the broker is up.
        return self._accepts() and _amqp_answers(self.url)


def _ensure_epmd(timeout: float = 10.0) -> None:
    """Erlang's port mapper on 127.0.0.1:4369. A node that found none would start it itself, as
    a daemon carrying that node's environment (its temp dir) for the rest of the machine's life."""
    if _port_open(_EPMD_PORT):
        return
    epmd = _find("epmd", "erlang-base")
    subprocess.run(
        [epmd, "-daemon", "-address", "127.0.0.1"],
        cwd="/",
        env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")},
        capture_output=True,
        timeout=timeout,
        check=False,  # another one may have won the race: the wait below decides
    )
    deadline = time.monotonic() + timeout
    while not _port_open(_EPMD_PORT):
        if time.monotonic() > deadline:
            raise BrokerNotAvailable(f"{epmd} -daemon did not listen on port {_EPMD_PORT}")
        time.sleep(_POLL_S)


def _port_open(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    except OSError:
        return False
    return True


def _unwrapped(script: str) -> str:
    """Debian's su-to-rabbitmq wrapper replaced by the script it wraps (same directory)."""
    resolved = Path(script).resolve()
    if resolved.name == "rabbitmq-script-wrapper":
        return str(resolved.parent / Path(script).name)
    return script


def _amqp_answers(url: str) -> bool:
    # Imported here: only RabbitMQ needs a client library (aio-pika, in the dev extra).
    import aio_pika  # noqa: PLC0415
    from aio_pika.exceptions import AMQPError  # noqa: PLC0415

    async def probe() -> None:
        connection = await aio_pika.connect(url, timeout=5)
        await connection.close()

    # A thread of its own, so start() works from inside a running event loop too.
    with ThreadPoolExecutor(max_workers=1) as pool:
        try:
            pool.submit(lambda: asyncio.run(probe())).result()
        except (OSError, TimeoutError, AMQPError):
            return False
    return True
