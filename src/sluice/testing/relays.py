"""Running a relay for tests: in a thread of this process, or as a ``sluice relay`` process."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import sys
import threading
from concurrent.futures import Future
from pathlib import Path
from typing import Any, Protocol

from sluice.relay import Relay, RelayConfig


class Service(Protocol):
    port: int

    async def start(self) -> Any: ...
    async def stop(self) -> None: ...


class ServiceThread:
    """An asyncio component (relay, bootstrap server) on its own loop in a daemon thread."""

    def __init__(self, service: Service) -> None:
        self.service = service
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._running = False

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.service.port}"

    def start(self) -> ServiceThread:
        self._thread.start()
        future: Future[Any] = asyncio.run_coroutine_threadsafe(self.service.start(), self._loop)
        try:
            future.result(timeout=60)
        except BaseException:
            self._shutdown_loop()
            raise
        self._running = True
        return self

    def stop(self) -> None:
        if self._running:
            asyncio.run_coroutine_threadsafe(self.service.stop(), self._loop).result(timeout=60)
            self._running = False
        self._shutdown_loop()

    def _shutdown_loop(self) -> None:
        if self._loop.is_running():
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=10)
        if not self._loop.is_running():
            self._loop.close()

    def __enter__(self) -> ServiceThread:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class RelayThread(ServiceThread):
    """A relay in a thread of this process; ``relay`` is the component."""

    def __init__(self, config: RelayConfig) -> None:
        self.relay = Relay(config)
        super().__init__(self.relay)

    def __enter__(self) -> RelayThread:
        self.start()
        return self


class RelayProcess:
    """``sluice relay`` as a child process (for SIGKILL tests); reads its port from stdout."""

    def __init__(self, args: list[str], log_path: Path) -> None:
        self.args = args
        self.log_path = log_path
        self.proc: subprocess.Popen[str] | None = None
        self.url = ""

    def start(self, timeout: float = 60) -> RelayProcess:
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        with self.log_path.open("a") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "sluice.cli.main", "-v", "relay", *self.args],
                stdout=subprocess.PIPE,
                stderr=log,
                text=True,
                env=env,
            )
        assert self.proc.stdout is not None
        result: list[str] = []
        reader = threading.Thread(
            target=lambda: result.append(self.proc.stdout.readline()),  # type: ignore[union-attr]
            daemon=True,
        )
        reader.start()
        reader.join(timeout)
        line = result[0] if result else ""
        match = re.search(r"(http://\S+)", line)
        if match is None:
            self.kill()
            raise RuntimeError(f"relay did not start; see {self.log_path}")
        self.url = match.group(1)
        return self

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()
        self._close()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.kill()
        self._close()

    def _close(self) -> None:
        if self.proc is not None and self.proc.stdout is not None:
            self.proc.stdout.close()
