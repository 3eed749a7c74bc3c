"""Shared fixtures: Hypothesis profiles and generated log dirs.

Profiles: ``ci`` (derandomized, 200 examples per property) is selected by
``HYPOTHESIS_PROFILE=ci`` (``.ci/run`` sets it); ``dev`` (100 examples) is the default.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

from compactor.spark import delta
from compactor.spark.session import LOCAL_CONF
from compactor.tools.ops.generator import GeneratorConfig, generate
from tests.helpers import WRITTEN_SEGMENT_FILES

settings.register_profile(
    "ci", max_examples=200, derandomize=True, deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile(
    "dev", max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "dev"))

# py4j logs "closing down clientserver connection" at interpreter exit, after pytest closed the
# streams Airflow's logging config attached handlers to: do not print a traceback for that.
logging.raiseExceptions = False

SMALL_LOG = GeneratorConfig(
    topics=("orders-v2", "user-profiles"),
    partitions=2,
    records_per_partition=1500,
    distinct_keys=100,
    segment_bytes=16 * 1024,
    legacy_records=30,
    open_transaction=True,
    seed=7,
)


@pytest.fixture(scope="session")
def small_log_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A generated log dir, created once per run; copy it before changing it."""
    path = tmp_path_factory.mktemp("template") / "logs"
    generate(str(path), SMALL_LOG)
    return path


_SEGMENT_FILE = re.compile(r"\d{20}\.(log|index|timeindex|txnindex)")


def _segment_files(log_dir: Path) -> dict[Path, int]:
    """Each segment file of ``log_dir``'s partitions, with its inode."""
    return {p: p.stat().st_ino for p in log_dir.glob("*-*/*") if _SEGMENT_FILE.fullmatch(p.name)}


@pytest.fixture()
def small_log(small_log_template: Path, tmp_path: Path) -> Iterator[Path]:
    """A private copy of the generated log dir.

    The segment files the test's commands put in place (new names, or a new inode where the
    tool renamed a cleaned file over the old one; a test that corrupts a file in place keeps
    its inode) are handed to Kafka's ``DumpLogSegments`` at the end of the run
    (``tests/kafka/test_dumped_by_kafka.py``)."""
    dest = tmp_path / "logs"
    shutil.copytree(small_log_template, dest)
    before = _segment_files(dest)
    yield dest
    if dest.is_dir():
        WRITTEN_SEGMENT_FILES.extend(
            p for p, inode in _segment_files(dest).items() if before.get(p) != inode)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Kafka's judgement of every segment file the suite wrote runs after every other test."""
    last = [i for i in items if i.name == "test_kafka_reads_every_segment_the_suite_wrote"]
    items[:] = [i for i in items if i not in last] + last


@pytest.fixture(scope="session")
def spark():  # type: ignore[no-untyped-def]
    """The one local Spark session of the test run (2 cores, 2 shuffle partitions, no UI)."""
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    session = (
        SparkSession.builder.master("local[2]").appName("kafka-compactor-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        # a session of ~800 tests: Spark's status store keeps the last 1000 jobs, stages and
        # SQL executions (with their plans' metrics) whether or not a UI shows them, which
        # filled the default 1 GiB heap about half way and left the run in back-to-back GC
        .config("spark.driver.memory", "3g")
        .config("spark.ui.retainedJobs", "20")
        .config("spark.ui.retainedStages", "20")
        .config("spark.ui.retainedTasks", "500")
        .config("spark.sql.ui.retainedExecutions", "20")
        .config(map=LOCAL_CONF)  # as the command line's local sessions
        # delta-spark's jars, extension and catalog, and S3A for the state dirs on the S3 server
        .config(map=delta.session_conf(object_store={}, local=True))
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    """A real S3 server (SeaweedFS ``weed mini``) on 127.0.0.1 for the whole run, with a
    ``logs`` bucket; stopped when the run ends."""
    from compactor.tools.fixtures import s3_server as server_tool

    with server_tool.running(str(tmp_path_factory.mktemp("weed"))) as server:
        server_tool.create_bucket(server, "logs")
        yield server
