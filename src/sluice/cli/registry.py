"""``sluice registry``: a Confluent-compatible schema registry over a data directory."""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path
from typing import Any

from sluice.cli.common import serve_until_signal
from sluice.errors import ConfigError


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "registry",
        help="run a Confluent-compatible schema registry (for Kafka's Avro serializers)",
        description="Serve the schema registry REST calls Kafka's Avro serializers and "
        "deserializers make (Confluent's API, Avro schemas). Subjects, versions and ids are "
        "kept in --data-dir and survive restarts. Compatibility levels are stored, not "
        "enforced. SIGINT/SIGTERM stop it.",
    )
    p.add_argument("--port", type=_port, default=8081, help="HTTP port (default 8081; 0: any)")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    p.add_argument("--data-dir", type=Path, required=True, help="where the schemas are kept")
    p.set_defaults(run=run)


def _port(text: str) -> int:
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port number: {text!r}") from None
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"a port is 0-65535, got {port}")
    return port


def run(args: argparse.Namespace) -> int:
    try:
        import fastavro  # noqa: F401, PLC0415 - checks schemas; in the kafka extra
    except ImportError:
        raise ConfigError("sluice registry needs fastavro: pip install 'sluice[kafka]'") from None
    from sluice.registry import RegistryServer  # noqa: PLC0415 - keeps `tail` quick to start

    server = RegistryServer(args.data_dir, host=args.host, port=args.port)
    return asyncio.run(
        serve_until_signal(server, lambda: f"sluice registry listening on {server.url}")
    )
