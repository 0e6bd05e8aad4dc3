"""A MariaDB table's seed chunks for Spark's own JDBC source (the MariaDB Connector/J that
``make setup`` installs): the fast path of ``sluice bootstrap seed``.

Every connection Spark opens starts ``START TRANSACTION WITH CONSISTENT SNAPSHOT`` (its
``sessionInitStatement``), and the chunk's SELECT returns the ``binlog_snapshot_file`` /
``binlog_snapshot_position`` of that snapshot with every row: exactly the SCN the Python path
reads with ``SHOW STATUS`` (``seed.py``). The SELECT computes each column's canonical value in
SQL (days and microseconds since the epoch, unscaled decimals, zero dates as NULL), so Spark's
JDBC type mapping only ever sees BIGINT, DOUBLE, text and bytes: nothing is converted
through a JVM time zone. Kinds without such an expression (FLOAT, SET, BIT, TIME, YEAR,
BIGINT UNSIGNED, spatial types) keep the table on the Python path.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pymysql.converters import escape_item

from sluice.capture.mysql.binlog.protocol import ConnectParams
from sluice.capture.mysql.ranges import range_condition
from sluice.capture.seeding import JdbcChunks, KeyRange
from sluice.core.names import split_source
from sluice.errors import SourceSetupError
from sluice.schemas import Column, TableSchema
from sluice.schemas.arrow_encoder import arrow_encodable

DRIVER = "org.mariadb.jdbc.Driver"
# Debian's libmariadb-java (make setup installs it).
JARS = ("/usr/share/java/mariadb-java-client.jar",)
_STATUS = (
    "(SELECT VARIABLE_VALUE FROM information_schema.SESSION_STATUS "
    "WHERE VARIABLE_NAME = 'BINLOG_SNAPSHOT_{}')"
)
# The snapshot's SCN (``scn.make_scn``) computed by the server: one BIGINT per row is far
# cheaper through Spark's Arrow transfer than the file name's text.
SNAPSHOT_SCN = (
    f"CAST((CAST(SUBSTRING_INDEX({_STATUS.format('FILE')}, '.', -1) AS UNSIGNED) << 32) | "
    f"(CAST({_STATUS.format('POSITION')} AS UNSIGNED) & 4294967295) AS SIGNED)"
)
POSITION_COLUMNS = ("sluice_snapshot_scn",)
_EPOCH_DAYS = 719_528  # TO_DAYS('1970-01-01')
_EPOCH_MICROS = 62_167_219_200_000_000  # TO_SECONDS('1970-01-01 00:00:00') * 10**6


def jdbc_jars() -> tuple[str, ...]:
    return tuple(jar for jar in JARS if Path(jar).is_file())


def _ident(name: str) -> str:
    """A quoted identifier for SQL run as is (no PyMySQL ``%`` escaping)."""
    return "`" + name.replace("`", "``") + "`"


def _canonical(col: Column) -> str | None:
    """The SQL giving the column's canonical value (None: no such expression)."""
    c = _ident(col.name)
    if col.kind == "int":
        return f"CAST({c} AS SIGNED)"
    # TO_DAYS and TO_SECONDS give NULL for zero dates and zero date parts, as capture does,
    # and cost the server less than DATEDIFF / TIMESTAMPDIFF.
    if col.kind == "date":
        return f"CAST(TO_DAYS({c}) - {_EPOCH_DAYS} AS SIGNED)"
    if col.kind in ("datetime", "timestamp"):  # TIMESTAMP in the session's UTC
        return f"CAST(TO_SECONDS({c}) * 1000000 + MICROSECOND({c}) - {_EPOCH_MICROS} AS SIGNED)"
    if col.kind == "decimal":
        return f"CAST({c} * 1{'0' * col.scale} AS SIGNED)"
    if col.kind in ("double", "bytes"):
        return c
    if col.kind == "string" and not col.source_type.lower().startswith("char"):
        return c  # VARCHAR and TEXT arrive as they are (a CAST costs the server per row)
    if col.kind in ("string", "enum", "json", "uuid", "inet6"):
        # Their text as the text protocol sends it, typed VARCHAR: Spark pads what JDBC
        # reports as CHAR(n) (CHAR and ENUM columns) to n characters.
        return f"CAST({c} AS CHAR)"
    return None


def position_scn(position: tuple[Any, ...]) -> int:
    """The SCN ``SNAPSHOT_SCN`` gave (None: the server had no binlog snapshot position)."""
    (scn,) = position
    if scn is None:
        raise SourceSetupError(
            "the server gives no binlog_snapshot_file/position (the binary log is off): "
            "seeding needs MariaDB with --log-bin"
        )
    return int(scn)


def _literal_condition(key: Sequence[str], bounds: KeyRange) -> str:
    """A key range's condition with its bounds as SQL literals (Spark sends predicates as
    text). ``range_condition`` writes names with ``%`` doubled for PyMySQL's ``%``
    formatting; formatting it here undoes that."""
    condition, args = range_condition(key, bounds)
    return condition % tuple(escape_item(a, "utf8mb4") for a in args)


def jdbc_chunks(
    params: ConnectParams, schema: TableSchema, ranges: Sequence[KeyRange], where: str | None
) -> JdbcChunks | None:
    exprs = [_canonical(c) for c in schema.columns]
    jars = jdbc_jars()
    if not jars or not arrow_encodable(schema) or any(e is None for e in exprs):
        return None
    columns = tuple(f"sluice_c{i}" for i in range(len(exprs)))
    db, table = split_source(schema.source)
    select = [f"{e} AS {n}" for e, n in zip(exprs, columns, strict=True)]
    select.append(f"sluice_s.{POSITION_COLUMNS[0]}")
    select += [_ident(k) for k in schema.primary_key]  # what the chunks' predicates name
    condition = f" WHERE ({where})" if where else ""
    # The snapshot's position once per statement (a derived table), not once per row.
    position = f"(SELECT {SNAPSHOT_SCN} AS {POSITION_COLUMNS[0]}) sluice_s"
    derived = (
        f"(SELECT {', '.join(select)} FROM {_ident(db)}.{_ident(table)} "
        f"CROSS JOIN {position}{condition}) sluice_t"
    )
    properties = {
        "user": params.user,
        "password": params.password,
        "driver": DRIVER,
        "sessionVariables": "time_zone='+00:00',tx_isolation='REPEATABLE-READ'",
        "sessionInitStatement": "START TRANSACTION WITH CONSISTENT SNAPSHOT, READ ONLY",
        "fetchsize": "10000",  # streamed, not held whole: a chunk's memory stays bounded
        "connectTimeout": str(int(params.connect_timeout * 1000)),
    }
    predicates = tuple(_literal_condition(schema.primary_key, r) for r in ranges)
    return JdbcChunks(
        f"jdbc:mysql://{params.host}:{params.port}/",
        tuple(properties.items()),
        derived,
        columns,
        POSITION_COLUMNS,
        predicates,
        position_scn,
        DRIVER,
        jars,
    )
