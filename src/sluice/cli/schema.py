"""``sluice schema generate``: the Avro schema of a live table."""

from __future__ import annotations

import argparse
import json
from typing import Any

from sluice.cli.common import add_password_file
from sluice.core.names import canonical_source


def add_parser(sub: Any) -> None:
    p = sub.add_parser("schema", help="schema tools")
    schema_sub = p.add_subparsers(dest="schema_command", required=True)
    gen = schema_sub.add_parser("generate", help="print the Avro schema of a live table")
    gen.add_argument(
        "--source", required=True, help="a source URL (mysql://... or postgresql://...)"
    )
    gen.add_argument("--table", required=True, metavar="DB.TABLE")
    add_password_file(gen)
    gen.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from sluice.capture import describe  # noqa: PLC0415 - keeps `tail` quick

    schema = describe(args.source, canonical_source(args.table))
    print(json.dumps(schema.to_avro(), indent=2))
    return 0
