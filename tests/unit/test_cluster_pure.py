"""The group's pure parts: the coordinator URL and the assignment every member computes."""

from __future__ import annotations

import pytest

from sluice.cluster import assign, parse_coordinator_url
from sluice.errors import ConfigError


def test_assignment_is_even_and_in_join_order() -> None:
    members = ["m-0000000010", "m-0000000002", "m-0000000007"]
    owned = assign(members, 8)
    assert owned == {
        "m-0000000002": (0, 3, 6),
        "m-0000000007": (1, 4, 7),
        "m-0000000010": (2, 5),
    }
    assert sorted(p for ps in owned.values() for p in ps) == list(range(8))
    assert assign([], 8) == {}
    assert assign(["m-1"], 3) == {"m-1": (0, 1, 2)}
    # more members than partitions: some hold none
    assert assign(["m-1", "m-2", "m-3"], 2) == {"m-1": (0,), "m-2": (1,), "m-3": ()}


def test_every_member_computes_the_same_assignment_from_any_order() -> None:
    members = [f"m-{i:010d}" for i in (5, 1, 9, 3)]
    assert assign(members, 16) == assign(list(reversed(members)), 16)


def test_coordinator_urls() -> None:
    url = parse_coordinator_url("zk://a:2181,b:2182/sluice/prod")
    assert (url.hosts, url.path, str(url)) == ("a:2181,b:2182", "/sluice/prod",
                                               "zk://a:2181,b:2182/sluice/prod")  # fmt: skip
    for bad, says in [
        ("http://a:2181/x", "only ZooKeeper"),
        ("zk://a:2181", "needs a path"),
        ("zk://a/x", "not HOST:PORT"),
        ("zk://a:99999/x", "not HOST:PORT"),
        ("zk:///x", "names no host"),
        ("zk://a:1/x y", "needs a path"),
    ]:
        with pytest.raises(ConfigError, match=says):
            parse_coordinator_url(bad)
