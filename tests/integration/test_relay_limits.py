"""A relay under hostile load and a full disk (issue 11): unread whole-buffer streams keep its
memory bounded, clients beyond ``max_clients`` get a fast 503 while ``/healthz`` answers, a
full disk is a clear error at start and a failing persist turns ``/healthz`` 503 until the
disk has room again, with nothing lost; 200 filtered clients catching up at once leave
``/stats``, ``/healthz`` and ``/metrics`` answering (issue 40)."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import logging
import os
import re
import socket
import subprocess
import urllib.error
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from sluice.testing import PrivateMariaDB, RelayProcess, RelayThread
from tests.integration.support import get_json, relay_config, run_sluice, wait_for


def _anon_rss(pid: int) -> int:
    """Anonymous resident memory (copies, not the buffer file's shared pages), in bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("RssAnon:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no RssAnon in /proc")


def _unread_stream(port: int, query: str) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port))
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.sendall(f"GET /stream?{query} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    return sock


def _read_all(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=120) as resp:
        return bytes(resp.read())


def test_unread_whole_buffer_streams_keep_memory_bounded_and_readers_take_turns(
    mariadb: PrivateMariaDB, database: str, tmp_path: Path
) -> None:
    conn = mariadb.connect(database)
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(200))")
    source = f"{database}.t"
    relay = RelayProcess(
        [
            "--source", mariadb.url, "--table", source, "--port", "0",
            "--data-dir", str(tmp_path / "r"), "--buffer-size", str(96 << 20),
        ],
        tmp_path / "relay.log",
    ).start()  # fmt: skip
    try:
        start = get_json(relay.url + "/stats")["max_scn"]
        with conn.cursor() as cur:  # ~40 MB of windows
            for n in range(10):
                cur.execute(
                    f"INSERT INTO t SELECT seq, REPEAT('x', 180) FROM seq_{n * 20000 + 1}_to_"
                    f"{(n + 1) * 20000}"
                )
        wait_for(lambda: get_json(relay.url + "/stats")["events"] >= 200_000, 120, "capture")
        assert relay.proc is not None
        port = int(relay.url.rsplit(":", 1)[1])
        before = _anon_rss(relay.proc.pid)
        socks = [
            _unread_stream(port, f"since_scn={start}&max_bytes=268435456{fmt}")
            for fmt in ("",) * 10 + ("&format=json",) * 2
        ]

        def settled() -> bool:  # every stream waits for its client (none for a turn)
            stats: dict[str, int] = get_json(relay.url + "/stats")
            return (
                stats["clients"] == 12 and stats["catching_up"] == 0 and stats["queued_bytes"] > 0
            )

        wait_for(settled, 30, "12 streams waiting for their clients")
        stats = get_json(relay.url + "/stats")
        grown = _anon_rss(relay.proc.pid) - before
        # The documented bound: a stream holds at most one chunk (and its JSON) at a time.
        # The documented bound: ~1 MiB per raw stream; a JSON stream also holds the window it
        # is sending (here one 4 MB transaction). A copy per client would be 12 x 40 MB.
        bound = 10 * (1 << 20) + 2 * (5 << 20) + (12 << 20)
        assert grown < bound, f"{grown >> 20} MiB for 12 unread streams"
        assert stats["bytes"] > 30 << 20 and stats["rss_bytes"] > 0
        assert 0 < stats["queued_bytes"] < 12 << 20, stats
        assert get_json(relay.url + "/healthz")["status"] == "ok"
        for sock in socks:
            sock.close()
        wait_for(lambda: get_json(relay.url + "/stats")["clients"] == 0, 30, "streams closed")

        # Readers catching up together take turns past their first chunk (relay/turns.py),
        # and each still gets every byte, in order; a client at the head is answered meanwhile.
        whole = f"{relay.url}/stream?since_scn={start}&max_bytes=268435456&timeout_ms=0"
        reference = _read_all(whole)
        with ThreadPoolExecutor(8) as pool:
            reads = [pool.submit(_read_all, whole) for _ in range(8)]
            head = get_json(relay.url + "/stats")["max_scn"] - 1
            at_head = _read_all(f"{relay.url}/stream?since_scn={head}&timeout_ms=0")
            bodies = [r.result() for r in reads]
        assert len(reference) > 30 << 20 and reference.endswith(at_head)
        assert all(body == reference for body in bodies)
        assert get_json(relay.url + "/stats")["turn_waits"] > 0
    finally:
        relay.stop()
        conn.close()


def _status(url: str) -> tuple[int, dict[str, str]]:
    try:
        with urllib.request.urlopen(url, timeout=30) as resp:
            return resp.status, dict(resp.headers)
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers)


