# Targets mirror CI. `make setup` installs everything on a fresh Debian/Ubuntu machine.
PYTHON ?= python3
PIP ?= $(PYTHON) -m pip

.PHONY: setup test lint bench demo

setup:
	@command -v mariadbd >/dev/null 2>&1 || test -x /usr/sbin/mariadbd || \
	  { (apt-get update -qq || true) && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq mariadb-server mariadb-client; }
	$(PIP) install -q -e '.[dev]'

test: setup
	$(PYTHON) -m pytest -q

lint:
	$(PYTHON) -m ruff check src tests benchmarks
	$(PYTHON) -m mypy
	lint-imports

bench: setup
	$(PYTHON) -m benchmarks

demo: setup
	sluice demo
