# bq_platform: one verb per task. Needs Python 3.11, Java 17 and make; everything else is
# installed into .venv/ by `make install` (which run/test/dev call).

PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
# The exact dependency versions installed (pip's constraints file; `make lock` rewrites it).
CONSTRAINTS := constraints.txt
SHARED_DATA ?= ../shared/data
export BQ_PLATFORM_HOME ?= $(CURDIR)/.bq_platform
export DAGSTER_HOME ?= $(BQ_PLATFORM_HOME)/dagster_home
export SPARK_LOCAL_IP ?= 127.0.0.1
export PYSPARK_PYTHON ?= $(CURDIR)/$(BIN)/python

.PHONY: install run test lint dev bench clean browser lock

install: $(STAMP)

$(STAMP): pyproject.toml setup.py $(CONSTRAINTS)
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -c $(CONSTRAINTS) -e '.[test]'
	touch $(STAMP)

## lock: re-resolve pyproject.toml's ranges to the newest allowed versions into constraints.txt
## (in a scratch venv; .venv is untouched until the next install). Then run `make test`.
LOCK_VENV := .lock-venv
lock:
	rm -rf $(LOCK_VENV)
	$(PYTHON) -m venv $(LOCK_VENV)
	$(LOCK_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(LOCK_VENV)/bin/python -m pip install --quiet -e '.[test]'
	{ sed -n '/^#/p' $(CONSTRAINTS); $(LOCK_VENV)/bin/python -m pip freeze --exclude-editable; } \
	  > $(CONSTRAINTS).new
	mv $(CONSTRAINTS).new $(CONSTRAINTS)
	rm -rf $(LOCK_VENV)

## run: land the bundled real logs and process every landed day (local: files, DuckDB, Spark local[*])
run: install
	$(BIN)/bq-platform land-tree $(SHARED_DATA)/access_logs
	$(BIN)/bq-platform land-tree $(SHARED_DATA)/modern_logs
	$(BIN)/bq-platform run

## test: the whole test suite, emulators included
test: install
	$(BIN)/pytest -q

## browser: Debian's headless Chromium + chromedriver for the browser test (root; CI runs it)
browser:
	@if command -v chromium >/dev/null && command -v chromedriver >/dev/null; then \
	  echo "chromium and chromedriver are installed"; \
	else \
	  apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y chromium chromium-driver; \
	fi

## lint: ruff (its rules are in pyproject.toml) and `dg check defs` (the definitions load)
lint: install
	$(BIN)/ruff check bq_platform bq_platform_tests benchmarks
	$(BIN)/ruff format --check bq_platform bq_platform_tests benchmarks
	$(BIN)/dg check defs

## dev: the Dagster UI on http://127.0.0.1:3000 with the runs of `make run`; the completeness
## pictures (lake/reports) are served on http://127.0.0.1:$(REPORTS_PORT) for the UI to show
REPORTS_PORT ?= 3001
dev: install
	$(BIN)/bq-platform home
	mkdir -p $(BQ_PLATFORM_HOME)/lake/reports
	$(BIN)/python -m http.server $(REPORTS_PORT) --bind 127.0.0.1 \
	  --directory $(BQ_PLATFORM_HOME)/lake/reports >/dev/null 2>&1 & \
	  trap 'kill $$!' EXIT INT TERM; \
	  BQ_PLATFORM_REPORTS_URL=http://127.0.0.1:$(REPORTS_PORT) \
	  $(BIN)/dagster dev -w workspace.yaml -h 127.0.0.1 -p 3000

## bench: pipeline vs bare Spark/DuckDB on synthetic logs at 1x, 4x, 16x (BENCH_SCALES=1 for a
## quick run); prints the figures and writes docs/PERFORMANCE.md
BENCH_SCALES ?= 1,4,16
BENCH_ARGS ?=
bench: install
	$(BIN)/python benchmarks/benchmark.py --scales $(BENCH_SCALES) $(BENCH_ARGS)

clean:
	rm -rf .bq_platform