def test_clients_beyond_max_clients_get_a_fast_503_while_healthz_answers(
    mariadb: PrivateMariaDB, database: str, tmp_path: Path
) -> None:
    conn = mariadb.connect(database)
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE t (id INT PRIMARY KEY)")
    config = relay_config(mariadb, [f"{database}.t"], tmp_path / "r", max_clients=2)
    with RelayThread(config) as relay:
        scn = get_json(relay.url + "/stats")["max_scn"]
        port = relay.relay.port
        polls = [_unread_stream(port, f"since_scn={scn}&timeout_ms=20000") for _ in range(2)]
        wait_for(lambda: get_json(relay.url + "/stats")["clients"] == 2, 30, "two long polls")
        status, headers = _status(relay.url + f"/stream?since_scn={scn}&timeout_ms=0")
        assert status == 503 and headers.get("Retry-After") == "1"
        assert _status(relay.url + "/healthz")[0] == 200
        assert get_json(relay.url + "/stats")["rejected_clients"] == 1
        for sock in polls:
            sock.close()
        wait_for(lambda: get_json(relay.url + "/stats")["clients"] == 0, 30, "polls closed")
        assert _status(relay.url + f"/stream?since_scn={scn}&timeout_ms=0")[0] == 200
    conn.close()


@contextlib.contextmanager
def _tmpfs(path: Path, size: str) -> Iterator[Path]:
    path.mkdir(parents=True, exist_ok=True)
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
        capture_output=True,
        text=True,
        check=False,
    )
    if mounted.returncode != 0:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI must be able to mount a small tmpfs (root): {mounted.stderr}")
        pytest.skip(f"cannot mount a tmpfs here (not root?): {mounted.stderr.strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def test_a_full_disk_at_start_is_one_clear_line(
    mariadb: PrivateMariaDB, database: str, tmp_path: Path
) -> None:
    with _tmpfs(tmp_path / "small", "2m") as small:
        result = run_sluice(
            "relay", "--source", mariadb.url, "--table", f"{database}.t", "--port", "0",
            "--data-dir", str(small / "r"), "--buffer-size", str(8 << 20),
        )  # fmt: skip
        assert result.returncode == 2, result.stderr
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and "no room" in lines[0] and "--buffer-size" in lines[0]


def test_a_failing_persist_turns_healthz_503_and_recovers_with_nothing_lost(
    mariadb: PrivateMariaDB, database: str, tmp_path: Path
) -> None:
    conn = mariadb.connect(database)
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE t (id INT PRIMARY KEY)")
    with _tmpfs(tmp_path / "small", "3m") as small:
        config = relay_config(mariadb, [f"{database}.t"], small / "r", buffer_size=1 << 20)
        with RelayThread(config) as relay:
            with conn.cursor() as cur:  # its schema file is written before the disk fills
                cur.execute("INSERT INTO t VALUES (0)")
            wait_for(lambda: get_json(relay.url + "/stats")["events"] == 1, 30, "a first row")
            filler = small / "filler"
            with contextlib.suppress(OSError), filler.open("wb") as out:
                while True:  # fill the disk, as another process would
                    out.write(b"\0" * (64 << 10))
            with conn.cursor() as cur:
                cur.execute("INSERT INTO t VALUES (1), (2), (3)")

            def failing() -> Any:
                status, _ = _status(relay.url + "/healthz")
                return status == 503 and get_json(relay.url + "/stats")["persist"]["error"]

            wait_for(failing, 30, "/healthz to report the failing persist")
            assert get_json(relay.url + "/stats")["events"] == 4  # capture goes on
            stats = get_json(relay.url + "/stats")
            assert "No space left" in stats["persist"]["error"]
            assert stats["persist"]["persisted_scn"] < stats["max_scn"]
            filler.unlink()
            wait_for(lambda: _status(relay.url + "/healthz")[0] == 200, 60, "recovery")
            stats = get_json(relay.url + "/stats")
            assert stats["persist"] == {
                "persisted_scn": stats["max_scn"],
                "error": None,
                "failures": stats["persist"]["failures"],
            }
            max_scn = stats["max_scn"]
        # A restart resumes exactly where the state says.
        with RelayThread(config) as again:
            assert get_json(again.url + "/stats")["max_scn"] == max_scn
    conn.close()


def _closed_by_server(sock: socket.socket) -> bool:
    try:
        return sock.recv(1) == b""
    except (TimeoutError, BlockingIOError):
        return False
    except OSError:
        return True


def test_slowloris_sockets_are_closed_while_healthz_answers(
    mariadb: PrivateMariaDB, database: str, tmp_path: Path
) -> None:
    config = relay_config(
        mariadb, [f"{database}.t"], tmp_path / "r", header_timeout_s=1.0, max_clients=5
    )
    conn = mariadb.connect(database)
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE t (id INT PRIMARY KEY)")
    with RelayThread(config) as relay:
        port = relay.relay.port
        slow = []
        for n in range(40):
            sock = socket.create_connection(("127.0.0.1", port))
            if n % 2:  # half send headers that never end, half send nothing at all
                sock.sendall(b"GET /stream?since_scn=0 HTTP/1.1\r\nHost: x\r\nX-Slow: ")
            sock.settimeout(0.05)
            slow.append(sock)
        assert _status(relay.url + "/healthz")[0] == 200  # while they hang
        wait_for(lambda: all(_closed_by_server(s) for s in slow), 30, "the server to close them")
        assert get_json(relay.url + "/stats")["clients"] == 0
        for sock in slow:
            sock.close()
    conn.close()


