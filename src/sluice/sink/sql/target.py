"""``SqlTarget``: applies each window to the replica in one transaction that also writes the
sink's checkpoint row, so a SIGKILL anywhere repeats or loses nothing.

Tables are made from Sluice's schemas on first sight (``CREATE TABLE IF NOT EXISTS`` with the
source's key) and grow by ``ADD COLUMN`` when a new schema version brings columns; DDL runs
before the window's transaction (MariaDB commits on DDL), and is idempotent, so a crash
between the two only repeats it. A snapshot starting over (a new sink, or one that fell behind
the bootstrap log) first clears every table the sink has written, in its first window's
transaction. The driver is blocking: all work runs on one thread of its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

from sluice.core.checkpoint import Checkpoint, Snapshot, decode_checkpoint, encode_checkpoint
from sluice.errors import ConfigError, SluiceError
from sluice.schemas.arrow_decoder import ArrowDecoder
from sluice.schemas.avro import TableSchema
from sluice.sink.config import SinkConfig
from sluice.sink.sql import fence
from sluice.sink.sql.bulk import BulkKeyed, HeldColumns, bulk_steps
from sluice.sink.sql.connect import DatabaseUrl, connect, is_down, parse_database_url, refusal
from sluice.sink.sql.copy import copy_upsert
from sluice.sink.sql.engines import Convert, MariaDB, Postgres, Sqlite
from sluice.sink.sql.partition import clear_partition
from sluice.sink.sql.plan import Clear, KeyedChanges, KeylessChange, Step, plan
from sluice.sink.target import Batch, Change, Delivery, HeldWindowsLost, TargetUnavailable

log = logging.getLogger(__name__)
T = TypeVar("T")
Prepared = Future[list[BulkKeyed]]  # a columnar group's statements, decoded on the prep thread
CHECKPOINT_TABLE = "sluice_sink_checkpoint"
PAGE = 1000


class _Replay(TargetUnavailable):
    """DDL was needed inside a big window on an engine where DDL commits: the window is
    rolled back and read again from its first piece (the DDL is in place by then)."""


@dataclasses.dataclass(frozen=True, slots=True)
class _Group:
    """Held windows taken for one transaction."""

    changes: list[Change]
    columns: HeldColumns | None
    checkpoint: Checkpoint | None
    windows: int


class SqlTarget:
    kind: str  # the engine's name
    delivery: Delivery = "exactly-once"
    keeps_checkpoint = True
    wants_bodies = False
    takes_columns = True  # whole windows as payload spans: decoded per group with Arrow

    def __init__(self, config: SinkConfig) -> None:
        self.commit_rows = config.commit_rows
        self.url: DatabaseUrl = parse_database_url(config.target_url)
        self.engine = self.url.engine
        self.kind = self.engine.name
        self.name = config.name
        self.partition = config.partition  # a key partition I/N of the stream (a group's)
        self.timeout_s = config.timeout_s
        self._thread = ThreadPoolExecutor(1, thread_name_prefix=f"sink-{self.kind}")
        # A held columnar group is decoded here (``bulk_steps``) while the group before it is
        # written on ``_thread``: the two overlap (Arrow, numpy and the drivers' I/O release
        # the GIL); writes stay in order on ``_thread``.
        self._prep = ThreadPoolExecutor(1, thread_name_prefix=f"sink-{self.kind}-prep")
        self._conn: Any = None
        self._columns: dict[str, set[str]] = {}  # target table -> its columns (seen or made)
        self._keys: dict[str, list[tuple[str, str]]] = {}  # table -> its key (name, kind)
        self._converters: dict[tuple[str, int], tuple[list[str], list[Convert]]] = {}
        self.committed: Checkpoint | None = None
        self._fence: tuple[int, int] | None = None  # a group's (epoch, partition): fence.py
        self._written: set[str] = set()  # tables this sink has written (cleared on re-snapshot)
        # On the target's thread: a big window's transaction, open between its pieces.
        self._open = False
        self._mid = False
        self._poisoned = False  # a held group failed: what was queued behind it must not commit
        # On the loop: whole windows held in memory until ``commit`` applies them together
        # in one transaction with the newest one's checkpoint (their net effect per key).
        self._buffer: list[Change] = []
        self._held_columns: HeldColumns | None = None  # or columnar windows (never both)
        self._decoders: dict[tuple[str, int], ArrowDecoder] = {}
        self._buffered = 0  # windows in the buffer
        self._committing = 0  # windows whose transaction is running now
        self._held_rows = 0
        self._held_checkpoint: Checkpoint | None = None
        self._inflight: asyncio.Task[None] | None = None  # a group committing meanwhile
        self._ready: set[tuple[str, int, str]] = set()  # (source, version, route) with DDL done
        self.commits = 0
        self.bulk_windows = 0  # windows applied through the columnar (Arrow) path
        self.statements = 0
        self.rows = 0
        self.copied_rows = 0  # of them, upserted through COPY (PostgreSQL bulk groups)
        self.literal_rows = 0  # or as literals Arrow wrote (MariaDB bulk groups)
        self.ddl = 0
        self.reconnects = 0

    def describe(self) -> str:
        return self.url.describe()

    def stats(self) -> dict[str, Any]:
        return {
            "commits": self.commits,
            "bulk_windows": self.bulk_windows,
            "held_windows": self.held,
            "statements": self.statements,
            "copied_rows": self.copied_rows,
            "literal_rows": self.literal_rows,
            "rows": self.rows,
            "ddl": self.ddl,
            "reconnects": self.reconnects,
            "tables": sorted(self._written),
        }

    # -- lifecycle ---------------------------------------------------------------------------
    async def start(self) -> None:
        await self._run(self._connect)

    async def stop(self) -> None:
        with contextlib.suppress(SluiceError):
            await self._settle()  # what it held is read again next time
        await self._run(self._close)
        self._thread.shutdown(wait=True)
        self._prep.shutdown(wait=True)

    async def load_checkpoint(self) -> Checkpoint | None:
        return await self._run(self._load)

    async def fence(self, epoch: int, partition: int) -> None:
        """A group member's partition: take its checkpoint row with ``epoch`` (before
        ``load_checkpoint``); every commit from now on is refused once the epoch moved on."""
        self._fence = (epoch, partition)

        def take() -> None:
            conn = self._connection()
            self._begin(conn)
            table = self._qualified(CHECKPOINT_TABLE)
            fence.take(self.engine, conn.cursor(), table, self.name, epoch, partition)
            conn.commit()

        await self._run(take)

    async def save_checkpoint(self, checkpoint: Checkpoint) -> None:
        if self.held:
            return  # the next commit writes a newer checkpoint anyway

        def save() -> bool:
            if self._open or self._poisoned:
                return False  # inside a big window: its commit writes a newer checkpoint
            conn = self._connection()
            self._begin(conn)
            self._write_checkpoint(conn.cursor(), checkpoint)
            conn.commit()
            return True

        if await self._run(save):
            self.committed = checkpoint  # on the loop, as every other change of it

    async def deliver(self, batch: Batch) -> None:
        plain = batch.first and batch.last and self._plain(batch)
        if batch.columns is not None and not plain:  # DDL or a snapshot start: per event
            batch = dataclasses.replace(batch, changes=batch.columns.rows(), columns=None)
            plain = self._plain(batch)
        if plain:
            if not self._fits(batch):  # what is held commits first, in its own transaction
                await self._settle()
                self._commit_in_background()
            self._hold(batch)
            self._buffered += 1
            self._held_rows += batch.events
            self._held_checkpoint = batch.checkpoint or self._held_checkpoint
            if self._held_rows >= self.commit_rows:
                # the group commits while the next windows are shaped; it is queued (and
                # decoded) while the group before it, if any, is still being written
                await self._commit_behind()
            return
        await self.commit()  # the windows before it, in their own transaction
        await self._run(lambda: self._apply(batch))
        if batch.last and batch.checkpoint is not None:
            # set here, on the loop, not in the worker thread: /stats must never show the
            # window's checkpoint before the sink has counted the window
            self.committed = batch.checkpoint

    async def _settle(self) -> None:
        """Wait for the group in flight; its failure is raised here."""
        inflight, self._inflight = self._inflight, None
        if inflight is not None and not inflight.cancelled():  # cancelled: the sink stops
            await inflight

    def _plain(self, batch: Batch) -> bool:
        """A window that needs no DDL and starts no snapshot: it can wait in memory."""
        if self._snapshot_starts(batch.checkpoint):
            return False
        if batch.columns is not None:
            parts = batch.columns.parts
            return all((p.source, p.schema.version, p.route) in self._ready for p in parts)
        return all(
            c.schema is None or (c.source, c.schema.version, c.route) in self._ready
            for c in batch.changes
        )

    def _fits(self, batch: Batch) -> bool:
        """Whether the window can join the held ones: rows and columnar windows are held
        apart (their order matters per table), and one schema version per table."""
        if batch.columns is None:
            return self._held_columns is None
        held = self._held_columns
        return not self._buffer and (held is None or held.fits(batch.columns))

    def _hold(self, batch: Batch) -> None:
        if batch.columns is None:
            self._buffer.extend(batch.changes)
            return
        if not self.bulk_windows:
            log.info("replica %s: windows go in bulk (decoded with Arrow)", self.describe())
        self.bulk_windows += 1
        if self._held_columns is None:
            self._held_columns = HeldColumns()
        table_of = {p.source: self._qualified(p.route) for p in batch.columns.parts}
        self._held_columns.add(batch.columns, table_of)

    @property
    def held(self) -> int:
        """Windows taken and not yet committed (buffered, or in a running commit); a group
        whose background commit failed counts until ``commit`` raises its failure (else the
        windows it lost would go unnoticed once no more windows come)."""
        task = self._inflight
        failed = task is not None and task.done() and not task.cancelled() and task.exception()
        return self._buffered + self._committing + int(bool(failed))

    async def commit(self) -> None:
        """Apply and commit the windows held in memory, in one transaction."""
        await self._settle()
        group = self._take()
        if group is not None:
            try:
                await self._committed(group, self._send(group))
            finally:
                self._committing -= group.windows

    def _commit_in_background(self) -> None:
        group = self._take()
        if group is not None:
            # Sent to the thread now, as it is taken: sent when the task first ran, a group a
            # commit() took meanwhile (the timer's, while _settle awaited) went first, and
            # this one's TRUNCATE or older values then overwrote the newer rows.
            task = asyncio.create_task(self._committed(group, self._send(group)))
            # counted out when the task ends, even one cancelled before it first ran
            task.add_done_callback(lambda _task: self._counted_out(group.windows))
            self._inflight = task

    async def _commit_behind(self) -> None:
        """Send the held group now, queued behind the one in flight (two in flight at most),
        then wait for that one: its failure is raised here, and poisons this one (it is
        counted held until its own task ends, so the sink reads both again)."""
        before, self._inflight = self._inflight, None
        self._commit_in_background()
        if before is not None and not before.cancelled():
            await before

    def _counted_out(self, windows: int) -> None:
        self._committing -= windows

    def _take(self) -> _Group | None:
        """The held windows, out of the buffer at once (so a window that comes while their
        commit waits to start cannot join them)."""
        if not self._buffered:
            return None
        group = _Group(self._buffer, self._held_columns, self._held_checkpoint, self._buffered)
        self._discard()
        self._committing += group.windows
        return group

    def _send(self, group: _Group) -> asyncio.Future[None]:
        """A taken group to the target's thread (columnar groups decoded first, on the prep
        thread, meanwhile)."""
        steps = None
        if group.columns is not None:
            columns = group.columns
            steps = self._prep.submit(bulk_steps, columns, self.engine, self._decoders)
        return self._submit(lambda: self._apply_held(group.changes, steps, group.checkpoint))

    async def _committed(self, group: _Group, sent: asyncio.Future[None]) -> None:
        await self._outcome(sent, held=group.windows)
        if group.checkpoint is not None:
            self.committed = group.checkpoint  # on the loop: /stats sees it with the count

    def _discard(self) -> None:
        self._buffer, self._held_columns = [], None
        self._buffered = self._held_rows = 0
        self._held_checkpoint = None

    async def rollback(self) -> None:
        with contextlib.suppress(SluiceError):
            await self._settle()  # a group in flight is lost with the rest
        self._discard()  # only ever a lost group here: a failing commit raised already

        def rollback() -> None:
            self._open = self._mid = self._poisoned = False
            if self._conn is not None:
                try:
                    self._conn.rollback()
                except Exception:  # a dead connection: drop it, the next call reconnects
                    self._drop()

        await self._run(rollback)

    async def _run(self, work: Callable[[], T]) -> T:
        """Run on the target's thread (see ``_outcome``)."""
        return await self._outcome(self._submit(work))

    def _submit(self, work: Callable[[], T]) -> asyncio.Future[T]:
        """``work`` queued on the target's thread now (its jobs run in the order queued)."""
        return asyncio.get_running_loop().run_in_executor(self._thread, work)

    async def _outcome(self, sent: asyncio.Future[T], held: int = 0) -> T:
        """A job sent to the target's thread, awaited; driver errors become
        ``TargetUnavailable`` (down: retried; ``HeldWindowsLost`` when ``held`` windows went
        with the transaction) or ``ConfigError`` (refused: the sink stops)."""
        try:
            return await sent
        except SluiceError:
            self._thread.submit(self._forget)
            raise
        except Exception as exc:
            self._thread.submit(self._forget)
            if is_down(exc):
                self._thread.submit(self._drop)
                if held:
                    self._discard()  # windows buffered since are behind the lost ones
                    raise HeldWindowsLost(refusal(exc, self.url)) from None
                raise TargetUnavailable(refusal(exc, self.url)) from None
            raise ConfigError(refusal(exc, self.url)) from None

    def _forget(self) -> None:
        """The open transaction is gone (rolled back, or the connection with it)."""
        if self._conn is not None:
            with contextlib.suppress(Exception):
                self._conn.rollback()
        self._open = self._mid = False

    # -- on the thread -------------------------------------------------------------------------
    def _connect(self) -> None:
        if self._conn is not None:
            return
        conn = connect(self.url, self.timeout_s)
        self._conn = conn
        self.reconnects += 1
        self._columns.clear()
        cur = conn.cursor()
        if isinstance(self.engine, Postgres) and self.url.schema:
            cur.execute(f"CREATE SCHEMA IF NOT EXISTS {self.engine.quote(self.url.schema)}")
        q, table = self.engine.quote, self._qualified(CHECKPOINT_TABLE)
        try:
            cur.execute(
                f"CREATE TABLE IF NOT EXISTS {table} ("
                f"{q('name')} VARCHAR(190) NOT NULL PRIMARY KEY, {q('checkpoint')} TEXT NOT NULL, "
                f"{q('tables')} TEXT NOT NULL, {q('epoch')} BIGINT NOT NULL DEFAULT 0)"
            )
            conn.commit()
        except Exception:
            conn.rollback()  # PostgreSQL: two sessions making it at once (a group's partitions)
            if self._existing(conn.cursor(), table) is None:
                raise
            conn.rollback()
        fence.add_epoch_column(self.engine, conn, self._qualified(CHECKPOINT_TABLE))

    def _close(self) -> None:
        if self._conn is not None:
            try:
                self._conn.close()
            finally:
                self._conn = None

    def _drop(self) -> None:
        try:
            self._close()
        except Exception:
            self._conn = None

    def _connection(self) -> Any:
        if self._conn is None:
            self._connect()
        return self._conn

    def _begin(self, conn: Any) -> None:
        if isinstance(self.engine, Sqlite):
            conn.execute("BEGIN IMMEDIATE")

    def _load(self) -> Checkpoint | None:
        cur = self._connection().cursor()
        p = self.engine.param
        cur.execute(
            f"SELECT {self.engine.quote('checkpoint')}, {self.engine.quote('tables')} "
            f"FROM {self._qualified(CHECKPOINT_TABLE)} WHERE {self.engine.quote('name')} = {p}",
            (self.name,),
        )
        row = cur.fetchone()
        self._conn.commit()
        if row is None or row[0] == fence.NO_CHECKPOINT:
            return None
        where = f"the checkpoint row {self.name!r} in {self.describe()}"
        self.committed = decode_checkpoint(str(row[0]), where=where)
        self._written = set(json.loads(row[1]))
        return self.committed

    def _write_checkpoint(self, cur: Any, checkpoint: Checkpoint) -> None:
        table = self._qualified(CHECKPOINT_TABLE)
        q, p = self.engine.quote, self.engine.param
        values = (self.name, encode_checkpoint(checkpoint), json.dumps(sorted(self._written)))
        if self._fence is not None:
            epoch, partition = self._fence
            fence.write(self.engine, cur, table, self.name, epoch, partition, values[1:])
            return
        cur.execute(f"DELETE FROM {table} WHERE {q('name')} = {p}", (self.name,))
        cur.execute(
            f"INSERT INTO {table} ({q('name')}, {q('checkpoint')}, {q('tables')}) "
            f"VALUES ({p}, {p}, {p})",
            values,
        )

    def _apply(self, batch: Batch) -> None:
        """A window (or piece) that needs DDL, starts a snapshot, or is big: on its own."""
        self._check_poison()
        conn = self._connection()
        table_of = {c.source: self._qualified(c.route) for c in batch.changes}
        ddl = self._ddl(conn, batch.changes)
        if ddl:
            self._schema_change(conn, ddl)
        if not self._open:
            self._begin(conn)
            self._open = True
        self._mid = not batch.last
        cur = conn.cursor()
        steps: list[Step] = plan(batch.changes, table_of)
        if self._snapshot_starts(batch.checkpoint):
            steps = [Clear(t) for t in sorted(self._written)] + steps
        for step in steps:
            self._step(cur, step)
        self._written.update(table_of.values())
        self._ready.update((c.source, c.schema.version, c.route) for c in batch.changes if c.schema)
        if batch.last:
            if batch.checkpoint is not None:
                self._write_checkpoint(cur, batch.checkpoint)
            conn.commit()
            self.commits += 1
            self._open = self._mid = False

    def _apply_held(
        self, changes: list[Change], steps: Prepared | None, checkpoint: Checkpoint | None
    ) -> None:
        """Windows held in memory, as one transaction: their net effect, the checkpoint."""
        self._check_poison()
        try:
            self._commit_group(changes, steps, checkpoint)
        except BaseException:
            self._poisoned = True  # jobs already queued behind this one are after its windows
            raise

    def _check_poison(self) -> None:
        if self._poisoned:
            raise HeldWindowsLost("windows before these were lost; reading them again")

    def _commit_group(
        self, changes: list[Change], steps: Prepared | None, checkpoint: Checkpoint | None
    ) -> None:
        bulks = steps.result() if steps is not None else None  # before the transaction opens
        conn = self._connection()
        self._begin(conn)
        self._open = True
        cur = conn.cursor()
        if bulks is not None:
            for bulk in bulks:
                self._bulk(cur, bulk)
                self._written.add(bulk.table)
        else:
            table_of = {c.source: self._qualified(c.route) for c in changes}
            for step in plan(changes, table_of):
                self._step(cur, step)
            self._written.update(table_of.values())
        if checkpoint is not None:
            self._write_checkpoint(cur, checkpoint)
        conn.commit()
        self.commits += 1
        self._open = False

    def _schema_change(self, conn: Any, ddl: list[tuple[str, str]]) -> None:
        """DDL before the window's statements; inside a big window, an engine whose DDL
        commits rolls the window back and reads it again."""
        if self._mid and self.engine.ddl_commits:
            conn.rollback()
            self._open = self._mid = False
            self._run_ddl(conn, ddl, commit=True)
            raise _Replay("a schema change inside a big window: reading it again")
        self._run_ddl(conn, ddl, commit=not self._open)

    def _snapshot_starts(self, checkpoint: Checkpoint | None) -> bool:
        if not isinstance(checkpoint, Snapshot):
            return False
        done = self._held_checkpoint or self.committed
        return not (isinstance(done, Snapshot) and done.scn == checkpoint.scn)

    # -- statements ---------------------------------------------------------------------------
    def _step(self, cur: Any, step: Step) -> None:
        engine = self.engine
        if isinstance(step, Clear) and self.partition is not None:  # a group's partition
            index, count = (int(x) for x in self.partition.split("/"))
            if step.table in self._columns or self._existing(cur, step.table) is not None:
                keys = self._keys.get(step.table)
                clear_partition(engine, cur, step.table, keys, (index, count))
            return
        if isinstance(step, Clear):
            if step.table in self._columns or self._existing(cur, step.table) is not None:
                self._execute(cur, engine.clear_sql(step.table), [()])
            return
        if isinstance(step, KeylessChange):
            self._keyless(cur, step)
            return
        self._keyed(cur, step)

    def _keyed(self, cur: Any, step: KeyedChanges) -> None:
        engine = self.engine
        deletes = step.deletes()
        if deletes:
            schema_key = list(step.key)
            converters = self._key_converters(step)
            rows = [[c(v) if v is not None else None for c, v in zip(converters, row, strict=True)]
                    for row in deletes]  # fmt: skip
            self._execute(cur, engine.delete_sql(step.table, schema_key), rows)
        for schema, images in step.upserts():
            names, converters = self._converters_of(schema)
            rows = [_convert(converters, image) for image in images]
            sql = engine.upsert_sql(step.table, names, schema.primary_key)
            if isinstance(engine, Postgres):
                self._execute_values(cur, sql, rows)
            else:
                self._execute(cur, sql, rows)

    def _bulk(self, cur: Any, step: BulkKeyed) -> None:
        """A held group's net effect on one table: the statements ``_keyed`` runs."""
        key = list(step.schema.primary_key)
        if step.deletes:
            self._execute(cur, self.engine.delete_sql(step.table, key), step.deletes)
        if step.copy is not None:  # a PostgreSQL group's rows as CSV: COPY, then one upsert
            assert isinstance(self.engine, Postgres)
            names = [c.name for c in step.schema.columns]
            copy_upsert(cur, self.engine, step.table, names, key, step.copy)
            self.statements += 1
            self.rows += step.copy.rows
            self.copied_rows += step.copy.rows
        if step.values is not None:  # a MariaDB group's rows as SQL literals Arrow wrote
            assert isinstance(self.engine, MariaDB)
            names = [c.name for c in step.schema.columns]
            before, after = self.engine.upsert_parts(step.table, names, key)
            for chunk in step.values.chunks:
                cur.execute(before + chunk + after)  # no parameters: PyMySQL formats nothing
            self.statements += len(step.values.chunks)
            self.rows += step.values.rows
            self.literal_rows += step.values.rows
        if step.upserts:
            names = [c.name for c in step.schema.columns]
            sql = self.engine.upsert_sql(step.table, names, key)
            if isinstance(self.engine, Postgres):
                self._execute_values(cur, sql, step.upserts)
            else:
                self._execute(cur, sql, step.upserts)

    def _key_converters(self, step: KeyedChanges) -> list[Convert]:
        names, converters = self._converters_of(step.schema)
        return [converters[names.index(k)] for k in step.key]

    def _keyless(self, cur: Any, step: KeylessChange) -> None:
        names, converters = self._converters_of(step.schema)
        if step.delete is not None:
            values = _convert(converters, step.delete)
            nulls = [v is None for v in values]
            sql = self.engine.delete_one_sql(step.table, names, nulls)
            params = values if not isinstance(self.engine, Postgres) else [
                v for v in values if v is not None
            ]  # fmt: skip
            self._execute(cur, sql, [params])
        if step.insert is not None:
            sql = self.engine.insert_sql(step.table, names)
            self._execute(cur, sql, [_convert(converters, step.insert)])

    def _converters_of(self, schema: TableSchema) -> tuple[list[str], list[Convert]]:
        cached = self._converters.get((schema.source, schema.version))
        if cached is None:
            names = [c.name for c in schema.columns]
            converters = [self.engine.converter(c) for c in schema.columns]
            cached = self._converters[(schema.source, schema.version)] = (names, converters)
        return cached

    def _execute(self, cur: Any, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        self.statements += 1
        self.rows += len(rows)
        if len(rows) == 1:
            if rows[0]:
                cur.execute(sql, rows[0])
            else:
                cur.execute(sql)
        elif isinstance(self.engine, Postgres):
            import psycopg2.extras  # noqa: PLC0415

            psycopg2.extras.execute_batch(cur, sql, rows, page_size=PAGE)
        else:
            cur.executemany(sql, rows)

    def _execute_values(self, cur: Any, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        import psycopg2.extras  # noqa: PLC0415

        self.statements += 1
        self.rows += len(rows)
        psycopg2.extras.execute_values(cur, sql, rows, page_size=PAGE)

    # -- tables ---------------------------------------------------------------------------------
    def _qualified(self, table: str) -> str:
        q = self.engine.quote
        if isinstance(self.engine, Postgres) and self.url.schema:
            return f"{q(self.url.schema)}.{q(table)}"
        return q(table)

    def _ddl(self, conn: Any, changes: Sequence[Change]) -> list[tuple[str, str]]:
        """Statements that make the batch's tables and columns exist: (table, sql)."""
        needed: list[tuple[str, str]] = []
        seen: set[tuple[str, int]] = set()
        for change in changes:
            schema = change.schema
            if schema is None or (change.source, schema.version) in seen:
                continue
            seen.add((change.source, schema.version))
            table = self._qualified(change.route)
            kinds = {c.name: c.kind for c in schema.columns}
            self._keys[table] = [(name, kinds[name]) for name in sorted(schema.primary_key)]
            columns = self._columns.get(table)
            if columns is None:
                columns = self._existing(conn.cursor(), table)
            if columns is None:
                sql = self.engine.create_table(table, schema.columns, schema.primary_key)
                needed.append((table, sql))
                self._columns[table] = {c.name for c in schema.columns}
                continue
            self._columns[table] = columns
            for col in schema.columns:
                if col.name not in columns:
                    needed.append((table, self.engine.add_column(table, col)))
                    columns.add(col.name)
        return needed

    def _run_ddl(self, conn: Any, ddl: list[tuple[str, str]], *, commit: bool) -> None:
        cur = conn.cursor()
        for table, sql in ddl:
            log.info("replica %s: %s", self.describe(), sql)
            try:
                cur.execute(sql)
            except Exception as exc:
                self._columns.pop(table, None)  # look again next time
                conn.rollback()
                self._open = self._mid = False
                if self._existing(conn.cursor(), table) is not None:
                    conn.rollback()
                    # another writer (a group's other partitions) made it at the same moment
                    raise TargetUnavailable(f"{sql[:60]}... raced another writer: {exc}") from exc
                raise
            self.ddl += 1
        if commit:
            conn.commit()

    def _existing(self, cur: Any, table: str) -> set[str] | None:
        """The table's columns, or None when there is no such table."""
        name = self._bare(table)
        if isinstance(self.engine, Sqlite):
            cur.execute(f"PRAGMA table_info({table})")
            rows = cur.fetchall()
        elif isinstance(self.engine, Postgres):
            cur.execute(
                "SELECT column_name FROM information_schema.columns "
                "WHERE table_schema = %s AND table_name = %s",
                (self.url.schema or "public", name),
            )
            rows = [(None, r[0]) for r in cur.fetchall()]
        else:
            cur.execute(
                "SELECT column_name FROM information_schema.columns "
                "WHERE table_schema = DATABASE() AND table_name = %s",
                (name,),
            )
            rows = [(None, r[0]) for r in cur.fetchall()]
        return {str(r[1]) for r in rows} if rows else None

    def _bare(self, qualified: str) -> str:
        """The unquoted table name of a qualified, quoted one."""
        last = qualified.rsplit(".", 1)[-1] if isinstance(self.engine, Postgres) else qualified
        quote = last[0]
        return last[1:-1].replace(quote * 2, quote)


def _convert(converters: Sequence[Convert], image: Sequence[Any]) -> list[Any]:
    return [None if v is None else c(v) for c, v in zip(converters, image, strict=True)]

