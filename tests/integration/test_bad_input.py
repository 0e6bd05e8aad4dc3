"""Bad input gets a clear error (one sentence, no traceback) and loses nothing."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pymysql
import pytest

from sluice.testing import PrivateMariaDB, RelayThread, free_port
from tests.integration.support import (
    BAD_STREAM_QUERIES,
    http_status,
    relay_config,
    run_sluice,
    wait_relay_caught_up,
)

sluice = run_sluice


def relay_cmd(db_url: str, table: str, data_dir: Path, *extra: str) -> list[str]:
    return [
        "relay",
        "--source",
        db_url,
        "--table",
        table,
        "--port",
        "0",
        "--data-dir",
        str(data_dir),
        *extra,
    ]


@pytest.fixture
def table(conn: pymysql.Connection[Any], database: str) -> str:
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE t (id INT PRIMARY KEY, v INT)")
    return f"{database}.t"


@pytest.fixture
def relay(mariadb: PrivateMariaDB, table: str, tmp_path: Path) -> Iterator[RelayThread]:
    with RelayThread(relay_config(mariadb, [table], tmp_path / "relay")) as running:
        yield running


@pytest.mark.parametrize(
    ("variable", "bad", "fix"),
    [
        ("binlog_row_metadata", "MINIMAL", "SET GLOBAL binlog_row_metadata='FULL'"),
        ("binlog_row_image", "MINIMAL", "SET GLOBAL binlog_row_image='FULL'"),
        ("binlog_format", "STATEMENT", "SET GLOBAL binlog_format='ROW'"),
    ],
)
def test_misconfigured_server_is_refused(
    mariadb: PrivateMariaDB, table: str, tmp_path: Path, variable: str, bad: str, fix: str
) -> None:
    admin = mariadb.connect()
    with admin.cursor() as cur:
        cur.execute(f"SELECT @@global.{variable}")
        before = cur.fetchone()[0]  # type: ignore[index]
        cur.execute(f"SET GLOBAL {variable} = %s", (bad,))
    try:
        result = sluice(*relay_cmd(mariadb.url, table, tmp_path / "r"))
    finally:
        with admin.cursor() as cur:
            cur.execute(f"SET GLOBAL {variable} = %s", (before,))
        admin.close()
    assert result.returncode == 1
    assert variable in result.stderr and fix in result.stderr


def test_missing_privileges_are_named(mariadb: PrivateMariaDB, table: str, tmp_path: Path) -> None:
    admin = mariadb.connect()
    with admin.cursor() as cur:
        cur.execute("CREATE USER IF NOT EXISTS 'weak'@'127.0.0.1' IDENTIFIED BY 's3cret-pw'")
        cur.execute(f"GRANT SELECT ON {table} TO 'weak'@'127.0.0.1'")
    admin.close()
    url = f"mysql://weak:s3cret-pw@127.0.0.1:{mariadb.port}"
    result = sluice(*relay_cmd(url, table, tmp_path / "r"))
    assert result.returncode == 1
    assert "GRANT" in result.stderr and "REPLICATION SLAVE" in result.stderr
    assert "s3cret-pw" not in result.stderr


def test_wrong_password_is_clear_and_not_echoed(
    mariadb: PrivateMariaDB, table: str, tmp_path: Path
) -> None:
    url = f"mysql://root:hunter22@127.0.0.1:{mariadb.port}"
    result = sluice(*relay_cmd(url, table, tmp_path / "r"))
    assert result.returncode == 1 and "refused the login" in result.stderr
    assert "hunter22" not in result.stderr


def test_unreachable_server(tmp_path: Path) -> None:
    result = sluice(*relay_cmd(f"mysql://root@127.0.0.1:{free_port()}", "a.b", tmp_path / "r"))
    assert result.returncode == 1 and "cannot connect" in result.stderr


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("oracle://u@h:1521", "unknown source scheme 'oracle'"),
        ("postgresql://u@h:5432", "needs a user, a host and a database"),
        ("postgresql://u@h:5432/db?slot=No-Good", "slot name"),
        ("mysql://127.0.0.1:3306", "needs a user"),
        ("mysql://u@h:notaport", "bad source URL"),
    ],
)
def test_bad_source_url(tmp_path: Path, url: str, message: str) -> None:
    result = sluice(*relay_cmd(url, "a.b", tmp_path / "r"))
    assert result.returncode == 2 and message in result.stderr


@pytest.mark.parametrize(
    "url",
    [
        "mysql://u:Zq9x/secret@h:3306",
        "mysql://u:Zq9x#secret@h:3306",
        "mysql://u:Zq9x?secret@h:3306",
        "postgresql://u:Zq9x/secret@h:5432/db",
    ],
)
def test_a_password_is_never_echoed(tmp_path: Path, url: str) -> None:
    """An unencoded / # or ? in the password breaks the URL: the error says how to fix it and
    shows no part of the password."""
    result = sluice(*relay_cmd(url, "a.b", tmp_path / "r"))
    assert result.returncode == 2 and "percent-encoded" in result.stderr
    assert "Zq9x" not in result.stderr + result.stdout
    assert "secret" not in result.stderr + result.stdout


def test_unknown_table(mariadb: PrivateMariaDB, database: str, tmp_path: Path) -> None:
    result = sluice(*relay_cmd(mariadb.url, f"{database}.nope", tmp_path / "r"))
    assert result.returncode == 1 and "unknown table" in result.stderr


def test_bad_config_values(mariadb: PrivateMariaDB, tmp_path: Path) -> None:
    assert "must be DB.TABLE" in sluice(*relay_cmd(mariadb.url, "notable", tmp_path)).stderr
    missing = sluice("relay", "--source", mariadb.url, "--table", "a.b")
    assert missing.returncode == 2 and "data_dir" in missing.stderr
    bad_toml = tmp_path / "relay.toml"
    bad_toml.write_text("tables = [unclosed")
    assert "not valid TOML" in sluice("relay", "--config", str(bad_toml)).stderr
    assert (
        "not an SCN" in sluice(*relay_cmd(mariadb.url, "a.b", tmp_path, "--since-scn", "x")).stderr
    )


def test_config_file_and_env(mariadb: PrivateMariaDB, table: str, tmp_path: Path) -> None:
    from sluice.relay import RelayConfig

    path = tmp_path / "relay.toml"
    path.write_text(
        f'source = "{mariadb.url}"\ntables = ["{table}"]\ndata_dir = "{tmp_path}"\nport = 9999\n'
    )
    config = RelayConfig.load(path, port=0)
    assert (config.port, config.tables, config.data_dir) == (0, [table], tmp_path)
    assert "mysql://" not in repr(config) and "**" in repr(config.source)


@pytest.mark.parametrize(
    ("query", "status", "message"),
    [*BAD_STREAM_QUERIES, ("since_scn=9223372036854775807", 409, "ahead of everything")],
)
def test_malformed_stream_requests(
    relay: RelayThread, query: str, status: int, message: str
) -> None:
    got, body = http_status(f"{relay.url}/stream?{query}")
    assert got == status and message in body["error"]


def test_other_bad_requests_and_garbage(relay: RelayThread, table: str) -> None:
    assert http_status(f"{relay.url}/nope")[0] == 404
    assert http_status(f"{relay.url}/schemas/x.y")[0] == 404
    assert http_status(
        f"{relay.url}/stream?since_scn=0",
    )[0] in (200, 410)
    port = int(relay.url.rsplit(":", 1)[1])
    for garbage in (
        b"\x00\xff garbage\r\n\r\n",
        b"GET /stream?since_scn=" + b"9" * 10000 + b" HTTP/1.1\r\n\r\n",
        b"POST /stream HTTP/1.1\r\nContent-Length: 5\r\n\r\n",
    ):
        with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
            sock.sendall(garbage)
            assert sock.recv(100).startswith(b"HTTP/1.")
    status, body = http_status(f"{relay.url}/healthz")
    assert status == 200 and body == b'{"status": "ok"}\n'


def test_checkpoint_from_the_future(relay: RelayThread, table: str, tmp_path: Path) -> None:
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    (ckpt / "tail.checkpoint.json").write_text(
        json.dumps({"version": 1, "phase": "online", "scn": 2**62})
    )
    result = sluice(
        "tail", "--relay", relay.url, "--checkpoint-dir", str(ckpt), "--until-caught-up"
    )
    assert result.returncode == 1 and "ahead of everything" in result.stderr
    assert json.loads((ckpt / "tail.checkpoint.json").read_text())["scn"] == 2**62


def test_corrupt_checkpoint_file_is_reported_and_kept(relay: RelayThread, tmp_path: Path) -> None:
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    (ckpt / "tail.checkpoint.json").write_text('{"version": 1, "phase": "onl')
    result = sluice("tail", "--relay", relay.url, "--checkpoint-dir", str(ckpt))
    assert result.returncode == 1 and "not valid JSON" in result.stderr
    assert (ckpt / "tail.checkpoint.json").read_text() == '{"version": 1, "phase": "onl'


def test_tail_bad_relay_urls(tmp_path: Path) -> None:
    assert "bad relay URL" in sluice("tail", "--relay", "ftp://x").stderr
    result = sluice("tail", "--relay", f"http://127.0.0.1:{free_port()}", "--give-up-after", "1")
    assert result.returncode == 1 and "Cannot connect" in result.stderr


@pytest.mark.parametrize("mode", [(), ("--until-caught-up",)])
def test_tail_giving_up_on_no_relay_prints_its_error_alone(mode: tuple[str, ...]) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    result = sluice("tail", "--relay", url, *mode, "--give-up-after", "0.5")
    assert result.returncode == 1
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"sluice: error: {url}: Cannot connect"), lines
    # the retries it gave up after are still there for who asks (INFO, -v)
    verbose = sluice("-v", "tail", "--relay", url, *mode, "--give-up-after", "0.5")
    assert verbose.returncode == 1 and "INFO sluice.client.client" in verbose.stderr
    assert "; retrying" in verbose.stderr and "WARNING" not in verbose.stderr


def test_tail_until_caught_up_resumes(
    relay: RelayThread, conn: pymysql.Connection[Any], tmp_path: Path
) -> None:
    with conn.cursor() as cur:
        for i in range(3):
            cur.execute("INSERT INTO t VALUES (%s, %s)", (i, i))
    wait_relay_caught_up(relay.url, conn)
    ckpt = str(tmp_path / "ckpt")
    first = sluice("tail", "--relay", relay.url, "--checkpoint-dir", ckpt, "--until-caught-up")
    assert first.returncode == 0
    assert [json.loads(x)["key"]["id"] for x in first.stdout.splitlines()] == [0, 1, 2]
    with conn.cursor() as cur:
        cur.execute("UPDATE t SET v = 10 WHERE id = 1")
    wait_relay_caught_up(relay.url, conn)
    second = sluice("tail", "--relay", relay.url, "--checkpoint-dir", ckpt, "--until-caught-up")
    events = [json.loads(x) for x in second.stdout.splitlines()]
    assert [(e["op"], e["before"]["v"], e["after"]["v"]) for e in events] == [("u", 1, 10)]


def test_since_scn_in_a_purged_or_unknown_binlog_file(
    mariadb: PrivateMariaDB, table: str, tmp_path: Path
) -> None:
    result = sluice(*relay_cmd(mariadb.url, table, tmp_path / "r", "--since-scn", "999:4"))
    assert result.returncode == 1 and "binlog.000999 is not on the server" in result.stderr


def test_the_password_comes_from_a_file(
    mariadb: PrivateMariaDB, database: str, tmp_path: Path
) -> None:
    """``--password-file``: the password stays out of the command line (``/proc/PID/cmdline``)."""
    admin = mariadb.connect()
    with admin.cursor() as cur:
        cur.execute(f"CREATE TABLE {database}.t (id INT PRIMARY KEY)")
        cur.execute("CREATE USER IF NOT EXISTS 'pwfile'@'%' IDENTIFIED BY 'Zq9x/s3cret#'")
        cur.execute(f"GRANT SELECT ON {database}.* TO 'pwfile'@'%'")
    admin.close()
    secret = tmp_path / "password"
    secret.write_text("Zq9x/s3cret#\n")
    url = mariadb.url.replace("root@", "pwfile@")
    generate = ("schema", "generate", "--source", url, "--table", f"{database}.t")
    ok = sluice(*generate, "--password-file", str(secret))
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["sluice.source"] == f"{database}.t"
    (tmp_path / "empty").write_text("")
    for path, message in ((tmp_path / "empty", "is empty"), (tmp_path / "nope", "cannot read")):
        bad = sluice(*generate, "--password-file", str(path))
        assert bad.returncode == 2 and message in bad.stderr and "Traceback" not in bad.stderr