CROWD = 200


async def _http_get(port: int, target: str) -> tuple[int, bytes]:
    """One ``GET`` on its own connection: the status and the body."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(f"GET {target} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
    data = await reader.read()
    writer.close()
    await writer.wait_closed()
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split()[1]), body


async def _flood_and_poll(port: int, query: str) -> tuple[list[dict[str, Any]], int]:
    """``CROWD`` streams of ``query`` read to their end, and meanwhile ``/stats``,
    ``/healthz`` and ``/metrics`` asked in turn, one after another, the first as soon as every
    stream's request is sent: the ``/stats`` answers and what the crowd read in all."""
    sent = asyncio.Semaphore(0)
    got = [0]

    async def catch_up() -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(
            f"GET /stream?{query} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode()
        )
        sent.release()
        while data := await reader.read(1 << 16):
            got[0] += len(data)
        writer.close()
        await writer.wait_closed()

    crowd = [asyncio.create_task(catch_up()) for _ in range(CROWD)]
    for _ in range(CROWD):
        await sent.acquire()
    answers = []
    for path in itertools.cycle(("/stats", "/healthz", "/metrics")):
        if all(task.done() for task in crowd):
            break
        status, body = await _http_get(port, path)
        assert status == 200, (path, body)
        if path == "/stats":
            answers.append(json.loads(body))
    await asyncio.gather(*crowd)
    return answers, got[0]


def test_operator_endpoints_answer_while_200_filtered_clients_catch_up(
    mariadb: PrivateMariaDB, database: str, tmp_path: Path
) -> None:
    """Issue 40: a partition filter keeps little, so its streams sent little and never took a
    turn (turns were counted in bytes sent): each scanned the whole buffer without yielding
    the loop, and ``/stats`` waited until all 200 had (9.6 s). Turns now count the work."""
    conn = mariadb.connect(database)
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(40))")
    relay = RelayProcess(
        [
            "--source", mariadb.url, "--table", f"{database}.t", "--port", "0",
            "--data-dir", str(tmp_path / "r"), "--buffer-size", str(32 << 20),
            "--max-clients", str(CROWD + 10),
        ],
        tmp_path / "relay.log",
    ).start()  # fmt: skip
    try:
        start = get_json(relay.url + "/stats")["max_scn"]
        with conn.cursor() as cur:  # 200 windows of 1,000 rows, ~10 MB
            for n in range(200):
                cur.execute(
                    f"INSERT INTO t SELECT seq, REPEAT('x', 30) FROM seq_{n * 1000 + 1}_to_"
                    f"{(n + 1) * 1000}"
                )
        wait_for(lambda: get_json(relay.url + "/stats")["events"] >= 200_000, 120, "capture")
        port = int(relay.url.rsplit(":", 1)[1])
        query = f"since_scn={start}&partition=0/64&max_bytes=268435456&timeout_ms=0"
        answers, got = asyncio.run(_flood_and_poll(port, query))
        # Answered while the crowd was still reading: the first with most of it streaming
        # (before the fix every stream had ended before /stats was read), and many times
        # more before the last stream ended.
        assert answers[0]["clients"] >= CROWD * 3 // 4, answers[0]
        during = [a for a in answers if a["clients"] > 0]
        assert len(during) >= 10, [a["clients"] for a in answers]
        assert all(a["bytes_served"] < got for a in during)
        assert get_json(relay.url + "/stats")["turn_waits"] > 0
    finally:
        relay.stop()
        conn.close()


def _answer(port: int, data: bytes) -> bytes:
    """What the server answers to ``data`` before it closes the connection."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(data)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    return answer


def test_malformed_requests_are_an_info_line_not_an_error(
    mariadb: PrivateMariaDB, database: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 40: aiohttp logged ``ERROR aiohttp.server: Error handling request`` with a
    traceback for each; a client's mistake is a 400 and one INFO line."""
    caplog.set_level(logging.INFO)
    conn = mariadb.connect(database)
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE t (id INT PRIMARY KEY)")
    with RelayThread(relay_config(mariadb, [f"{database}.t"], tmp_path / "r")) as relay:
        port = relay.relay.port
        for garbage in (
            b"GET /stats HTTP/1.1\r\nno colon here\r\n\r\n",
            b"GET /stats HTTP/9.9\r\nHost: x\r\n\r\n",
            b"GET /" + b"x" * 20000 + b" HTTP/1.1\r\nHost: x\r\n\r\n",
            b"GET /stats HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n",
            # a good request, then garbage on the same connection
            b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n\x00\x01\x02 garbage\r\n\r\n",
        ):
            answer = _answer(port, garbage)
            statuses = re.findall(rb"HTTP/1\.[01] (\d{3}) ", answer)
            assert statuses[-1:] == [b"400"], (garbage[:60], answer[:200])
        assert _status(relay.url + "/healthz")[0] == 200
    conn.close()
    refused = [r for r in caplog.records if "refused a malformed request" in r.getMessage()]
    assert len(refused) >= 3 and all(r.levelno == logging.INFO for r in refused)
    loud = [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]
    assert not loud, [r.getMessage() for r in loud]
