"""Spark: ``spark.readStream.format("sluice")``, a PySpark Python data source over relays."""

from __future__ import annotations

from typing import Any

from sluice.spark.source import SluiceDataSource


def register(spark: Any) -> None:
    """Register the ``sluice`` format with a SparkSession."""
    spark.dataSource.register(SluiceDataSource)


__all__ = ["SluiceDataSource", "register"]
