"""``sluice bootstrap run``: the relay's events into the store's log (``logwriter.py``), folded
into snapshot generations by Spark, and seeding (Spark) where asked."""

from __future__ import annotations

import logging
import os
import re
import sys
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pyspark.errors import PySparkException
from pyspark.sql import SparkSession

from sluice.bootstrap.fold import blocked_by_gaps, fold
from sluice.bootstrap.health import UNHEALTHY_FAILURES, FoldStatus
from sluice.bootstrap.logwriter import LogWriter
from sluice.bootstrap.store import BootstrapStore
from sluice.capture.source import seed_jars
from sluice.core.names import schemas_path
from sluice.errors import SluiceError
from sluice.spark import register
from sluice.spark.fetch import Fetcher
from sluice.spark.http import get_json
from sluice.spark.options import parse_options

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class JobConfig:
    relays: tuple[str, ...]
    sources: tuple[str, ...]
    store: str
    since_scn: int | None = None
    master: str | None = None
    trigger_s: float = 2.0
    fold_every_s: float = 30.0
    once: bool = False  # read what the relay holds now, fold, and exit
    seed: str | None = None  # seed sources never seeded, from this database (its URL)
    seed_chunk_rows: int | None = None
    # Events per micro-batch: bounds the job's batches and what the bootstrap server holds
    # to serve one run of the log.
    max_events_per_trigger: int = 1_000_000
    quiet: bool = False  # Spark's own output to a log file (the CLI), not stderr


