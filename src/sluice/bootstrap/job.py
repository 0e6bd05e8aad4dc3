"""``sluice bootstrap run``: the relay's events into the store's log (``logwriter.py``), folded
into snapshot generations by Spark, and seeding (Spark) where asked."""

from __future__ import annotations

import logging
import os
import re
import socket
import sys
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from pyspark.errors import PySparkException
from pyspark.sql import SparkSession

from sluice.blocking_http import get_json
from sluice.bootstrap.fold import blocked_by_gaps, fold
from sluice.bootstrap.health import UNHEALTHY_FAILURES, FoldStatus
from sluice.bootstrap.logwriter import LogWriter
from sluice.bootstrap.store import BootstrapStore
from sluice.capture.source import seed_jars
from sluice.core.names import schemas_path
from sluice.errors import ConfigError, SluiceError
from sluice.spark import register
from sluice.spark.fetch import Fetcher
from sluice.spark.options import parse_options

if TYPE_CHECKING:
    from sluice.bootstrap.seed.job import Progress

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
    conf: dict[str, str] | None = None,
) -> Any:
    """A session tuned for small machines unless spark-submit already configured one.
    ``master``: ``local[N]``, ``spark://HOST:PORT``, or ``sc://HOST:PORT`` for a Spark Connect
    server (also taken from ``SPARK_REMOTE`` when no master is given).
    ``quiet``: the JVM's own output (start-up warnings, log4j) goes to a file, not stderr.
    ``jars``: JDBC drivers to load (they take effect only if this starts the JVM); ``conf``:
    more settings (a Connect server has its own: start it with them)."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    remote = master if master and master.startswith("sc://") else None
    if master is None and os.environ.get("SPARK_REMOTE", "").startswith("sc://"):
        remote = os.environ["SPARK_REMOTE"]
    if remote is not None:
        return _connect_session(remote, app, jars)
    # On one machine everything talks over 127.0.0.1; a cluster's executors must reach the
    # driver at an address spark-submit or Spark itself picks.
    local = master.startswith("local") if master else "SPARK_HOME" not in os.environ
    if local:
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    settings = {
        "spark.app.name": app,
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        **_RUNTIME,
    }
    if master or "SPARK_HOME" not in os.environ:
        settings["spark.master"] = master or "local[2]"
    if local:
        settings["spark.driver.host"] = "127.0.0.1"
    settings.update(conf or {})  # Delta's extension and catalog (sluice lake)...
    if jars:
        settings["spark.jars"] = ",".join(filter(None, (settings.get("spark.jars"), *jars)))
    if quiet:
        _quiet_gateway(settings)
    builder = SparkSession.builder
    for key, value in settings.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel(os.environ.get("SLUICE_SPARK_LOG_LEVEL", "ERROR"))
    _quiet_accumulator_server(session.sparkContext)
    return session


def _quiet_accumulator_server(context: Any) -> None:
    """PySpark's accumulator server (a thread of this process that Spark's JVM reports
    to) prints a traceback on stderr when the JVM goes away mid-connection, as when SIGTERM
    reaches the whole process group: it is logged at DEBUG instead. A failure that matters
    reaches the caller through Py4J anyway."""
    server = getattr(context, "_accumulatorServer", None)
    if server is not None:

        def handle_error(_request: object, address: object) -> None:
            log.debug("Spark's accumulator connection from %s failed", address, exc_info=True)

        server.handle_error = handle_error


# Settings a session may change at run time: the only ones a Spark Connect client can set.
_RUNTIME = {"spark.sql.shuffle.partitions": "4", "spark.sql.session.timeZone": "UTC"}


def _connect_session(remote: str, app: str, jars: tuple[str, ...]) -> Any:
    """A Spark Connect session. The server runs the jobs: the JDBC driver must be on its
    classpath (its ``--jars``); it is also sent as a session artifact."""
    check_connect_server(remote)
    session = SparkSession.builder.remote(remote).appName(app).getOrCreate()
    for key, value in _RUNTIME.items():
        session.conf.set(key, value)
    present = [j for j in jars if Path(j).is_file()]
    if present:
        try:
            session.addArtifacts(*present)
        except Exception as exc:  # the server may already have it: said, not fatal
            log.warning("could not send %s to the Spark Connect server: %s", present, exc)
    return session


def check_connect_server(remote: str, timeout_s: float = 10.0) -> None:
    """Refuse at once a Connect server nobody answers at: Spark's Connect client would retry
    for minutes without a word. Says host and port only (the URL may carry a token)."""
    parts = urlsplit(remote)
    try:
        host, port = parts.hostname, parts.port or 15002
    except ValueError:
        raise ConfigError(
            f"bad Spark Connect URL: the port of {parts.netloc!r} is not a number"
        ) from None
    if not host:
        raise ConfigError("bad Spark Connect URL: expected sc://HOST:PORT")
    try:
        socket.create_connection((host, port), timeout=timeout_s).close()
    except OSError as exc:
        raise ConfigError(
            f"cannot reach a Spark Connect server at {host}:{port} ({exc}); start one "
            "(pyspark's sbin/start-connect-server.sh) or fix --master / SPARK_REMOTE"
        ) from None


def is_connect(spark: Any) -> bool:
    """A Spark Connect session (no SparkContext: jobs are described and cancelled through
    the session itself)."""
    return type(spark).__module__.startswith("pyspark.sql.connect")


def describe_jobs(spark: Any, text: str) -> None:
    """The description Spark's UI shows for the next jobs (classic sessions only)."""
    if not is_connect(spark):
        spark.sparkContext.setJobDescription(text)


