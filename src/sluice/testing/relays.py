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

from sluice.relay import Relay, RelayConfig


class RelayThread:
    """A relay on its own event loop in a daemon thread; ``url`` once started."""

    def __init__(self, config: RelayConfig) -> None:
        self.config = config
        self.relay: Relay | None = None
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)

    @property
    def url(self) -> str:
        assert self.relay is not None
        return f"http://127.0.0.1:{self.relay.port}"

    def start(self) -> RelayThread:
        self._thread.start()
        self.relay = Relay(self.config)
        future: Future[Relay] = asyncio.run_coroutine_threadsafe(self.relay.start(), self._loop)
        try:
            future.result(timeout=60)
        except BaseException:
            self._shutdown_loop()
            raise
        return self

    def stop(self) -> None:
        if self.relay is not None:
            asyncio.run_coroutine_threadsafe(self.relay.stop(), self._loop).result(timeout=60)
            self.relay = None
        self._shutdown_loop()

    def _shutdown_loop(self) -> None:
        if self._loop.is_running():
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=10)
        if not self._loop.is_running():
            self._loop.close()

    def __enter__(self) -> RelayThread:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


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
