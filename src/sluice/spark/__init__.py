"""Spark: ``spark.readStream.format("sluice")``, a PySpark Python data source over relays."""

from __future__ import annotations

from typing import Any

from sluice.spark.source import SluiceDataSource


def register(spark: Any) -> None:
    """Register the ``sluice`` format with a SparkSession (again is fine: a session made by
    ``newSession()`` of a registered one finds it taken, yet needs its own)."""
    from pyspark.errors import PySparkException  # noqa: PLC0415

    try:
        spark.dataSource.register(SluiceDataSource)
    except PySparkException as exc:
        if "DATA_SOURCE_ALREADY_EXISTS" not in str(exc.getCondition() or exc):
            raise


__all__ = ["SluiceDataSource", "register"]
