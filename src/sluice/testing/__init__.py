"""Helpers for tests and demos that users need too: a private MariaDB, a recording consumer."""

from sluice.testing.mariadb import MariaDBNotAvailable, PrivateMariaDB

__all__ = ["MariaDBNotAvailable", "PrivateMariaDB"]
