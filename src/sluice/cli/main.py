"""``sluice``: relay, tail, schema generate, demo. Errors print one sentence, never a traceback."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Callable, Sequence

from sluice.cli import bootstrap, demo, lake, registry, relay, schema, sink, state, tail
from sluice.cli.common import apply_password_file
from sluice.errors import ConfigError, Interrupted, SluiceError

log = logging.getLogger("sluice")

Command = Callable[[argparse.Namespace], int]


def _setup_logging(verbose: int) -> None:
    level = logging.DEBUG if verbose > 1 else logging.INFO if verbose else logging.WARNING
    level_name = os.environ.get("SLUICE_LOG_LEVEL")
    logging.basicConfig(
        level=level_name.upper() if level_name else level,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    logging.getLogger().addFilter(_py4j_noise)


def _py4j_noise(record: logging.LogRecord) -> bool:
    """Py4J logs a call Spark's JVM did not answer as an ERROR with a traceback, on the root
    logger: the JVM stopped (SIGTERM to the whole process group reaches it too) or died. The
    caller gets the failure as well, and says it in one sentence; the traceback shows at
    debug level (-vv) only."""
    if f"{os.sep}py4j{os.sep}" not in record.pathname:
        return True
    return logging.getLogger().isEnabledFor(logging.DEBUG)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        self.print_usage(sys.stderr)
        print(f"sluice: error: {message}", file=sys.stderr)
        raise SystemExit(2)  # bad arguments, as the README says


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="sluice", description="Change data capture for MySQL/MariaDB and PostgreSQL."
    )
    parser.add_argument(
        "-v", "--verbose", action="count", default=0, help="more logging on stderr (-vv for debug)"
    )
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    relay.add_parser(sub)
    tail.add_parser(sub)
    sink.add_parser(sub)
    schema.add_parser(sub)
    registry.add_parser(sub)
    bootstrap.add_parser(sub)
    lake.add_parser(sub)
    state.add_parser(sub)
    demo.add_parser(sub)
    entry = sub.add_parser(
        "spark-entry",
        help="print the path of the Python file spark-submit runs as sluice",
        description="spark-submit runs a Python file (the sluice console script is not one): "
        'spark-submit [options] "$(sluice spark-entry)" bootstrap run ...',
    )
    entry.set_defaults(run=_spark_entry)
    return parser


def _spark_entry(_args: argparse.Namespace) -> int:
    from sluice.cli.spark_submit import sluice_cli  # noqa: PLC0415 - its path only

    print(sluice_cli.__file__)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    _setup_logging(args.verbose)
    run: Command = args.run
    try:
        apply_password_file(args)
        return run(args)
    except KeyboardInterrupt:
        return 130
    except Interrupted as exc:
        print(f"sluice: stopped: {exc}", file=sys.stderr)
        return 130
    except ConfigError as exc:
        print(f"sluice: error: {exc}", file=sys.stderr)
        return 2
    except SluiceError as exc:
        print(f"sluice: error: {exc}", file=sys.stderr)
        return 1
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())
