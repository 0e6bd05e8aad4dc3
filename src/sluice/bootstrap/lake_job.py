"""``sluice lake run``: a Spark Structured Streaming job that keeps Delta tables merged with a
relay's tables (SCD1 or SCD2), one query per source, exactly once (``sluice.spark.lake``).

Each query reads the ``sluice`` source's typed rows of its table, from the bootstrap server's
snapshot when one is given (a new table starts from every row, then the log, then the relay,
as ``bootstrap run`` does), and MERGEs each micro-batch with Delta's transaction identifiers
(``txnAppId`` = ``sluice-lake:NAME:SOURCE``, ``txnVersion`` = the batch id). Spark's checkpoint
(``--checkpoint DIR/SOURCE``) says which batch comes next; a batch the driver committed to Delta
before it died is run again by Spark and skipped by Delta.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sluice.blocking_http import get_json
from sluice.bootstrap.job import spark_failure
from sluice.core.names import schemas_path, split_source
from sluice.errors import ConfigError
from sluice.spark import register
from sluice.spark.lake import Mode, app_version, apply_changes

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class LakeConfig:
    relays: tuple[str, ...]
    sources: tuple[str, ...]
    target: str  # a path template: {db}, {table}, {source}
    checkpoint: str
    mode: Mode = "scd1"
    name: str = "lake"
    bootstrap: str | None = None
    trigger_s: float = 2.0
    max_events_per_trigger: int = 1_000_000
    once: bool = False  # read what there is now (availableNow), then exit
    partitions: int = 2  # tasks reading each micro-batch
    keys: dict[str, tuple[str, ...]] = field(default_factory=dict)  # per source, overrides

    def path(self, source: str) -> str:
        db, table = split_source(source)
        try:
            return self.target.removeprefix("delta:").format(db=db, table=table, source=source)
        except (KeyError, IndexError, ValueError) as exc:
            raise ConfigError(
                f"--to {self.target!r}: a path template takes {{db}}, {{table}}, {{source}} "
                f"({exc})"
            ) from None

    def app_id(self, source: str) -> str:
        return f"sluice-lake:{self.name}:{source}"


def check_targets(config: LakeConfig) -> None:
    paths = [config.path(s) for s in config.sources]
    if len(set(paths)) != len(paths):
        raise ConfigError(
            f"--to {config.target!r} names the same table for several sources: put {{table}} "
            "(and {db}) in it"
        )


def primary_key(relays: tuple[str, ...], source: str) -> tuple[str, ...]:
    """The source table's primary key, from the relay's newest schema version."""
    versions = get_json(relays[0], schemas_path(source))["versions"]
    if not versions:
        raise ConfigError(f"the relay has no schema for {source}")
    return tuple(versions[-1].get("sluice.primary_key") or ())


class LakeJob:
    """``run(spark)`` until ``stop()`` (or, ``once``, until every query read what there was)."""

    def __init__(self, config: LakeConfig) -> None:
        check_targets(config)
        self.config = config
        self._stop = threading.Event()
        self.queries: dict[str, Any] = {}

    def stop(self) -> None:
        self._stop.set()

    def run(self, spark: Any) -> dict[str, int | None]:
        """The batches each source's query committed (its last batch id) when it ended."""
        # A foreachBatch that fails is Py4J's to log, with its trace, as an ERROR; the failure
        # reaches run() as the query's exception too, and is said there in one sentence
        logging.getLogger("py4j.clientserver").setLevel(logging.CRITICAL)
        for source in self.config.sources:
            self.queries[source] = self._start(spark, source)
        try:
            while not self._stop.is_set():
                if all(not q.isActive for q in self.queries.values()):
                    break
                for source, query in self.queries.items():
                    failure = query.exception()
                    if failure is not None:
                        raise spark_failure(f"the lake query of {source} failed", failure)
                self._stop.wait(0.5)
        finally:
            for query in self.queries.values():
                _stop_between_batches(query)
        for source, query in self.queries.items():
            failure = query.exception()
            if failure is not None:
                raise spark_failure(f"the lake query of {source} failed", failure)
        return {s: app_version(spark, self.config.path(s), self.config.app_id(s))
                for s in self.config.sources}  # fmt: skip

    def _start(self, spark: Any, source: str) -> Any:
        config = self.config
        keys = config.keys.get(source) or primary_key(config.relays, source)
        path = config.path(source)
        if not keys:
            raise ConfigError(
                f"{source} has no primary key: a lake table is merged by key; name its key "
                f"columns with --key {source}=COL[,COL]"
            )
        checkpoint = str(Path(config.checkpoint) / source)
        app = config.app_id(source)
        self._check_checkpoint(spark, path, checkpoint, app)
        stream = change_stream(
            query_session(spark), config.relays, source, bootstrap=config.bootstrap,
            partitions=config.partitions, max_events=config.max_events_per_trigger,
        )  # fmt: skip

        def merge(batch: Any, batch_id: int) -> None:
            done = apply_changes(batch, batch_id, path, keys=keys, mode=config.mode, app_id=app)
            if done is not None:
                log.info("lake %s: batch %d, %d changes up to SCN %d into %s",
                         source, batch_id, done.changes, done.scn, path)  # fmt: skip

        writer = stream.writeStream.foreachBatch(merge).option(
            "checkpointLocation", checkpoint
        )
        if config.once:
            writer = writer.trigger(availableNow=True)
        else:
            writer = writer.trigger(processingTime=f"{config.trigger_s} seconds")
        log.info("lake %s -> %s (%s, keys %s)", source, path, config.mode, ", ".join(keys))
        return writer.queryName(f"sluice-lake-{config.name}-{source}").start()

    @staticmethod
    def _check_checkpoint(spark: Any, path: str, checkpoint: str, app: str) -> None:
        """A table this job's name wrote to, with Spark's checkpoint gone, would see every
        batch id again and Delta would skip them all as repeats: refuse."""
        committed = app_version(spark, path, app)
        offsets = Path(checkpoint) / "offsets"
        started = offsets.is_dir() and any(offsets.iterdir())
        if committed is not None and not started and "://" not in checkpoint:
            raise ConfigError(
                f"Delta table {path} holds batches up to {committed} of {app}, but the "
                f"checkpoint {checkpoint} is new: Delta would skip its batches as repeats. "
                "Use the checkpoint that wrote them, or a new --name (it starts over from "
                "the snapshot)"
            )


