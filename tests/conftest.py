"""Session fixtures: one private MariaDB (binlog on) and one private PostgreSQL
(wal_level=logical) for the whole run; private NATS, Redis, RabbitMQ and Kafka servers for
the sinks, and a private ZooKeeper, when a test asks for one.

If a server cannot start, the suite fails (never skips): a skipped suite hides a broken install.
The one exception, outside CI only: Kafka Connect's jars (``make connect-jars``, a separate
download) may be missing, and its tests skip saying so; under CI=true that fails too.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator
from typing import Any

import pymysql
import pytest

from sluice.testing import PrivateMariaDB
from sluice.testing.brokers import PrivateNats, PrivateRabbitMQ, PrivateRedis
from sluice.testing.kafka import PrivateKafka
from sluice.testing.kafka_connect import ConnectJarsMissing, PrivateKafkaConnect
from sluice.testing.postgres import PrivatePostgres
from sluice.testing.zookeeper import PrivateZooKeeper

_names = itertools.count(1)


@pytest.fixture(scope="session")
def mariadb() -> Iterator[PrivateMariaDB]:
    server = PrivateMariaDB()
    server.start()  # raises MariaDBNotAvailable with the install command
    yield server
    server.stop()


@pytest.fixture(scope="session")
def postgres() -> Iterator[PrivatePostgres]:
    server = PrivatePostgres()
    server.start()  # raises PostgresNotAvailable with the install command
    yield server
    server.stop()


@pytest.fixture
def pg_database(postgres: PrivatePostgres) -> Iterator[str]:
    """A fresh PostgreSQL database for one test (slots and publications are per database)."""
    name = f"pg{next(_names)}"
    conn = postgres.connect()
    with conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE {name}")
    conn.close()
    yield name
    conn = postgres.connect()
    with conn.cursor() as cur:  # its slots first: a database with a slot cannot be dropped
        cur.execute(
            "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
            "WHERE database = %s AND NOT active",
            (name,),
        )
    conn.close()


@pytest.fixture
def database(mariadb: PrivateMariaDB) -> Iterator[str]:
    """A fresh database name for one test."""
    name = f"t{next(_names)}"
    conn = mariadb.connect()
    with conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE {name}")
    conn.close()
    yield name


@pytest.fixture
def conn(mariadb: PrivateMariaDB, database: str) -> Iterator[pymysql.Connection[Any]]:
    connection = mariadb.connect(database)
    with connection.cursor() as cur:
        cur.execute("SET time_zone = '+00:00'")
    yield connection
    connection.close()


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """One local SparkSession for the run (a JVM per process: settings are fixed up front)."""
    from sluice.bootstrap.job import spark_session
    from sluice.capture.source import seed_jars
    from sluice.spark import register

    # The MariaDB JDBC driver (make setup installs it): seeds take Spark's JDBC path.
    session = spark_session("local[2]", "sluice-tests", jars=seed_jars("mysql://localhost"))
    register(session)
    yield session
    session.stop()


# Private message brokers for the sinks (started only when a test asks; a failed start fails
# the test with the install command or the server's log). A test may kill() one for a while:
# it must restart() it before it ends, on the same port with the same data.


@pytest.fixture(scope="session")
def nats_server() -> Iterator[PrivateNats]:
    with PrivateNats() as server:  # nats-server -js; raises BrokerNotAvailable
        yield server


@pytest.fixture(scope="session")
def redis_server() -> Iterator[PrivateRedis]:
    with PrivateRedis() as server:  # append-only, fsync always; raises BrokerNotAvailable
        yield server


@pytest.fixture(scope="session")
def rabbitmq_server() -> Iterator[PrivateRabbitMQ]:
    with PrivateRabbitMQ() as server:  # a private node, ~5 s to start; raises BrokerNotAvailable
        yield server


@pytest.fixture(scope="session")
def kafka_server() -> Iterator[PrivateKafka]:
    # one KRaft node on the jars `make setup` fetched, 6-13 s; raises BrokerNotAvailable
    with PrivateKafka() as server:
        yield server


@pytest.fixture(scope="session")
def zookeeper_server() -> Iterator[PrivateZooKeeper]:
    # a standalone node on the jars `make setup` fetched, ~0.5 s; sessions from 1 s to 60 s;
    # raises BrokerNotAvailable (CI or not: the jars come with `make setup`, as Kafka's do)
    with PrivateZooKeeper() as server:
        yield server


@pytest.fixture(scope="session")
def kafka_connect(kafka_server: PrivateKafka) -> Iterator[PrivateKafkaConnect]:
    # a standalone worker with Debezium's JDBC sink as its plugin, 1.5-4 s; JsonConverter
    # with schemas for keys and values. Tests add (and delete) their own connectors.
    worker = PrivateKafkaConnect(kafka_server.bootstrap)
    try:
        worker.start()
    except ConnectJarsMissing as error:  # any other start failure fails, CI or not
        worker.stop()
        if os.environ.get("CI") == "true":
            raise
        pytest.skip(str(error))
    yield worker
    worker.stop()


@pytest.fixture(scope="session")
def browser() -> Iterator[Any]:
    """One headless Chromium for the run (the console's tests)."""
    from sluice.testing.browser import start_chromium

    driver = start_chromium()
    driver.set_page_load_timeout(30)
    yield driver
    driver.quit()
