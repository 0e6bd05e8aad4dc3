"""PostgreSQL capture (logical replication, ``pgoutput``); needs ``sluice[postgres]``."""
