"""``sluice schema generate``: the Avro schema of a live table."""

from __future__ import annotations

import argparse
import json
from typing import Any

from sluice.core.names import canonical_source


def add_parser(sub: Any) -> None:
    p = sub.add_parser("schema", help="schema tools")
    schema_sub = p.add_subparsers(dest="schema_command", required=True)
    gen = schema_sub.add_parser("generate", help="print the Avro schema of a live table")
    gen.add_argument("--source", required=True, help="mysql://USER[:PASSWORD]@HOST:PORT")
    gen.add_argument("--table", required=True, metavar="DB.TABLE")
    gen.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from sluice.capture import parse_source_url  # noqa: PLC0415 - keeps `tail` quick
    from sluice.capture.describe import describe_table  # noqa: PLC0415

    args.table = canonical_source(args.table)
    conn = parse_source_url(args.source).params().connect()
    try:
        schema = describe_table(conn, args.table)
    finally:
        conn.close()
    print(json.dumps(schema.to_avro(), indent=2))
    return 0
