"""Progress of long commands, from real processes: ``bootstrap seed`` (SQLite query source,
local Spark) and ``tail --until-caught-up`` (a relay over SQLite), each with stderr on a
pseudo-terminal (a live bar) and on a pipe (plain lines).

To see a rate and an ETA mid-way without luck, each run is held mid-way: the seed's JVM is
paused (SIGSTOP) once two chunks are done, while the CLI's own process keeps drawing; the tail
blocks writing to a stdout nobody reads yet. Either is let go once the ETA has been shown.
"""

from __future__ import annotations

import fcntl
import os
import pty
import re
import signal
import sqlite3
import struct
import subprocess
import termios
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from pydantic import SecretStr

from sluice.bootstrap.store import BootstrapStore
from sluice.relay import RelayConfig
from sluice.testing import RelayThread
from tests.integration.support import SLUICE, get_json, wait_for

SEED_ROWS, CHUNK_ROWS = 2_000, 50  # ~40 chunks (the plan's key ranges say how many)
# ~200 bytes of JSON each: windows of ~20 KB, 0.6 MB in all, far over a pipe's 64 KiB
TAIL_ROWS, PAGE_ROWS = 3_000, 100
ANSI = re.compile(r"\x1b\[")
ZERO_RATE = re.compile(r"(?<![\d,.])0(\.0)? (rows|events)/s")


class _Stderr:
    """A child's stderr as it comes (a pseudo-terminal's master side, or a pipe), read by a
    thread until every writer has closed it."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self._data = bytearray()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        while True:
            try:
                chunk = os.read(self.fd, 65536)
            except OSError:  # EIO: the terminal's last writer is gone
                return
            if not chunk:
                return
            with self._lock:
                self._data += chunk

    @property
    def text(self) -> str:
        with self._lock:
            return self._data.decode("utf-8", "replace")

    def wait_for(self, pattern: str, timeout: float) -> re.Match[str]:
        try:
            found = wait_for(lambda: re.search(pattern, self.text, re.M), timeout, repr(pattern))
        except AssertionError as exc:
            raise AssertionError(f"{exc}; stderr so far: {self.text[-2000:]!r}") from None
        assert isinstance(found, re.Match)
        return found

    def close(self, timeout: float = 30) -> str:
        self._thread.join(timeout)
        os.close(self.fd)
        return self.text


def _start(args: list[str], *, terminal: bool) -> tuple[subprocess.Popen[bytes], _Stderr]:
    """``sluice ARGS``, stdout a pipe, stderr a 160-column terminal or a pipe."""
    env = dict(os.environ, TERM="xterm-256color", COLUMNS="160", LINES="40")
    if terminal:
        reader, writer = pty.openpty()
        fcntl.ioctl(writer, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 160, 0, 0))
    else:
        reader, writer = os.pipe()
    proc = subprocess.Popen(
        [*SLUICE, *args], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=writer, env=env
    )
    os.close(writer)
    return proc, _Stderr(reader)


def _finish(proc: subprocess.Popen[bytes], stderr: _Stderr) -> tuple[str, str]:
    """Drain stdout until the process ends: (stdout, stderr)."""
    try:
        out, _ = proc.communicate(timeout=240)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return out.decode(), stderr.close()


# -- bootstrap seed ---------------------------------------------------------------------------
def _seed_args(tmp_path: Path) -> tuple[list[str], Path]:
    """A SQLite table of SEED_ROWS rows, a store, the seed's arguments and its chunk folder."""
    path = tmp_path / "app.db"
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT)")
    db.executemany("INSERT INTO t VALUES (?, ?)", [(i, f"v{i}") for i in range(SEED_ROWS)])
    db.commit()
    db.close()
    store = BootstrapStore(str(tmp_path / "store"))
    store.create(0, ("main.t",))
    args = ["bootstrap", "seed", "--source", f"query+sqlite:///{path}", "--table", "main.t"]
    args += ["--store", store.uri, "--chunk-rows", str(CHUNK_ROWS), "--parallelism", "1"]
    return args, tmp_path / "store" / "seeds" / "main.t" / "gen=1"


def _children(pid: int) -> list[tuple[int, str]]:
    """(pid, command name) of the processes whose parent is ``pid``."""
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            name = (entry / "comm").read_text().strip()
        except OSError:  # gone meanwhile
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
            out.append((int(entry.name), name))
    return out


