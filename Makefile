# kafka-compactor: the two commands of the README are `make demo` and `make test`.
# The interpreter .venv is made from: Debian's own python3.11 when it can make a venv (the
# python3.11-venv package: the one deploy/Dockerfile installs), else the first python3.11 on
# PATH. Debian builds it with PGO and LTO; a source build without them (pyenv's default) ran
# the driver's ledger passes and the pure writer 1.5x slower here (docs/operations.md).
PYTHON ?= $(firstword $(shell /usr/bin/python3.11 -c 'import ensurepip, venv' 2>/dev/null \
	&& echo /usr/bin/python3.11) python3.11)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
DEMO_DIR ?= demo-logs
DEMO_STATE ?= demo-state
DEMO_PROPS ?= demo-server.properties
PYTEST_ARGS ?=
# Apache Kafka's own jars (a real broker, its tools, its cleaner) judge the tool in the tests:
# resolved from Maven Central by tests/kafka/pom.xml into one folder, once per version.
KAFKA_VERSION ?= 4.1.2

export SPARK_LOCAL_IP ?= 127.0.0.1
export PYSPARK_PYTHON ?= $(abspath $(BIN)/python)

.PHONY: venv jars jars-s3a kernels browser kafka demo test test-fast bench bench-compact bench-kafka bench-erase bench-remote dist image clean

venv: $(STAMP)

# The writer's numba kernels compiled once here (cached on disk; half a second when they are),
# not by every Spark Python worker side by side on first use; then the driver JVM's archive of
# Spark's classes (AppCDS, made once per environment: a session starts in two thirds of the
# time). Without the archive the commands work as before, so failing to make it stops nothing.
kernels: jars
	$(BIN)/python -c "from compactor.native import compile_kernels; compile_kernels()"
	-$(BIN)/python -m compactor.tools.build.class_archive

# Maven (Debian's package) resolves the pinned JVM jars (compactor/spark/pom.xml) once: every
# Spark session of the tool loads delta-spark from that folder, without network.
MVN = @command -v mvn >/dev/null || { $(SUDO) apt-get install -y -q maven \
		|| { $(SUDO) apt-get update -q && $(SUDO) apt-get install -y -q maven; }; }
jars: venv
	$(MVN)
	$(BIN)/python -m compactor.tools.build.jars

# and Hadoop's S3A with the AWS SDK (690 MB), for a state dir on S3 (the tests' S3 server)
jars-s3a: venv
	$(MVN)
	$(BIN)/python -m compactor.tools.build.jars --s3a

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip setuptools wheel
	$(BIN)/pip install --quiet -e '.[test,airflow]'
	touch $(STAMP)

# Set up, generate a sample log dir and run the main job on it with local Spark.
# The sample data is timestamped now, so retention (30 days on this broker) keeps it. Configs
# come from where Kafka keeps them: the broker's server.properties (written beside the log dir,
# with non-default log.* values) and the generated cluster's metadata log.
demo: kernels
	rm -rf $(DEMO_DIR) $(DEMO_STATE) $(DEMO_PROPS)
	$(BIN)/compactor generate $(DEMO_DIR) --partitions 2 --records 20000 --legacy-records 50 \
		--open-transaction --seed 42 --start-ms $$(($$(date +%s) * 1000 - 3600000)) \
		--topic-config user-profiles:cleanup.policy=compact \
		--topic-config orders-v2:cleanup.policy=compact,delete \
		--server-properties $(DEMO_PROPS) --broker-config log.retention.hours=720 \
		--broker-config log.cleaner.delete.retention.ms=43200000
	$(BIN)/compactor plan $(DEMO_DIR) --server-properties $(DEMO_PROPS)
	$(BIN)/compactor run $(DEMO_DIR) --server-properties $(DEMO_PROPS) --state-dir $(DEMO_STATE)
	$(BIN)/compactor erase init --state-dir $(DEMO_STATE)
	$(BIN)/compactor erase request --state-dir $(DEMO_STATE) --topic '*' --key key-00000007 \
		--reason demo
	$(BIN)/compactor erase apply $(DEMO_DIR) --server-properties $(DEMO_PROPS) \
		--state-dir $(DEMO_STATE)
	$(BIN)/compactor erase verify $(DEMO_DIR) --server-properties $(DEMO_PROPS) \
		--state-dir $(DEMO_STATE)
	$(BIN)/compactor erase status --state-dir $(DEMO_STATE)
	$(BIN)/compactor inspect $(DEMO_DIR) --verify

