"""``zk://HOST:PORT[,HOST:PORT...]/PATH``: the ZooKeeper ensemble and the chroot under which
groups live (``PATH/groups/NAME``)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from sluice.errors import ConfigError

EXPECTED = "expected zk://HOST:PORT[,HOST:PORT...]/PATH, e.g. zk://127.0.0.1:2181/sluice"
_HOST = re.compile(r"^(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9_.-]+):(\d{1,5})$")
_PATH = re.compile(r"^(/[A-Za-z0-9_.-]+)+$")


@dataclass(frozen=True, slots=True)
class CoordinatorUrl:
    hosts: str  # kazoo's "h1:p1,h2:p2"
    path: str  # "/sluice"

    def __str__(self) -> str:
        return f"zk://{self.hosts}{self.path}"


def parse_coordinator_url(url: str) -> CoordinatorUrl:
    """A ``CoordinatorUrl``, or a one-line ``ConfigError`` saying what is wrong."""
    scheme, sep, rest = url.partition("://")
    if not sep or scheme.lower() != "zk":
        raise ConfigError(f"--coordinator {url!r}: only ZooKeeper is supported; {EXPECTED}")
    hosts, slash, path = rest.partition("/")
    path = "/" + path.rstrip("/") if slash else ""
    if not hosts:
        raise ConfigError(f"--coordinator {url!r} names no host; {EXPECTED}")
    for host in hosts.split(","):
        match = _HOST.match(host)
        if match is None or not 0 < int(match.group(2)) < 65536:
            raise ConfigError(f"--coordinator {url!r}: {host!r} is not HOST:PORT; {EXPECTED}")
    if not path or not _PATH.match(path):
        raise ConfigError(
            f"--coordinator {url!r} needs a path of letters, digits, _ . - (groups live "
            f"under it); {EXPECTED}"
        )
    return CoordinatorUrl(hosts, path)
