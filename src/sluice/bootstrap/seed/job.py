"""``sluice bootstrap seed``: a Spark batch job that reads tables' current rows into the store.

The driver checks everything and plans the chunks (no Spark, nothing written on bad input),
then runs one Spark task per chunk still missing; each task writes its chunk's file itself,
so a killed seed resumes from the chunks already done. Then it folds, publishing a snapshot
generation that holds every seeded row.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from sluice.bootstrap.fold import blocked_by_gaps, check_coverage, fold
from sluice.bootstrap.job import describe_jobs
from sluice.bootstrap.seed.chunk import ChunkResult, ChunkTask, run_chunks
from sluice.bootstrap.seed.jdbc import read_chunks
from sluice.bootstrap.seed.records import ChunkDone, Seeded, SeedPlan, SeedRecords
from sluice.bootstrap.store import BootstrapStore, Gap
from sluice.capture.seeding import ChunkReader, JdbcChunks, Seeder
from sluice.capture.source import open_seeder
from sluice.errors import ConfigError, SourceError, SourceSetupError
from sluice.schemas import TableSchema

log = logging.getLogger(__name__)
DEFAULT_CHUNK_ROWS = 250_000


@dataclass(frozen=True, slots=True)
class SeedConfig:
    source: str = field(repr=False)  # the source URL (it may hold a password)
    tables: tuple[str, ...]
    store: str
    chunk_rows: int = DEFAULT_CHUNK_ROWS
    where: str | None = None
    # False: no chunk through Spark's JDBC source (the fast path), every one by the row path
    jdbc: bool = True


@dataclass(frozen=True, slots=True)
class SeedReport:
    seeded: tuple[Seeded, ...]
    chunks_read: int
    snapshot_scn: int | None
    seconds: float
    read_seconds: float = 0.0  # of which reading chunks (the rest: planning, publishing)
    # sources still behind a log gap: no snapshot with the seeded rows until they are seeded
    blocked: tuple[Gap, ...] = ()
    jdbc_chunks: int = 0  # of the chunks read, those Spark's JDBC source read (the fast path)

    @property
    def rows(self) -> int:
        return sum(s.rows for s in self.seeded)


@dataclass(frozen=True, slots=True)
class SeedProgress:
    """Where a seed is. ``phase``: "planning", "starting" (planned; Spark and the first chunks
    to come), "reading", "publishing" (the fold) or "done". ``chunks`` and ``rows`` count the
    chunks done, those of a run resumed included; ``total`` the chunks planned."""

    phase: str
    chunks: int = 0
    total: int = 0
    rows: int = 0


Progress = Callable[[SeedProgress], None]


def log_progress(progress: SeedProgress) -> None:
    """Progress as log lines, for a seed with no display to feed."""
    log.info(
        "seed %s: %d/%d chunks, %d rows",
        progress.phase,
        progress.chunks,
        progress.total,
        progress.rows,
    )


class SeedJob:
    """``prepare()`` checks and plans (raises ``ConfigError`` on bad input, writing nothing);
    ``run(spark)`` reads the missing chunks, records the seeds and folds. ``progress`` is
    told each phase and, while chunks are read, the counts every ``progress_every_s``."""

    def __init__(
        self,
        config: SeedConfig,
        progress: Progress | None = None,
        progress_every_s: float = 3.0,
    ) -> None:
        if config.chunk_rows < 1:
            raise ConfigError(f"--chunk-rows must be at least 1, got {config.chunk_rows}")
        self.config = config
        self.store = BootstrapStore(config.store)
        self.records = SeedRecords(self.store)
        self.progress = progress
        self.progress_every_s = progress_every_s
        self._counter = _DoneCounter(self.records)
        self.plans: list[SeedPlan] = []
        self.schemas: dict[str, TableSchema] = {}
        self.seeder: Seeder | None = None
        self.reader: ChunkReader | None = None
        self.jdbc: dict[str, JdbcChunks] = {}  # sources Spark's JDBC source can read
        self.jdbc_read = 0
        # per source: chunks its JDBC path left to the row path, and why
        self.fallbacks: dict[str, tuple[int, str]] = {}

    # -- checks and plans (driver only) -------------------------------------------------------
    def prepare(self) -> list[SeedPlan]:
        """Check and plan; the seeder stays open (its snapshot with it) until ``close()``."""
        meta = self.store.meta()
        unknown = [t for t in self.config.tables if t not in meta.sources]
        if unknown:
            raise ConfigError(
                f"store {self.store.uri} does not capture {', '.join(unknown)} (it holds "
                f"{', '.join(meta.sources)}); seed a store whose `bootstrap run` streams them"
            )
        self.report("planning")
        try:
            self.seeder = open_seeder(self.config.source)
            self._plan_all(self.seeder, min(meta.start_of(t) for t in self.config.tables))
            self.reader = self.seeder.snapshot()
            self.report("starting")
        except SourceSetupError as exc:  # login, privileges, table: the user's input to fix
            self.close()
            raise ConfigError(str(exc), source=exc.source) from None
        except BaseException:
            self.close()
            raise
        return self.plans

    def close(self) -> None:
        """Release the source (an exported snapshot ends here)."""
        if self.seeder is not None:
            self.seeder.close()
            self.seeder = None

    def _plan_all(self, seeder: Seeder, log_start: int) -> None:
        now = seeder.end_scn()
        if log_start > now:
            raise ConfigError(
                f"store {self.store.uri} was made from another server (its log starts after "
                f"SCN {log_start}, beyond this server's end {now}); seed a store fed "
                "by a relay of this server"
            )
        known = self.store.read_schemas()
        for table in self.config.tables:
            versions = [TableSchema.from_avro(v) for v in known.get(table, [])]
            schema = _resolve_version(seeder.table(table, self.config.where), versions)
            self.schemas[table] = schema
            plan = self._plan(seeder, schema)
            self.plans.append(plan)
            chunks = seeder.jdbc_chunks(schema, plan.ranges, plan.where)
            if chunks is not None and self.config.jdbc:
                self.jdbc[table] = chunks
            elif chunks is not None:
                log.info("seed of %s: every chunk through the row path (--no-jdbc)", table)
        # The store learns a seeded table's current schema if the relay has not seen it yet.
        self.store.merge_schemas({t: [s.to_avro()] for t, s in self.schemas.items()}, keep=True)

    def _plan(self, seeder: Seeder, schema: TableSchema) -> SeedPlan:
        source, cfg = schema.source, self.config
        generations = self.records.generations(source)
        seeded = self.records.seeded(source)
        if generations and (seeded is None or seeded.generation != generations[-1]):
            plan = self.records.plan(source, generations[-1])
            if plan is not None and plan.same_request(schema.version, cfg.chunk_rows, cfg.where):
                done = len(self.records.done(source, plan.generation))
                log.info(
                    "resuming seed of %s: %d of %d chunks done", source, done, len(plan.ranges)
                )
                self.records.mark_run(source, plan.generation)
                return plan
        generation = (generations[-1] + 1) if generations else 1
        ranges = tuple(seeder.plan(schema, cfg.chunk_rows))
        plan = SeedPlan(source, generation, schema.version, cfg.chunk_rows, cfg.where, ranges)
        self.records.write_plan(plan)
        return plan

    # -- the Spark part -----------------------------------------------------------------------
    def tasks(self) -> list[ChunkTask]:
        if self.reader is None:
            raise SourceError("the seed is not prepared (or was closed): prepare() first")
        out = []
        for plan in self.plans:
            done = self.records.done(plan.source, plan.generation)
            for index, bounds in enumerate(plan.ranges):
                if index not in done:
                    out.append(
                        ChunkTask(
                            self.store.uri,
                            self.reader,
                            self.schemas[plan.source],
                            plan.generation,
                            index,
                            bounds,
                            plan.where,
                        )
                    )
        return out

    def run(self, spark: Any) -> SeedReport:
        started = time.monotonic()
        if not self.plans:
            self.prepare()
        try:
            tasks = self.tasks()
            reading = time.monotonic()
            if tasks:
                self._run_tasks(spark, tasks)
            read_s = time.monotonic() - reading
            jdbc = self.jdbc_read
        finally:
            self.close()
        self.report("publishing")
        seeded = tuple(self._finish(plan) for plan in self.plans)
        snapshot = fold(spark, self.store)
        blocked = tuple(blocked_by_gaps(spark, self.store).values())
        seconds = time.monotonic() - started
        self.report("done")
        return SeedReport(seeded, len(tasks), snapshot, seconds, read_s, blocked, jdbc)

    def report(self, phase: str) -> None:
        """Tell ``progress`` the phase and the counts (best effort: the job reports real
        failures itself)."""
        if self.progress is None:
            return
        try:
            chunks, rows = self._counter.count(self.plans)
            total = sum(len(p.ranges) for p in self.plans)
            self.progress(SeedProgress(phase, chunks, total, rows))
        except Exception:
            log.debug("progress report failed", exc_info=True)

    def _run_tasks(self, spark: Any, tasks: list[ChunkTask]) -> None:
        watcher = _ProgressWatcher(self)
        watcher.start()
        try:
            results = self._read_jdbc(spark, tasks)
            self.jdbc_read = len(results)
            finished = {(r.source, r.index) for r in results}
            rest = [t for t in tasks if (t.schema.source, t.index) not in finished]
            if rest:
                describe_jobs(spark, f"sluice seed: {len(rest)} chunks")
                results += run_chunks(spark, rest)
        finally:
            watcher.stop()
        log.info("seed read %d chunks, %d rows", len(results), sum(r.rows for r in results))

    def _read_jdbc(self, spark: Any, tasks: list[ChunkTask]) -> list[ChunkResult]:
        """Chunks of the sources with a JDBC path, read by Spark's own JDBC source; the
        chunks it could not read go to the row path, which is said and recorded."""
        results: list[ChunkResult] = []
        for source, chunks in self.jdbc.items():
            mine = [t for t in tasks if t.schema.source == source]
            if not mine:
                continue
            describe_jobs(spark, f"sluice seed: {source}, JDBC")
            try:
                read, why = read_chunks(spark, chunks, mine)
            except SourceSetupError as exc:  # the account: the user's input to fix
                raise ConfigError(str(exc), source=exc.source) from None
            results += read
            if why is not None:
                left = len(mine) - len(read)
                self.fallbacks[source] = (self.fallbacks.get(source, (0, ""))[0] + left, why)
                log.warning(
                    "seed of %s: %d of %d chunks go through the row path (about 4x slower than "
                    "Spark's JDBC source) because %s",
                    source,
                    left,
                    len(mine),
                    why,
                )
        return results

    def _finish(self, plan: SeedPlan) -> Seeded:
        done = self.records.done(plan.source, plan.generation)
        missing = [i for i in range(len(plan.ranges)) if i not in done]
        if missing:
            raise SourceError(f"seed of {plan.source} lacks chunks {missing[:5]}: run it again")
        seeded = Seeded(
            plan.source,
            plan.generation,
            min(d.scn for d in done.values()),
            max(d.scn for d in done.values()),
            sum(d.rows for d in done.values()),
            len(plan.ranges),
            time.time(),
            *self.fallbacks.get(plan.source, (0, None)),
        )
        check_coverage(self.store, seeded)
        current = self.records.seeded(plan.source)
        if current is None or current.generation != plan.generation:
            self.records.mark_seeded(seeded)
            return seeded
        return current


def _resolve_version(schema: TableSchema, known: list[TableSchema]) -> TableSchema:
    """The store's version with the table's shape (newest first, as the relay's registry
    picks), else the next version."""
    for held in reversed(known):
        if held.same_shape(schema):
            return held
    version = max((v.version for v in known), default=0) + 1
    return TableSchema(schema.source, version, schema.columns, schema.primary_key)


class _DoneCounter:
    """Chunks and rows done so far, from the store's chunk records (so it sees what every
    executor finished); a record is read once, as the watcher asks every second or so."""

    def __init__(self, records: SeedRecords) -> None:
        self.records = records
        self._known: dict[tuple[str, int], dict[int, ChunkDone]] = {}

    def count(self, plans: list[SeedPlan]) -> tuple[int, int]:
        chunks = rows = 0
        for plan in plans:
            key = (plan.source, plan.generation)
            done = self.records.done(plan.source, plan.generation, self._known.get(key))
            self._known[key] = done
            chunks += len(done)
            rows += sum(d.rows for d in done.values())
        return chunks, rows


class _ProgressWatcher:
    """Reports "reading" with the counts every ``job.progress_every_s`` while chunks are read."""

    def __init__(self, job: SeedJob) -> None:
        self.job = job
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="seed-progress", daemon=True)

    def start(self) -> None:
        if self.job.progress is not None:
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)
            self.job.report("reading")

    def _run(self) -> None:
        self.job.report("reading")
        while not self._stop.wait(self.job.progress_every_s):
            self.job.report("reading")
