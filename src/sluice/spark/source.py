"""The ``sluice`` PySpark data source: streaming and batch reads of a relay.

Offsets are ``{"scn": N, "phase": "log"}``: the batch ``(start, end]`` holds the whole windows
with ``start < SCN <= end``. With a bootstrap server, a first offset ``{"phase": "snapshot"}``
makes the first batch the snapshot (``r`` rows at the snapshot's SCN); later batches read the
log after it, from the relay or, while the relay no longer holds it, from the bootstrap server.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from itertools import pairwise
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    InputPartition,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from sluice.core.pieces import Piece
from sluice.errors import BootstrapRequired
from sluice.spark.fetch import Fetcher
from sluice.spark.options import SourceOptions, parse_options
from sluice.spark.rows import (
    DEBEZIUM_DDL,
    GENERIC_DDL,
    RAW_DDL,
    GenericRows,
    Rows,
    chunks,
    gap_markers,
    typed_ddl,
)


@dataclass(frozen=True)
class ScnRange(InputPartition):
    start: int
    end: int
    index: int
    count: int
    snapshot: bool = False
    gap_after: int | None = None  # a gap marker: no relay or binlog holds (gap_after, end]


class _Reading:
    """What the stream and batch readers share: options, the fetcher, reading partitions."""

    def __init__(self, options: SourceOptions, typed_schema: Any) -> None:
        self.options = options
        self.fetcher = Fetcher(options)
        self.typed_schema = typed_schema
        self._debezium: Any = None  # a DebeziumWindows once a worker reads

    def _rows(self, snapshot: bool) -> Rows:
        # Imported here, in the executors' workers: the driver's reader process (offsets,
        # partitions) starts before a query's first batch and needs none of them.
        from sluice.schemas.debezium import DebeziumOptions, DebeziumWindows  # noqa: PLC0415
        from sluice.spark.arrowdbz import FastDebeziumRows  # noqa: PLC0415
        from sluice.spark.arrowrows import FastGenericRows, FastTypedRows  # noqa: PLC0415
        from sluice.spark.logrows import LogRows  # noqa: PLC0415

        op = "r" if snapshot else None
        if self.options.debezium is not None:
            if self._debezium is None:
                settings = DebeziumOptions.parse(dict(self.options.debezium))
                self._debezium = DebeziumWindows(self.fetcher.source_info(), settings)
            return FastDebeziumRows(self._debezium, op)
        options = self.options
        if self.typed_schema is not None:
            # decoded per batch with Arrow (tuples too: the batch's rows as tuples)
            return FastTypedRows(self.typed_schema, op)
        if options.include_raw and not options.images and options.arrow:
            return LogRows(op)  # the bootstrap log: its fast path
        if options.images:
            return FastGenericRows(op, options.include_raw)
        return GenericRows(options.include_raw, op, images=options.images)

    def _read(self, part: ScnRange) -> Iterator[pa.RecordBatch]:
        if part.gap_after is not None:
            batch = gap_markers(self._sources(), part.gap_after, part.end)
            if self.options.arrow:
                yield batch
            else:
                yield from zip(*(c.to_pylist() for c in batch.columns), strict=True)
            return
        windows: Iterator[bytes | Piece]
        if part.snapshot:
            windows = iter(self.fetcher.snapshot_windows(part.index, part.count))
        else:
            windows = self.fetcher.windows(part.start, part.end, part.index, part.count)
        yield from chunks(
            self._rows(part.snapshot), windows, self.fetcher.codec, self.options.arrow
        )

    def _sources(self) -> list[str]:
        if self.options.sources:
            return list(self.options.sources)
        return self.fetcher.relay_sources()

    def _gap(self, since: int, oldest: int) -> dict[str, Any] | None:
        """With ``markGaps``: the offset past a range that neither a relay's buffer nor its
        source's binlog holds any more (the batch up to it is one gap marker per source)."""
        if not self.options.mark_gaps or since <= 0:
            return None
        if since >= oldest or self.fetcher.source_holds(since):
            return None
        return {"scn": oldest, "phase": "log", "gap_after": since}

    def _split(self, start: int, end: int, snapshot: bool = False) -> list[ScnRange]:
        n = self.options.partitions
        if n > 1 and not snapshot and self.options.split == "scn":
            cuts = self.fetcher.scn_cuts(start, end, n)
            if cuts is not None:
                bounds = [start, *cuts, end]
                return [ScnRange(a, b, 0, 1) for a, b in pairwise(bounds)]
        return [ScnRange(start, end, i, n, snapshot) for i in range(n)]

    def _starting_offset(self) -> dict[str, Any]:
        self.fetcher.check_sources()
        stats = self.fetcher.relay_stats()
        starting = self.options.starting
        if starting == "earliest":
            scn = int(stats["min_scn"])
        elif starting == "latest":
            scn = int(stats["max_scn"])
        else:
            scn = int(starting)
        if self.options.bootstrap and (scn == 0 or scn < int(stats["min_scn"])):
            boot = self.fetcher.bootstrap_stats()
            if scn == 0 or scn < int(boot["log_start_scn"]):
                return {"scn": 0, "phase": "snapshot"}
        elif scn < int(stats["min_scn"]) and not (self.options.cold_read and scn > 0):
            raise BootstrapRequired(
                f"startingScn {scn} is older than the relay holds (oldest {stats['min_scn']}); "
                "set option bootstrap, or startingScn=earliest",
                scn=scn,
            )
        return {"scn": scn, "phase": "log"}

    def _available(self) -> int:
        stats = self.fetcher.relay_stats()
        return int(stats["max_scn"])


