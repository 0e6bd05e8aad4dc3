"""Seeding: reading tables' existing rows into the bootstrap store, chunk by chunk.

``seed.job`` is the Spark job (``SeedJob``); ``seed.records`` what it keeps in the store;
``seed.chunk`` one chunk's task. (Nothing is imported here: the fold imports the records.)
"""
