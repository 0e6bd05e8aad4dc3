"""Avro schemas per source, generated from table metadata, versioned."""

from sluice.schemas.avro import RowCodec, TableSchema
from sluice.schemas.columns import KINDS, Column
from sluice.schemas.registry import SchemaRegistry

__all__ = ["KINDS", "Column", "RowCodec", "SchemaRegistry", "TableSchema"]