class SluiceStreamReader(_Reading, DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, options: SourceOptions, typed_schema: Any) -> None:
        super().__init__(options, typed_schema)
        self._target: int | None = None

    def initialOffset(self) -> dict[str, Any]:  # noqa: N802
        return self._starting_offset()

    def getDefaultReadLimit(self) -> ReadLimit:  # noqa: N802
        if self.options.max_events:
            return ReadMaxRows(self.options.max_events)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:  # noqa: N802
        self._target = self._available()

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:  # noqa: N802
        if start.get("phase") == "snapshot":
            return {"scn": int(self.fetcher.bootstrap_stats()["snapshot_scn"]), "phase": "log"}
        since = int(start["scn"])
        stats = self.fetcher.relay_stats()  # one call: the stream may be stopping
        gap = self._gap(since, int(stats["min_scn"]))
        if gap is not None:
            return gap
        latest = int(stats["max_scn"]) if self._target is None else self._target
        if latest <= since:
            return start
        cold = self.options.cold_read and since < int(stats["min_scn"])
        if isinstance(limit, ReadMaxRows) and cold:
            # /offsets counts only what the buffer holds: the range older than it (a cold read
            # from the source's log) is one batch, up to the buffer's start.
            latest = min(latest, int(stats["min_scn"]))
        elif isinstance(limit, ReadMaxRows):
            found = self.fetcher.offset_after(since, limit.max_rows)
            latest = min(latest, int(found["scn"]))
        return {"scn": max(latest, since), "phase": "log"}

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[ScnRange]:
        if start.get("phase") == "snapshot":
            return self._split(0, int(end["scn"]), snapshot=True)
        if "gap_after" in end:
            return [ScnRange(int(start["scn"]), int(end["scn"]), 0, 1, gap_after=end["gap_after"])]
        return self._split(int(start["scn"]), int(end["scn"]))

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, ScnRange)
        return self._read(partition)

    def commit(self, end: dict[str, Any]) -> None:
        """Spark's checkpoint records progress; the relay keeps no per-reader state."""


class SluiceBatchReader(_Reading, DataSourceReader):
    def partitions(self) -> Sequence[ScnRange]:
        start = self._starting_offset()
        ending = self.options.ending or "latest"
        end = self._available() if ending == "latest" else int(ending)
        parts: list[ScnRange] = []
        if start["phase"] == "snapshot":
            snapshot_scn = int(self.fetcher.bootstrap_stats()["snapshot_scn"])
            parts += self._split(0, snapshot_scn, snapshot=True)
            start = {"scn": snapshot_scn}
        if end > int(start["scn"]):
            parts += self._split(int(start["scn"]), end)
        return parts

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, ScnRange)
        return self._read(partition)


class SluiceDataSource(DataSource):
    """``spark.readStream.format("sluice").option("relay", URL)...``; see the README."""

    @classmethod
    def name(cls) -> str:
        return "sluice"

    def _options(self) -> SourceOptions:
        return parse_options(dict(self.options))

    def _typed(self, options: SourceOptions) -> Any:
        if not options.typed:
            return None
        return Fetcher(options).schema(options.sources[0])

    def schema(self) -> str:
        options = self._options()
        typed = self._typed(options)
        if typed is not None:
            return typed_ddl(typed)
        if options.debezium is not None:
            Fetcher(options).check_debezium()
            return DEBEZIUM_DDL
        return GENERIC_DDL + (RAW_DDL if options.include_raw else "")

    def streamReader(self, schema: StructType) -> SluiceStreamReader:  # noqa: N802
        options = self._options()
        return SluiceStreamReader(options, self._typed(options))

    def reader(self, schema: StructType) -> SluiceBatchReader:
        options = self._options()
        return SluiceBatchReader(options, self._typed(options))