def query_session(spark: Any) -> Any:
    """A session of its own for one query (Delta's transaction identifiers are session
    settings, and several queries run at once), with the ``sluice`` source."""
    session = spark.newSession()
    register(session)
    return session


def change_stream(
    session: Any,
    relays: tuple[str, ...],
    source: str,
    *,
    bootstrap: str | None = None,
    partitions: int = 2,
    max_events: int = 1_000_000,
) -> Any:
    """The typed change stream of one table, as ``sluice lake run`` reads it."""
    reader = (
        session.readStream.format("sluice")
        .option("relay", ",".join(relays))
        .option("sources", source)
        .option("typed", "true")
        .option("coldRead", "true")
        # whole windows in SCN runs per task: a key's changes of one SCN stay together, in
        # order (apply_changes orders by SCN, then place in the batch)
        .option("partitions", str(partitions))
        .option("split", "scn")
        .option("maxEventsPerTrigger", str(max_events))
    )
    if bootstrap:
        return reader.option("bootstrap", bootstrap).option("startingScn", "0").load()
    return reader.option("startingScn", "earliest").load()


def _stop_between_batches(query: Any, wait_s: float = 120.0) -> None:
    """Stop a query once its running batch (if any) is done: stopping it mid-batch
    interrupts the MERGE inside Spark (an internal error in its log, the batch run again)."""
    deadline = time.monotonic() + wait_s
    while query.isActive and query.status.get("isTriggerActive") and time.monotonic() < deadline:
        time.sleep(0.1)
    if query.isActive:
        query.stop()
