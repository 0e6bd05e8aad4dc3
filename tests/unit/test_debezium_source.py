"""The Debezium source block follows what each source kind declares in ``source_info``:
the shared formatter knows no SCN layout."""

from __future__ import annotations

from sluice.capture.mysql.capture import described_source as mysql_source
from sluice.capture.mysql.scn import log_name, make_scn
from sluice.capture.postgres.capture import described_source as postgres_source
from sluice.schemas import Column, TableSchema
from sluice.schemas.debezium import DebeziumFormatter, DebeziumOptions

SCHEMA = TableSchema("shop.person", 1, (Column("id", "int", False, "int"),), ("id",))


def _block(source: dict[str, object], scn: int, op: str = "c") -> dict[str, object]:
    formatter = DebeziumFormatter(SCHEMA, dict(source), DebeziumOptions())
    return formatter.source_block(op, scn, 1_700_000_000_000)


def test_a_mysql_block_names_the_binlog_file_and_offset_of_the_scn() -> None:
    scn = make_scn(3, 318_139)
    block = _block(mysql_source(7, "mariadb-bin"), scn)
    assert block["file"] == log_name("mariadb-bin", 3) == "mariadb-bin.000003"
    assert block["pos"] == 318_139 and block["server_id"] == 7 and block["row"] == 0
    assert (block["db"], block["table"], block["connector"]) == ("shop", "person", "mysql")
    assert list(block)[-8:] == [
        "table",
        "server_id",
        "gtid",
        "file",
        "pos",
        "row",
        "thread",
        "query",
    ]


def test_an_unreachable_mysql_server_gives_debeziums_defaults() -> None:
    block = _block(mysql_source(None, None), make_scn(1, 4), op="r")
    assert (block["file"], block["pos"], block["server_id"]) == ("binlog.000001", 4, 0)
    assert block["snapshot"] == "true"


def test_a_binlog_base_with_braces_is_taken_literally() -> None:
    assert _block(mysql_source(1, "lo{g}"), make_scn(12, 9))["file"] == "lo{g}.000012"


def test_a_postgresql_block_carries_the_lsn_and_the_database() -> None:
    block = _block(postgres_source("shop_db"), 0x1_6B37_4D48)
    assert block["lsn"] == 0x1_6B37_4D48 and block["db"] == "shop_db"
    assert block["schema"] == "shop" and block["table"] == "person"