@contextmanager
def _paused_jvm(proc: subprocess.Popen[bytes]) -> Iterator[None]:
    """The seed's JVM (the CLI's child) stopped: no chunk starts, the CLI still draws."""
    (jvm,) = [pid for pid, name in _children(proc.pid) if name == "java"]
    os.kill(jvm, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(jvm, signal.SIGCONT)


def _run_seed(tmp_path: Path, *, terminal: bool, eta: str) -> tuple[str, str, int]:
    """Run the seed; once two chunks are done, hold its JVM until stderr matches ``eta``:
    (stdout, stderr, the chunks planned)."""
    args, chunks = _seed_args(tmp_path)
    proc, stderr = _start(args, terminal=terminal)
    try:
        wait_for(lambda: len(list(chunks.glob("_done-*.json"))) >= 2, 180, "two chunks done")
        with _paused_jvm(proc):
            stderr.wait_for(eta, 60)
    finally:
        out, err = _finish(proc, stderr)
    assert proc.returncode == 0, err
    seeded = re.search(rf"seeded main.t: {SEED_ROWS} rows in (\d+) chunks", out)
    assert seeded is not None, out
    return out, err, int(seeded[1])


def test_seed_on_a_terminal_draws_a_bar_with_rows_rate_and_eta(tmp_path: Path) -> None:
    _out, err, n = _run_seed(tmp_path, terminal=True, eta=r"[\d,.]+ rows/s · ETA \d")
    assert ANSI.search(err) and "\r" in err  # redrawn in place
    assert "━" in err and re.search(rf"\d+/{n} chunks · [\d,]+ rows · [\d,.]+ rows/s", err)
    assert "starting" in err and not ZERO_RATE.search(err)  # never "0 rows/s"
    assert re.search(rf"{n}/{n} chunks, 2,000 rows, [\d,.]+ rows/s, done in [\d.]+ s", err), err
    assert "WARN" not in err and "[Stage" not in err  # Spark's own bars and logs stay out


def test_seed_piped_prints_plain_lines_and_a_final_line_with_the_totals(tmp_path: Path) -> None:
    middle = r"^seed: \d+/\d+ chunks, [\d,]+ rows, [\d,.]+ rows/s, ETA \d+ (s|min)"
    _out, err, n = _run_seed(tmp_path, terminal=False, eta=middle)
    assert not ANSI.search(err) and "\r" not in err
    lines = err.splitlines()
    assert all(line.startswith("seed: ") for line in lines), err  # nothing but progress
    assert lines[:2] == ["seed: planning", f"seed: 0/{n} chunks, 0 rows, starting"], err
    assert not ZERO_RATE.search(err)
    final = rf"seed: {n}/{n} chunks, 2,000 rows, [\d,.]+ rows/s, done in [\d.]+ s"
    assert re.fullmatch(final, lines[-1]), err


# -- tail --until-caught-up -------------------------------------------------------------------
@pytest.fixture
def relay(tmp_path: Path) -> Iterator[tuple[str, int]]:
    """A relay over a SQLite table of TAIL_ROWS rows, all captured in pages of PAGE_ROWS:
    (its URL, its max SCN)."""
    path = tmp_path / "tail.db"
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT)")
    db.executemany("INSERT INTO t VALUES (?, ?)", [(i, "x" * 50) for i in range(TAIL_ROWS)])
    db.commit()
    db.close()
    options = {"mode": "incrementing", "incrementing_column": "id", "page_rows": PAGE_ROWS}
    config = RelayConfig(
        source=SecretStr(f"query+sqlite:///{path}"),
        tables=["main.t"],
        data_dir=tmp_path / "relay",
        port=0,
        table_options={"main.t": {**options, "poll_interval": 0.1}},
    )
    with RelayThread(config) as thread:
        stats = wait_for(
            lambda: (s := get_json(thread.url + "/stats"))["events"] == TAIL_ROWS and s,
            60,
            "every row captured",
        )
        assert stats["windows"] >= 10  # windows of a page each: progress between them
        yield thread.url, int(stats["max_scn"])


def _run_tail(url: str, *, terminal: bool, eta: str) -> tuple[int, str, str]:
    """Tail until caught up; stdout is read only once stderr matches ``eta`` (until then the
    tail blocks writing, mid-way)."""
    proc, stderr = _start(["tail", "--relay", url, "--until-caught-up"], terminal=terminal)
    try:
        stderr.wait_for(eta, 60)
    finally:
        out, err = _finish(proc, stderr)
    return proc.returncode, out, err


def test_tail_on_a_terminal_draws_a_bar_of_scns_with_events_rate_and_eta(
    relay: tuple[str, int],
) -> None:
    url, max_scn = relay
    code, out, err = _run_tail(url, terminal=True, eta=r"[\d,.]+ events/s · ETA \d")
    assert code == 0, err
    assert len(out.splitlines()) == TAIL_ROWS and not ANSI.search(out)  # data untouched
    assert ANSI.search(err) and "\r" in err and "━" in err
    assert re.search(rf"SCN \d+/{max_scn} · [\d,]+ events · [\d,.]+ events/s · ETA", err)
    assert not ZERO_RATE.search(err)
    final = rf"SCN {max_scn}/{max_scn}, 3,000 events, [\d,.]+ events/s, done in [\d.]+ s"
    assert re.search(final, err), err


def test_tail_piped_prints_plain_lines_and_a_final_line_with_the_totals(
    relay: tuple[str, int],
) -> None:
    url, max_scn = relay
    middle = rf"^tail: SCN \d+/{max_scn}, [\d,]+ events, [\d,.]+ events/s, ETA \d+ (s|min)"
    code, out, err = _run_tail(url, terminal=False, eta=middle)
    assert code == 0, err
    assert len(out.splitlines()) == TAIL_ROWS
    assert not ANSI.search(err) and "\r" not in err
    lines = err.splitlines()
    assert all(line.startswith("tail: ") for line in lines), err
    assert not ZERO_RATE.search(err)
    final = rf"tail: SCN {max_scn}/{max_scn}, 3,000 events, [\d,.]+ events/s, done in [\d.]+ s"
    assert re.fullmatch(final, lines[-1]), err


def test_a_tail_refused_at_once_is_its_error_line_alone(relay: tuple[str, int]) -> None:
    url, max_scn = relay
    for terminal in (False, True):
        proc, stderr = _start(
            ["tail", "--relay", url, "--until-caught-up", "--since-scn", str(max_scn * 2)],
            terminal=terminal,
        )
        out, err = _finish(proc, stderr)
        assert proc.returncode != 0 and out == ""
        lines = [line for line in ANSI.sub("", err).splitlines() if line.strip()]
        assert len(lines) == 1 and lines[0].startswith("sluice: error:"), err
        assert "ahead of everything" in lines[0]
