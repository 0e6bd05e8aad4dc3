"""``sluice relay``."""

from __future__ import annotations

import argparse
import asyncio
import tomllib
from pathlib import Path
from typing import Any

from sluice.cli.common import add_password_file, scn_arg, serve_until_signal
from sluice.core.process import long_lived


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "relay",
        help="capture tables (MySQL/MariaDB binlog, PostgreSQL logical replication, or any "
        "database by queries) and serve them",
        description="Capture committed row changes and serve them over HTTP.",
    )
    p.add_argument(
        "--source",
        help="mysql://USER[:PASSWORD]@HOST:PORT, postgresql://USER[:PASSWORD]@HOST:PORT/DB"
        "[?slot=NAME&publication=NAME], or a query source: query+sqlite:///PATH, "
        'query+postgresql://..., query+mysql://... with [tables."..."] settings in --config, '
        "or other relays: sluice://HOST:PORT[,sluice://HOST:PORT][?bootstrap=http://HOST:PORT] "
        "(password may also come from SLUICE_SOURCE_PASSWORD)",
    )
    p.add_argument(
        "--table",
        action="append",
        dest="tables",
        metavar="DB.TABLE",
        help="a table to capture (repeat for more)",
    )
    p.add_argument("--port", type=int, help="HTTP port (default 7070; 0 picks a free one)")
    p.add_argument("--host", help="address to bind (default 127.0.0.1)")
    p.add_argument("--data-dir", type=Path, help="where the event buffer, max SCN and schemas live")
    p.add_argument(
        "--since-scn",
        type=scn_arg,
        help="capture after this SCN (default: resume, or the binlog's end)",
    )
    p.add_argument(
        "--buffer-size",
        type=int,
        metavar="BYTES",
        help="event buffer size in bytes (default 64 MiB)",
    )
    p.add_argument(
        "--window-files-bytes",
        type=int,
        metavar="BYTES",
        help="disk for transactions too big for the buffer, kept in files beside it "
        "(default 17 x --buffer-size: a transaction of 16 buffers fits)",
    )
    p.add_argument(
        "--on-decode-error",
        choices=("stop_source", "skip"),
        help="a row capture cannot decode: stop capturing its table (default; the others go "
        "on) or skip it",
    )
    add_password_file(p)
    p.add_argument(
        "--max-clients",
        type=int,
        metavar="N",
        help="streams served at once; more get 503 + Retry-After (default 1000)",
    )
    p.add_argument("--name", help="what the console calls this relay (default relay)")
    p.add_argument(
        "--link",
        action="append",
        dest="links",
        metavar="NAME=URL",
        help="a console the relay's console links to, such as a bootstrap server's "
        "(http://HOST:PORT/ui; repeat for more); sinks that follow it link themselves",
    )
    p.add_argument("--config", type=Path, metavar="FILE.toml", help="settings file")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from sluice.relay import Relay, RelayConfig  # noqa: PLC0415 - keeps `tail` quick to start

    config = RelayConfig.load(
        args.config,
        source=args.source,
        tables=args.tables,
        port=args.port,
        host=args.host,
        data_dir=args.data_dir,
        since_scn=args.since_scn,
        buffer_size=args.buffer_size,
        window_files_bytes=args.window_files_bytes,
        on_decode_error=args.on_decode_error,
        max_clients=args.max_clients,
        name=args.name,
        links=_links(args.links),
        table_options=_file_table_options(args.config) if args.tables else None,
    )
    relay = Relay(config)

    def started() -> str:
        long_lived()  # the process is the relay: see core/process.py
        return f"sluice relay listening on http://{config.host}:{relay.port}"

    return asyncio.run(serve_until_signal(relay, started))


def _links(pairs: list[str] | None) -> dict[str, str] | None:
    if not pairs:
        return None
    out = {}
    for pair in pairs:
        name, sep, url = pair.partition("=")
        if not sep or not name.strip():
            from sluice.errors import ConfigError  # noqa: PLC0415 - keeps `tail` quick to start

            raise ConfigError(f"--link {pair!r}: expected NAME=URL, such as boot=http://h:7080/ui")
        out[name.strip()] = url.strip()
    return out


def _file_table_options(config_file: Path | None) -> dict[str, Any] | None:
    """``[tables."DB.T"]`` sections of the settings file: kept when ``--table`` also names
    tables (the flag's list would otherwise replace them)."""
    if config_file is None or not config_file.is_file():
        return None
    try:
        tables = tomllib.loads(config_file.read_text("utf-8")).get("tables")
    except (tomllib.TOMLDecodeError, UnicodeDecodeError):
        return None  # RelayConfig.load says what is wrong with the file
    return tables if isinstance(tables, dict) else None