def spark_session(
    master: str | None = None,
    app: str = "sluice-bootstrap",
    *,
    quiet: bool = False,
    jars: tuple[str, ...] = (),
) -> Any:
    """A session tuned for small machines unless spark-submit already configured one.
    ``quiet``: the JVM's own output (start-up warnings, log4j) goes to a file, not stderr.
    ``jars``: JDBC drivers to load (they take effect only if this starts the JVM)."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    settings = {
        "spark.app.name": app,
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.shuffle.partitions": "4",
        "spark.sql.session.timeZone": "UTC",
    }
    if master or "SPARK_HOME" not in os.environ:
        settings["spark.master"] = master or "local[2]"
    if not master or master.startswith("local"):
        settings["spark.driver.host"] = "127.0.0.1"
    if jars:
        settings["spark.jars"] = ",".join(jars)
    if quiet:
        _quiet_gateway(settings)
    builder = SparkSession.builder
    for key, value in settings.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel(os.environ.get("SLUICE_SPARK_LOG_LEVEL", "ERROR"))
    return session


def _quiet_gateway(settings: dict[str, str]) -> None:
    """Start the JVM ourselves, its stdout/stderr into a log file (``SLUICE_SPARK_LOG``)."""
    from pyspark import SparkConf, SparkContext  # noqa: PLC0415
    from pyspark.java_gateway import launch_gateway  # noqa: PLC0415

    if SparkContext._gateway is not None or "PYSPARK_GATEWAY_PORT" in os.environ:
        return
    default = Path(tempfile.gettempdir()) / f"sluice-spark-{os.getpid()}.log"
    path = Path(os.environ.get("SLUICE_SPARK_LOG", str(default)))
    try:
        handle = path.open("ab")
    except OSError as exc:  # Spark then talks on stderr: noisy, not fatal
        log.warning("cannot write Spark's log to %s (%s); set SLUICE_SPARK_LOG", path, exc)
        return
    conf = SparkConf(loadDefaults=False).setAll(list(settings.items()))
    SparkContext._gateway = launch_gateway(  # type: ignore[no-untyped-call]
        conf, popen_kwargs={"stdout": handle, "stderr": handle}
    )
    SparkContext._jvm = SparkContext._gateway.jvm
    log.debug("Spark's own log: %s", path)


_SLUICE_ERROR = re.compile(r"sluice\.errors\.\w+: (.+)")


def spark_failure(what: str, exc: BaseException) -> SluiceError:
    """A Spark failure as one sentence: the Sluice error a worker raised, if there was one."""
    text = str(exc)
    found = _SLUICE_ERROR.findall(text)
    detail = found[-1].strip() if found else text.strip().splitlines()[0][:300]
    return SluiceError(f"{what}: {detail}")


def save_schemas(relays: tuple[str, ...], sources: tuple[str, ...], store: BootstrapStore) -> None:
    """Keep every schema version in the store, so its events stay decodable on their own.
    Versions only the store knows (a seed saw a table change first) are kept."""
    store.merge_schemas({s: get_json(relays[0], schemas_path(s))["versions"] for s in sources})


class BootstrapJob:
    """Start with ``run()``; ``stop()`` from another thread (or a signal) ends it."""

    def __init__(self, config: JobConfig, spark: Any | None = None) -> None:
        self.config = config
        self.store = BootstrapStore(config.store)
        self._spark = spark
        self._stop = threading.Event()
        self.log_writer: LogWriter | None = None
        self.error: BaseException | None = None
        self.seeded = config.seed is None  # True once its seed (if any) is published
        self._gap_warned = ""
        self._fold_status = FoldStatus(config.fold_every_s)

    def stop(self) -> None:
        self._stop.set()

    def _reader_options(self, start: int) -> dict[str, str]:
        return {
            # one reader (the log writer's thread), reading each micro-batch whole
            "partitions": "1",
            "relay": ",".join(self.config.relays),
            "sources": ",".join(self.config.sources),
            "startingScn": str(start),
            "includeRaw": "true",
            # A job that fell behind the relay's buffer (stopped for an hour, a burst bigger
            # than the buffer) reads the missing range from the source's binlog via the relay.
            "coldRead": "true",
            # The fold needs keys, not JSON images: the payload is kept whole in the log.
            "images": "false",
            # Where the source has purged those binlogs too, the log records a gap (and the
            # job seeds the tables again) rather than stopping for good.
            "markGaps": "true",
            "maxEventsPerTrigger": str(self.config.max_events_per_trigger),
        }

    def _prepare(self) -> int:
        options = self._reader_options(0)
        fetcher = Fetcher(parse_options(options))
        fetcher.check_sources()
        stats = fetcher.relay_stats()
        start = int(stats["min_scn"]) if self.config.since_scn is None else self.config.since_scn
        # A source new to an existing store is logged from the relay's newest SCN on (the
        # stream resumes from its checkpoint, which is no later); its older rows need a seed.
        meta = self.store.create(start, self.config.sources, new_source_start=int(stats["max_scn"]))
        return meta.log_start_scn

    def run(self) -> None:
        """Run until ``stop()``; a failure is raised and also kept in ``error``."""
        try:
            self._run()
        except PySparkException as exc:
            self.error = spark_failure("the bootstrap job failed", exc)
            raise self.error from None
        except BaseException as exc:
            self.error = exc
            raise

    def _run(self) -> None:
        start = self._prepare()
        jars = seed_jars(self.config.seed) if self.config.seed else ()
        # Spark folds and seeds; the log itself is written by the job's own thread.
        spark = self._spark or spark_session(self.config.master, quiet=self.config.quiet, jars=jars)
        register(spark)
        save_schemas(self.config.relays, self.config.sources, self.store)
        self.log_writer = LogWriter(
            self.store,
            self._reader_options(start),
            max_events=self.config.max_events_per_trigger,
            trigger_s=self.config.trigger_s,
            once=self.config.once,
        )
        self.log_writer.start()
        log.info("bootstrap job logging %s into %s", ",".join(self.config.sources), self.store.uri)
        try:
            if self.config.seed is not None:
                self._seed(spark)
            self._fold_status.started(self.store)
            self._loop(spark)
        finally:
            self.log_writer.stop()
        try:
            self._fold(spark)
        finally:
            self._fold_status.stopped(self.store)

    def _fold(self, spark: Any) -> None:
        """Fold (seeding past gaps first) and record how it went (``bootstrap/health.py``)."""
        try:
            save_schemas(self.config.relays, self.config.sources, self.store)
            self._seed_past_gaps(spark)
            fold(spark, self.store)
        except Exception as exc:
            self._fold_status.failed(self.store, exc)
            raise
        self._fold_status.worked(self.store)

    def _seed(self, spark: Any) -> None:
        """Seed every source the store has never seeded, now that the stream is in place (its
        log starts before any chunk is read, so the fold is exact)."""
        from sluice.bootstrap.seed.records import SeedRecords  # noqa: PLC0415

        records = SeedRecords(self.store)
        missing = tuple(s for s in self.config.sources if records.seeded(s) is None)
        if not missing:
            log.info("every source of %s is seeded already", self.store.uri)
        else:
            self._seed_sources(spark, missing)
        self.seeded = True

    def _seed_sources(self, spark: Any, sources: tuple[str, ...]) -> None:
        from sluice.bootstrap.seed.job import DEFAULT_CHUNK_ROWS, SeedConfig, SeedJob  # noqa: PLC0415

        assert self.config.seed is not None
        chunk_rows = self.config.seed_chunk_rows or DEFAULT_CHUNK_ROWS
        config = SeedConfig(self.config.seed, sources, self.store.uri, chunk_rows)
        job = SeedJob(config, progress=log.info)
        job.prepare()
        report = job.run(spark)
        log.info(
            "seeded %s: %d rows; snapshot at SCN %s",
            ", ".join(sources),
            report.rows,
            report.snapshot_scn,
        )

    def _seed_past_gaps(self, spark: Any) -> None:
        """A gap in the log (the source purged binlogs the job had not read) leaves the
        tables' state unknown: seed them again, or say what to do."""
        blocked = blocked_by_gaps(spark, self.store)
        if not blocked:
            return
        gaps = "; ".join(
            f"{s} after SCN {g.after_scn} up to {g.until_scn}" for s, g in blocked.items()
        )
        if self.config.seed is None:
            if self._gap_warned != gaps:
                self._gap_warned = gaps
                log.error(
                    "the log has a gap (%s): the source purged binlogs this job had not read. "
                    "No snapshot is published until the tables are seeded again: run `sluice "
                    "bootstrap seed %s`, or run this job with --seed URL to do it by itself",
                    gaps,
                    " ".join(f"--table {s}" for s in blocked),
                )
            return
        log.warning("the log has a gap (%s): seeding %s again", gaps, ", ".join(blocked))
        self._seed_sources(spark, tuple(blocked))

    def _fold_failed(self, exc: Exception) -> None:
        """A failed fold is retried at the next interval; meanwhile snapshots go stale, so
        it says so (a WARNING each time, and the store's fold status for the server)."""
        if not isinstance(exc, SluiceError):
            log.debug("fold failure", exc_info=exc)
        status = self._fold_status
        log.warning(
            "fold failed (%d in a row): %s; snapshots are going stale (the newest is at SCN "
            "%s); retrying in %.0f s%s",
            status.failures,
            status.error,
            self.store.current_snapshot(),
            self.config.fold_every_s,
            f"; the bootstrap server's /healthz answers 503 from {UNHEALTHY_FAILURES} in a row"
            if status.failures < UNHEALTHY_FAILURES
            else "; the bootstrap server's /healthz answers 503",
        )

    def _loop(self, spark: Any) -> None:
        writer = self.log_writer
        assert writer is not None
        if self.config.once:
            writer.wait()
        while not self.config.once and not self._stop.is_set() and writer.is_active:
            if self._stop.wait(self.config.fold_every_s):
                break
            try:
                self._fold(spark)
            except Exception as exc:
                self._fold_failed(exc)
        failure = writer.error
        if failure is not None:
            detail = str(failure).strip().splitlines()[0] if str(failure).strip() else repr(failure)
            raise SluiceError(f"the bootstrap log failed: {detail}") from failure
