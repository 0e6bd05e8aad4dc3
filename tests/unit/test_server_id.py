"""The binlog dump's server id is the mysql:// URL's (``?server_id=N``), not a generic setting:
a cold read takes a random one of its own; the relay's older ``server_id`` key still works."""

from __future__ import annotations

from pathlib import Path

import pytest

from sluice.capture.mysql import capture as mysql_kind
from sluice.capture.mysql.url import parse_source_url
from sluice.capture.source import CaptureSettings
from sluice.errors import ConfigError
from sluice.relay import RelayConfig
from sluice.schemas import SchemaRegistry


def test_the_url_carries_the_server_id() -> None:
    assert parse_source_url("mysql://u:secret@db:3307?server_id=4242").server_id == 4242
    assert parse_source_url("mysql://u@db").server_id is None
    for bad in ("0", "-1", "x", str(2**32)):
        with pytest.raises(ConfigError, match="server_id"):
            parse_source_url(f"mysql://u@db?server_id={bad}")


def _server_id(url: str, *, cold: bool) -> int:
    settings = CaptureSettings(("shop.t",), SchemaRegistry(), lambda w: None, cold=cold)
    capture = mysql_kind.open_capture(url, settings)
    assert isinstance(capture, mysql_kind.MySQLCapture)
    return capture._server_id


def test_a_cold_read_takes_an_id_of_its_own() -> None:
    url = "mysql://u@127.0.0.1:1?server_id=4242"
    assert _server_id(url, cold=False) == 4242
    assert _server_id(url, cold=True) != 4242


def test_the_relays_old_server_id_key_moves_into_the_url(tmp_path: Path) -> None:
    config = RelayConfig(
        source="mysql://u@db:3306", tables=["shop.t"], data_dir=tmp_path, server_id=4242
    )
    assert config.source.get_secret_value() == "mysql://u@db:3306?server_id=4242"
    given = RelayConfig(
        source="mysql://u@db:3306?server_id=7", tables=["shop.t"], data_dir=tmp_path, server_id=9
    )
    assert given.source.get_secret_value() == "mysql://u@db:3306?server_id=7"  # the URL wins
    assert not hasattr(config, "server_id")
