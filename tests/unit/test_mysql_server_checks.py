"""MySQL honestly, at start: settings that write binlog events Sluice cannot read are refused
with the fix, and the binlog position is read where MySQL 8.4 removed ``SHOW MASTER STATUS``.
A fake DB-API connection answers as MySQL or MariaDB would."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pymysql
import pytest

from sluice.capture.mysql import capture as mysql_capture
from sluice.capture.mysql.binlog.protocol import ConnectParams
from sluice.capture.mysql.metadata import ServerInfo, binlog_status, check_server, end_scn
from sluice.capture.mysql.scn import make_scn
from sluice.errors import SourceSetupError

Answer = list[tuple[Any, ...]] | Exception


def _syntax_error(sql: str) -> pymysql.err.ProgrammingError:
    return pymysql.err.ProgrammingError(
        1064, f"You have an error in your SQL syntax; ... near '{sql[5:]}' at line 1"
    )


class _Cursor:
    def __init__(self, conn: _Conn) -> None:
        self._conn = conn
        self._rows: list[tuple[Any, ...]] = []

    def execute(self, sql: str, args: Any = None) -> int:
        self._conn.asked.append(sql)
        answer = self._conn.answer(sql)
        if isinstance(answer, Exception):
            raise answer
        self._rows = answer
        return len(answer)

    def fetchall(self) -> list[tuple[Any, ...]]:
        return self._rows

    def fetchone(self) -> tuple[Any, ...] | None:
        return self._rows[0] if self._rows else None


class _Conn:
    """Answers the statements capture's checks send, as a MySQL or MariaDB server would."""

    def __init__(
        self,
        server_version: str,
        variables: dict[str, str] | None = None,
        *,
        master_status: Answer | None = None,
        binary_log_status: Answer | None = None,
    ) -> None:
        self.server_version = server_version
        self.asked: list[str] = []
        self.closed = False
        position: list[tuple[Any, ...]] = [("binlog.000002", 1210, "", "", "")]
        self._answers: dict[str, Callable[[str], Answer]] = {
            "SHOW GLOBAL VARIABLES": lambda sql: [
                (k, v) for k, v in {**_GOOD, **(variables or {})}.items() if f"'{k}'" in sql
            ],
            "SHOW MASTER STATUS": lambda sql: position if master_status is None else master_status,
            "SHOW BINARY LOG STATUS": lambda sql: (
                position if binary_log_status is None else binary_log_status
            ),
            "SHOW GRANTS": lambda sql: [("GRANT REPLICATION SLAVE, BINLOG MONITOR ON *.* TO u",)],
            "SELECT 1 FROM information_schema.TABLES": lambda sql: [(1,)],
            "SHOW BINARY LOGS": lambda sql: [("binlog.000001", 9), ("binlog.000002", 1210)],
            "SELECT ID, CHARACTER_SET_NAME": lambda sql: [(45, "utf8mb4"), (63, "binary")],
            "SELECT @@server_id": lambda sql: [(1,)],
        }

    def answer(self, sql: str) -> Answer:
        for prefix, answer in self._answers.items():
            if sql.startswith(prefix):
                return answer(sql)
        raise AssertionError(f"unexpected statement {sql!r}")

    @contextmanager
    def cursor(self) -> Iterator[_Cursor]:
        yield _Cursor(self)

    def close(self) -> None:
        self.closed = True


_GOOD = {
    "log_bin": "ON",
    "binlog_format": "ROW",
    "binlog_row_image": "FULL",
    "binlog_row_metadata": "FULL",
}
MARIADB = "10.11.19-MariaDB-0+deb12u1"
MARIADB_OLD_HANDSHAKE = "5.5.5-10.6.18-MariaDB-log"


def _check(conn: _Conn) -> ServerInfo:
    return check_server(conn, ("shop.t",))


def test_mariadb_without_the_mysql_variables_passes() -> None:
    info = _check(_Conn(MARIADB, {"log_bin_compress": "OFF"}))
    assert info.end_scn == make_scn(2, 1210)
    assert info.logs == ("binlog.000001", "binlog.000002")


def test_mysql_with_both_variables_off_passes() -> None:
    variables = {"binlog_transaction_compression": "OFF", "binlog_row_value_options": ""}
    assert _check(_Conn("8.0.36", variables)).end_scn == make_scn(2, 1210)


