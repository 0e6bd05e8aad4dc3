"""The ceiling of any PySpark Python data source here: one that yields pre-built Arrow
batches of the bootstrap log's columns (no decoding, no I/O) written to Parquet, against
Spark's own Parquet -> Parquet of the same rows, in batch mode and as one streaming
micro-batch (availableNow, as the `sluice` source is measured). The bootstrap log and the
`sluice` source cannot be faster than this ceiling while they go through the Python Data
Source API."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    InputPartition,
)

from sluice.spark.rows import GENERIC_ARROW, GENERIC_DDL, RAW_ARROW, RAW_DDL

_BATCH = 8192


class _Half(InputPartition):
    def __init__(self, rows: int) -> None:
        self.rows = rows


class _Reader(DataSourceReader):
    def __init__(self, rows: int) -> None:
        self.rows = rows

    def partitions(self) -> list[_Half]:
        return [_Half(self.rows // 2), _Half(self.rows - self.rows // 2)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, _Half)
        batch = _log_batch(_BATCH)
        for start in range(0, partition.rows, _BATCH):
            yield batch.slice(0, min(_BATCH, partition.rows - start))


class _StreamReader(DataSourceStreamReader):
    """One micro-batch of ``rows`` pre-built rows, in two partitions."""

    def __init__(self, rows: int) -> None:
        self.rows = rows

    def initialOffset(self) -> dict[str, int]:  # noqa: N802
        return {"n": 0}

    def latestOffset(self) -> dict[str, int]:  # noqa: N802
        return {"n": self.rows}

    def partitions(self, start: dict[str, int], end: dict[str, int]) -> list[_Half]:
        rows = end["n"] - start["n"]
        return [_Half(rows // 2), _Half(rows - rows // 2)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return _Reader(0).read(partition)


class PrebuiltArrowSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "sluice_ceiling"

    def schema(self) -> str:
        return GENERIC_DDL + RAW_DDL

    def reader(self, schema: Any) -> _Reader:
        return _Reader(int(self.options.get("rows", "1000000")))

    def streamReader(self, schema: Any) -> _StreamReader:  # noqa: N802
        return _StreamReader(int(self.options.get("rows", "1000000")))


def _log_batch(n: int) -> pa.RecordBatch:
    schema = pa.schema([pa.field(name, kind) for name, kind in GENERIC_ARROW + RAW_ARROW])
    columns = [
        pa.array(np.arange(n, dtype=np.int64)),
        pa.array(["bench.t"] * n, pa.string()),
        pa.array(["c"] * n, pa.string()),
        pa.array(np.zeros(n, dtype=np.int64)).cast(schema.field("ts").type),
        pa.array([f'{{"id":{i}}}' for i in range(n)], pa.string()),
        pa.nulls(n, pa.string()),
        pa.nulls(n, pa.string()),
        pa.array(np.ones(n, dtype=np.int32)),
        pa.array(np.zeros(n, dtype=np.int32)),
        pa.array(np.zeros(n, dtype=np.int64)),
        pa.array([b"\x00\x02" + b"x" * 60] * n, pa.binary()),
    ]
    return pa.RecordBatch.from_arrays(columns, schema=schema)


def ceiling(spark: Any, work: Path, rows: int) -> dict[str, Any]:
    spark.dataSource.register(PrebuiltArrowSource)
    reader = spark.read.format("sluice_ceiling").option("rows", str(rows))
    reader.option("rows", "10000").load().count()  # warm the Python workers
    began = time.perf_counter()
    reader.load().write.parquet(str(work / "ceiling"))
    source_s = time.perf_counter() - began
    began = time.perf_counter()
    spark.read.parquet(str(work / "ceiling")).write.parquet(str(work / "ceiling-copy"))
    parquet_s = time.perf_counter() - began
    stream_s, parquet_stream_s = _streaming(spark, work, rows)
    return {
        "rows": rows,
        "python_source_rows_per_s": round(rows / source_s),
        "spark_parquet_rows_per_s": round(rows / parquet_s),
        "python_source_vs_spark_parquet": round(parquet_s / source_s, 2),
        "streaming_python_source_rows_per_s": round(rows / stream_s),
        "streaming_spark_parquet_rows_per_s": round(rows / parquet_stream_s),
        "streaming_python_source_vs_spark_parquet": round(parquet_stream_s / stream_s, 2),
    }


def _drain(stream: Any, out: Path) -> float:
    """Seconds from a query's start to its end: one availableNow micro-batch into Parquet."""
    began = time.perf_counter()
    query = (
        stream.writeStream.format("parquet")
        .option("path", str(out / "data"))
        .option("checkpointLocation", str(out / "ckpt"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    return time.perf_counter() - began


def _streaming(spark: Any, work: Path, rows: int) -> tuple[float, float]:
    """The same rows as one streaming micro-batch: from the Python source, then from Spark's
    Parquet source reading what the first wrote (the query's start counts for both)."""
    stream = spark.readStream.format("sluice_ceiling").option("rows", str(rows)).load()
    _drain(stream, work / "ceiling-stream-warm")
    source_s = _drain(stream, work / "ceiling-stream")
    written = str(work / "ceiling-stream" / "data")
    parquet = spark.readStream.schema(spark.read.parquet(written).schema).parquet(written)
    return source_s, _drain(parquet, work / "ceiling-stream-copy")
