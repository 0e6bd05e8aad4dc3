"""A MySQL/MariaDB binlog client and row decoder of our own (no python-mysql-replication)."""