def test_binlog_transaction_compression_on_is_refused_with_the_fix() -> None:
    conn = _Conn("8.0.36", {"binlog_transaction_compression": "ON"})
    with pytest.raises(SourceSetupError) as err:
        _check(conn)
    text = str(err.value)
    assert text.startswith("the server has binlog_transaction_compression=ON")
    assert "SET GLOBAL binlog_transaction_compression=OFF" in text
    assert "binlog_transaction_compression=OFF in my.cnf" in text
    assert "TRANSACTION_PAYLOAD" in text


def test_partial_json_is_refused_with_the_fix() -> None:
    conn = _Conn("8.4.3", {"binlog_row_value_options": "PARTIAL_JSON"})
    with pytest.raises(SourceSetupError) as err:
        _check(conn)
    text = str(err.value)
    assert text.startswith("the server has binlog_row_value_options=PARTIAL_JSON")
    assert "SET GLOBAL binlog_row_value_options=''" in text and "my.cnf" in text


def test_log_bin_compress_is_still_refused() -> None:
    with pytest.raises(SourceSetupError, match="SET GLOBAL log_bin_compress=OFF"):
        _check(_Conn(MARIADB, {"log_bin_compress": "ON"}))


def test_mysql_8_4_is_asked_show_binary_log_status() -> None:
    conn = _Conn("8.4.3", master_status=_syntax_error("SHOW MASTER STATUS"))
    info = _check(conn)
    assert info.end_scn == make_scn(2, 1210)
    assert "SHOW MASTER STATUS" not in conn.asked
    assert end_scn(conn) == make_scn(2, 1210)


@pytest.mark.parametrize("version", [MARIADB, MARIADB_OLD_HANDSHAKE, "8.0.36", "5.7.44-log"])
def test_mariadb_and_older_mysql_are_asked_show_master_status(version: str) -> None:
    conn = _Conn(version, binary_log_status=_syntax_error("SHOW BINARY LOG STATUS"))
    assert end_scn(conn) == make_scn(2, 1210)
    assert conn.asked == ["SHOW MASTER STATUS"]


def test_a_syntax_error_moves_on_to_the_other_statement() -> None:
    # a version string that does not tell (a proxy's, say): the old statement, then the new
    conn = _Conn("", master_status=_syntax_error("SHOW MASTER STATUS"))
    assert end_scn(conn) == make_scn(2, 1210)
    assert conn.asked == ["SHOW MASTER STATUS", "SHOW BINARY LOG STATUS"]
    # and a MySQL that says 8.2+ but only knows the old one
    conn = _Conn("8.3.0", binary_log_status=_syntax_error("SHOW BINARY LOG STATUS"))
    assert end_scn(conn) == make_scn(2, 1210)
    assert conn.asked == ["SHOW BINARY LOG STATUS", "SHOW MASTER STATUS"]


def test_neither_statement_known_is_a_setup_error_not_a_traceback() -> None:
    conn = _Conn(
        "8.4.3",
        master_status=_syntax_error("SHOW MASTER STATUS"),
        binary_log_status=_syntax_error("SHOW BINARY LOG STATUS"),
    )
    with pytest.raises(SourceSetupError, match="knows neither SHOW MASTER STATUS nor SHOW BINARY"):
        _check(conn)


def test_status_errors_other_than_syntax() -> None:
    denied = pymysql.err.OperationalError(1227, "Access denied; you need REPLICATION CLIENT")
    with pytest.raises(SourceSetupError, match="GRANT BINLOG MONITOR, REPLICATION SLAVE"):
        end_scn(_Conn("8.4.3", binary_log_status=denied))
    lost = pymysql.err.OperationalError(2013, "Lost connection to MySQL server during query")
    with pytest.raises(pymysql.err.OperationalError):  # retriable: capture reconnects
        binlog_status(_Conn(MARIADB, master_status=lost))
    with pytest.raises(SourceSetupError, match="the binary log is off"):
        end_scn(_Conn("8.4.3", binary_log_status=[]))


def test_source_info_reads_the_log_base_on_mysql_8_4(monkeypatch: pytest.MonkeyPatch) -> None:
    conn = _Conn("8.4.3", master_status=_syntax_error("SHOW MASTER STATUS"))
    monkeypatch.setattr(ConnectParams, "connect", lambda self, **kw: conn)
    info = mysql_capture.source_info("mysql://u@127.0.0.1:3306")
    assert {k: info[k] for k in ("connector", "server_id", "log_base")} == {
        "connector": "mysql",
        "server_id": 1,
        "log_base": "binlog",
    }
    assert info["debezium"]["fields"] == {"server_id": 1, "row": 0}
    assert conn.closed
