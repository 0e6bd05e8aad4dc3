"""The chained relay's URL, and how it splits a window record into its events."""

from __future__ import annotations

import pytest

from sluice.capture.chain.capture import split_window
from sluice.capture.chain.url import ChainUrl, parse_url
from sluice.core import wire
from sluice.errors import ConfigError


def test_upstreams_in_order_with_a_bootstrap_server() -> None:
    url = "sluice://a:7070,sluice://b?bootstrap=http://bs:7071/,sluice://a:7070"
    assert parse_url(url) == ChainUrl(("http://a:7070", "http://b:7070"), "http://bs:7071")
    assert parse_url("sluice://[::1]:9").upstreams == ("http://[::1]:9",)


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("sluice://", "sluice://HOST:PORT"),
        ("sluice://a:7070,mysql://b:3306", "bad upstream 'mysql://b:3306'"),
        ("sluice://a:x", "port is not a number"),
        ("sluice://u:p@a:1", "nothing more"),
        ("sluice://a:1/path", "nothing more"),
        ("sluice://a:1?bootsrap=http://b", "unknown option 'bootsrap'"),
        ("sluice://a:1?bootstrap=ftp://b", "bad bootstrap="),
    ],
)
def test_a_bad_url_names_the_form(url: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace("?", r"\?")):
        parse_url(url)


def test_a_window_splits_into_its_events_as_they_are() -> None:
    events = [
        wire.encode_event(wire.RawEvent("db.a", "c", 3, 7, b"\x02x")),
        wire.encode_event(wire.RawEvent("db.b", "u", 1, 9, b"")),
        wire.encode_event(wire.RawEvent("db.a", "t", 0, 0, b"")),
    ]
    record = wire.encode_window(42, 40, 1000, events)
    header, got, pairs = split_window(record)
    assert (header.scn, header.prev_scn, header.ts_ms) == (42, 40, 1000)
    assert got == events
    assert pairs == {("db.a", 3), ("db.b", 1)}  # a truncate needs no schema
    assert wire.encode_window(42, 40, 1000, got) == record