def cancel_jobs(spark: Any) -> None:
    if is_connect(spark):
        spark.interruptAll()
    else:
        spark.sparkContext.cancelAllJobs()


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


_RAISED = re.compile(r"^\s*(?::\s*|Caused by:\s*)?((?:\w+\.)*\w*(?:Error|Exception)): (.+)$")


def spark_failure(what: str, exc: BaseException) -> SluiceError:
    """A Spark failure as one sentence: the Sluice error a worker raised, if there was one,
    else the innermost exception a trace in it names (a ``foreachBatch`` failure arrives as
    Py4J's text of a Python traceback), else its first line."""
    text = str(exc).strip()
    found = _SLUICE_ERROR.findall(text)
    if found:
        return SluiceError(f"{what}: {found[-1].strip()}")
    raised = [m for line in text.splitlines() if (m := _RAISED.match(line))]
    if raised:
        name, message = raised[-1].groups()
        return SluiceError(f"{what}: {name.rsplit('.', 1)[-1]}: {message}"[:400])
    return SluiceError(f"{what}: {text.splitlines()[0][:300] if text else type(exc).__name__}")


def save_schemas(relays: tuple[str, ...], sources: tuple[str, ...], store: BootstrapStore) -> None:
    """Keep every schema version in the store, so its events stay decodable on their own.
    Versions only the store knows (a seed saw a table change first) are kept."""
    store.merge_schemas({s: get_json(relays[0], schemas_path(s))["versions"] for s in sources})


class BootstrapJob:
    """Start with ``run()``; ``stop()`` from another thread (or a signal) ends it."""

    def __init__(
        self, config: JobConfig, spark: Any | None = None, seed_progress: Progress | None = None
    ) -> None:
        """``seed_progress``: told how each seed goes (default: log lines)."""
        self.config = config
        self.store = BootstrapStore(config.store)
        self._spark = spark
        self._seed_progress = seed_progress
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
            try:
                if self.config.seed is not None:
                    self._seed(spark)
                self._fold_status.started(self.store)
                self._loop(spark)
            finally:
                self.log_writer.stop()
            try:
                self._fold(spark)  # the last one, up to where the log stopped
            finally:
                self._fold_status.stopped(self.store)
        except Exception as exc:
            if not self._stopped_with_spark(exc):
                raise
            self._fold_status.stopped(self.store)

    def _stopped_with_spark(self, exc: Exception) -> bool:
        """Whether Spark's work failed because the job is stopping: SIGTERM to the whole
        process group (systemd's stop) reaches Spark's JVM too, which then shuts down under
        the seed or the fold. The log is whole up to where it stopped; the next run folds."""
        writer = self.log_writer
        if not self._stop.is_set() or (writer is not None and writer.error is not None):
            return False
        detail = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else repr(exc)
        log.info("stopped without a last fold (Spark stopped too: %s); the next run folds", detail)
        log.debug("Spark's failure while stopping", exc_info=exc)
        return True

    def _fold(self, spark: Any) -> None:
        """Fold (seeding past gaps first) and record how it went (``bootstrap/health.py``);
        a fold cut short by the job's stop is not counted as failed."""
        try:
            save_schemas(self.config.relays, self.config.sources, self.store)
            self._seed_past_gaps(spark)
            fold(spark, self.store)
        except Exception as exc:
            if not self._stop.is_set():
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
        from sluice.bootstrap.seed import job as seed  # noqa: PLC0415

        assert self.config.seed is not None
        chunk_rows = self.config.seed_chunk_rows or seed.DEFAULT_CHUNK_ROWS
        config = seed.SeedConfig(self.config.seed, sources, self.store.uri, chunk_rows)
        if self._seed_progress is None:
            job = seed.SeedJob(config, progress=seed.log_progress)
        else:  # a display: counts every second
            job = seed.SeedJob(config, progress=self._seed_progress, progress_every_s=1.0)
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
                if self._stop.is_set():  # stopping: Spark may be stopping with the job
                    raise
                self._fold_failed(exc)
        failure = writer.error
        if failure is not None:
            detail = str(failure).strip().splitlines()[0] if str(failure).strip() else repr(failure)
            raise SluiceError(f"the bootstrap log failed: {detail}") from failure
