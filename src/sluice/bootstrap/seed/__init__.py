"""Seeding: reading tables' existing rows into the bootstrap store, chunk by chunk."""

from sluice.bootstrap.seed.job import DEFAULT_CHUNK_ROWS, SeedConfig, SeedJob, SeedReport

__all__ = ["DEFAULT_CHUNK_ROWS", "SeedConfig", "SeedJob", "SeedReport"]
