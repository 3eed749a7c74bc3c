"""The local session a command starts: a JVM compiled for short work when the round reads
little (``session.SHORT_ROUND_BYTES``), the default compilers otherwise, and the local
settings (``session.LOCAL_CONF``) in both. Each case starts its own JVM in a fresh Python
process, as a command does."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from compactor.spark import delta, session

# each test starts commands and their JVMs in processes of their own (55 s in all)
pytestmark = pytest.mark.slow

PROBE = """
import json, sys
from compactor.spark.session import LazySession
lazy = LazySession(None)
spark = lazy(input_bytes=int(sys.argv[1]))
runtime = spark._jvm.java.lang.management.ManagementFactory.getRuntimeMXBean()
from pyspark import SparkFiles
import os
def loads(name):
    try:
        spark._jvm.java.lang.Class.forName(name)
        return True
    except Exception:
        return False
print(json.dumps({"jvm_args": list(runtime.getInputArguments()),
                  "conf": dict(spark.sparkContext.getConf().getAll()),
                  "stages": sorted(lazy.startup_s),
                  "served_jars": str(spark.sparkContext._jsc.sc().listJars().mkString(",")),
                  "copied": sorted(os.listdir(SparkFiles.getRootDirectory())),
                  "classpath": runtime.getClassPath(),
                  "loads": {n: loads(n) for n in ("io.delta.sql.DeltaSparkSessionExtension",
                                                  "org.apache.hadoop.fs.s3a.S3AFileSystem")}}))
spark.stop()
"""


@pytest.mark.parametrize(("input_bytes", "c1_only"), [
    (10 << 20, True), (session.SHORT_ROUND_BYTES, True), (session.SHORT_ROUND_BYTES + 1, False)])
def test_a_short_round_gets_a_jvm_for_short_work(input_bytes: int, c1_only: bool) -> None:
    res = subprocess.run([sys.executable, "-c", PROBE, str(input_bytes)], capture_output=True,
                         text=True, timeout=300, check=False)
    assert res.returncode == 0, res.stderr
    started = json.loads(res.stdout.splitlines()[-1])
    assert ("-XX:TieredStopAtLevel=1" in started["jvm_args"]) is c1_only
    for key, value in session.LOCAL_CONF.items():
        assert started["conf"].get(key) == value, key
    assert started["stages"] == ["session_start", "worker_start"]


def test_a_local_session_loads_the_jars_in_place() -> None:
    """Local mode: the driver's JVM is the executor, so the jars are on that JVM's classpath
    (``spark.driver.extraClassPath``), not served through ``spark.jars``, whose every jar the
    local executor copies into the session's temp dir on its first task: the AWS SDK's 690 MB
    in every command once S3A was fetched (``make test`` fetches it)."""
    res = subprocess.run([sys.executable, "-c", PROBE, str(session.SHORT_ROUND_BYTES + 1)],
                         capture_output=True, text=True, timeout=300, check=False)
    assert res.returncode == 0, res.stderr
    started = json.loads(res.stdout.splitlines()[-1])
    assert started["served_jars"] == "" and started["copied"] == []  # workers have run a task
    assert started["stages"] == ["session_start", "worker_start"]
    wanted = delta.jars("delta") + delta.jars("s3a")
    assert set(wanted) <= set(started["classpath"].split(os.pathsep))
    assert started["loads"] == {"io.delta.sql.DeltaSparkSessionExtension": True,
                                "org.apache.hadoop.fs.s3a.S3AFileSystem": True}


ROUND_PROBE = """
import json, sys
from compactor.cleaner import planning
from compactor.maintenance.compact import run_locked
from compactor.maintenance.options import build_options, load_catalog
from compactor.spark import session
from compactor.spark.session import LazySession
from compactor.tools.ops.generator import DEFAULT_START_MS
session.SHORT_ROUND_BYTES = 1  # every log dir counts as big
if sys.argv[2] == "distributed":
    planning.ONE_TASK_BYTES = 0  # no partition is offered to one task
opts = build_options(sys.argv[1], now_ms=DEFAULT_START_MS + 3 * 86_400_000,
                     config_all={"cleanup.policy": "compact", "segment.index.bytes": "72"},
                     assume_kafka_defaults=True,  # several groups a partition
                     task_keys=0 if sys.argv[2] == "no-task" else 4_000_000)
lazy = LazySession(None)
report = run_locked(lazy, opts, load_catalog(opts))
spark = lazy.started
runtime = spark._jvm.java.lang.management.ManagementFactory.getRuntimeMXBean()
print(json.dumps({"jvm_args": list(runtime.getInputArguments()),
                  "statuses": sorted({p.status for p in report.partitions}),
                  "paths": sorted({p.round_path for p in report.partitions if p.round_path})}))
spark.stop()
"""


@pytest.mark.parametrize(("path", "c1_only"), [("one_task", True), ("distributed", False),
                                               ("no-task", False)])
def test_a_round_one_task_cleans_gets_a_jvm_for_short_work_whatever_its_size(
        small_log, path: str, c1_only: bool) -> None:
    """The JVM's own work decides its compilers: partitions one task cleans whole cost it
    only their scheduling, however many bytes they hold; partitions the distributed stages
    read make it scan and shuffle (all of several groups under ``--task-keys 0``)."""
    res = subprocess.run([sys.executable, "-c", ROUND_PROBE, str(small_log), path],
                         capture_output=True, text=True, timeout=600, check=False)
    assert res.returncode == 0, res.stderr
    started = json.loads(res.stdout.splitlines()[-1])
    assert ("-XX:TieredStopAtLevel=1" in started["jvm_args"]) is c1_only
    assert "cleaned" in started["statuses"]
    assert ("offset_map" in started["paths"]) is (path != "one_task")
