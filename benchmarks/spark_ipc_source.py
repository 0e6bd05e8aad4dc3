"""The do-nothing Python streaming source of ``spark_source``: each partition yields the
record batches of one Arrow IPC file, memory-mapped. Its own module, importing only pyarrow
and PySpark's data source API, so that the Python process Spark starts for a streaming
source's offsets (once per query) imports no more than any Python source must."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadLimit


class _File(InputPartition):
    def __init__(self, path: str) -> None:
        self.path = path


class _IpcStreamReader(DataSourceStreamReader):
    """One micro-batch: each partition yields the record batches of one Arrow IPC file."""

    def __init__(self, paths: list[str]) -> None:
        self.paths = paths

    def initialOffset(self) -> dict[str, int]:  # noqa: N802
        return {"n": 0}

    def latestOffset(  # noqa: N802
        self, start: dict[Any, Any] | None = None, limit: ReadLimit | None = None
    ) -> dict[str, int]:
        return {"n": 1}

    def partitions(self, start: dict[str, int], end: dict[str, int]) -> list[_File]:
        return [_File(p) for p in self.paths] if end["n"] > start["n"] else []

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, _File)
        with pa.memory_map(partition.path) as source:
            reader = pa.ipc.open_file(source)
            for i in range(reader.num_record_batches):
                yield reader.get_batch(i)


class PrebuiltIpcSource(DataSource):
    """``format("sluice_ceiling_ipc").option("paths", "a.arrow,b.arrow").option("ddl", ...)``"""

    @classmethod
    def name(cls) -> str:
        return "sluice_ceiling_ipc"

    def schema(self) -> str:
        return str(self.options["ddl"])

    def streamReader(self, schema: Any) -> _IpcStreamReader:  # noqa: N802
        return _IpcStreamReader(str(self.options["paths"]).split(","))