# The versioned wheel (dist/kafka_compactor-VERSION-py3-none-any.whl: `pip install` it where
# the jobs run) and what spark-submit --py-files needs to run jobs/*.py on a cluster: the
# compactor package (with schemas/ as compactor.schemas, as the wheel installs it), zipped.
# (Executors also need the dependencies of pyproject.toml installed in their Python.) Built by
# the environment that exists: a pyproject.toml newer than it does not rebuild it here.
dist: | $(STAMP)
	$(BIN)/python -m pip wheel --no-deps --no-build-isolation -q -w dist .
	$(BIN)/python -m compactor.tools.build.dist dist/kafka_compactor.zip

# The driver and executor image (deploy/Dockerfile: Debian 12, Python 3.11, Java 17, the
# package with deploy/constraints.txt's versions, the jars of compactor/spark/pom.xml), tagged
# with the package's version as deploy/k8s/ names it. Needs a container engine (docker, or
# CONTAINER=podman); the tests run its install step as a script (tests/e2e/test_deploy.py).
VERSION := $(shell sed -n 's/^version = "\(.*\)"/\1/p' pyproject.toml)
CONTAINER ?= docker
image:
	$(CONTAINER) build -f deploy/Dockerfile -t kafka-compactor:$(VERSION) .

# Debian's chromium renders the HTML report in the tests (installed from the package
# registry when missing; sudo when not root).
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
browser:
	@command -v chromium >/dev/null || { $(SUDO) apt-get install -y -q chromium \
		|| { $(SUDO) apt-get update -q && $(SUDO) apt-get install -y -q chromium; }; }

KAFKA_NEWER ?= 4.2.2 4.3.1 4.4.0
KAFKA_HOME := $(VENV)/share/kafka-compactor

kafka: $(foreach v,$(KAFKA_VERSION) $(KAFKA_NEWER),$(KAFKA_HOME)/kafka-$(v)/libs/.fetched) \
	$(KAFKA_HOME)/kafka-$(KAFKA_VERSION)/rsm/.fetched

$(KAFKA_HOME)/kafka-%/libs/.fetched: tests/kafka/pom.xml
	$(MVN)
	mvn -q -B -f tests/kafka/pom.xml -Dkafka.version=$* \
		dependency:copy-dependencies -DincludeScope=runtime -DoutputDirectory=$(abspath $(@D))
	touch $@

# Kafka's LocalTieredStorage RemoteStorageManager (its test jars, published for the releases
# the tiered tests run: 4.1.2): the tiered broker's plugin, on its
# remote.log.storage.manager.class.path, apart from the broker's own jars
$(KAFKA_HOME)/kafka-$(KAFKA_VERSION)/rsm/.fetched: tests/kafka/pom.xml
	$(MVN)
	for jar in kafka-storage kafka-clients; do \
		mvn -q -B -f tests/kafka/pom.xml dependency:copy \
			-Dartifact=org.apache.kafka:$$jar:$(KAFKA_VERSION):jar:test \
			-DoutputDirectory=$(abspath $(@D)) || exit 1; done
	touch $@

# Set up and run the whole test suite (slow end-to-end tests included).
test: jars-s3a kernels browser kafka
	$(BIN)/python -m pytest $(PYTEST_ARGS)

test-fast: jars-s3a kernels browser kafka
	$(BIN)/python -m pytest -m 'not slow' $(PYTEST_ARGS)

bench: venv
	$(BIN)/python bench/codec.py

# One compaction round over a generated 1 GiB / 10 M record log dir (several minutes).
bench-compact: kernels
	$(BIN)/python bench/compact.py

# Kafka's own cleaner (4.1.2, one thread) and our round on the same generated logs, per codec
# (tens of minutes; the 1 GB logs are generated once, cached in the temp dir; each figure
# the median of 3 turns of Kafka and ours alternating).
bench-kafka: kernels kafka
	$(BIN)/python bench/kafka_cleaner.py --repeat 3

# An erase apply against 1 M pending subjects beside a compaction round (several minutes).
bench-erase: kernels
	$(BIN)/python bench/erase.py

# Erasure in a real broker's remote tier (KIP-405) beside Kafka's own consumer reading it.
bench-remote: kernels kafka
	$(BIN)/python bench/remote_tier.py

clean:
	rm -rf $(VENV) $(DEMO_DIR) $(DEMO_STATE) $(DEMO_PROPS) .pytest_cache .hypothesis
