"""Issue 53, item 7: a job under spark-submit starts as the ``compactor`` command's session does,
with ``python -m compactor.tools.ops.submit_args``: the driver's JVM maps the installation's
class-data archive (which it can only with the command line's classpath) and the Python
workers are the package's daemon."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from compactor.errors import EXIT_CONFIG, EXIT_OK
from compactor.spark import session
from compactor.tools.ops.generator import DEFAULT_START_MS

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
JOB = [str(REPO / "jobs" / "compact.py"), "--assume-kafka-defaults", "--config",
       "cleanup.policy=compact", "--now-ms", str(DEFAULT_START_MS + 3 * 86_400_000), "--json"]


def _tool(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "compactor.tools.ops.submit_args", *args],
                          capture_output=True, text=True, env=env, check=False)


def _submit(args: list[str], log_dir: Path) -> subprocess.CompletedProcess[str]:
    # -Xshare:on: a JVM that cannot map the archive it is given does not start at all
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, SPARK_SUBMIT_OPTS="-Xshare:on")
    return subprocess.run([str(BIN / "spark-submit"), "--master", "local[1]", *args,
                           JOB[0], str(log_dir), *JOB[1:]], capture_output=True, text=True,
                          env=env, timeout=300, check=False)


def test_a_submitted_job_maps_the_class_archive(small_log: Path) -> None:
    archive = session.class_archive()
    assert os.path.exists(archive), "make makes it: python -m compactor.tools.build.class_archive"
    proc = _tool("--master", "local[1]", "--json")
    assert proc.returncode == EXIT_OK, proc.stderr
    args = json.loads(proc.stdout)
    conf = dict(a.split("=", 1) for a in args[1::2])
    assert f"-XX:SharedArchiveFile={archive}" in conf["spark.driver.extraJavaOptions"].split()
    assert conf["spark.python.daemon.module"] == "compactor.spark.daemon"
    assert "--jars" not in args  # local mode: on the classpath, not copied per session
    done = _submit(args, small_log)
    assert done.returncode == EXIT_OK, done.stderr[-3000:]
    assert json.loads(done.stdout.splitlines()[0])["command"] == "compact"
    # the same archive without the command line's classpath: the JVM refuses to map it
    plain = ["--jars", conf["spark.driver.extraClassPath"].replace(os.pathsep, ","),
             "--conf", f"spark.driver.extraJavaOptions=-XX:SharedArchiveFile={archive}"]
    refused = _submit(plain, small_log)
    assert refused.returncode != EXIT_OK
    assert "shared archive" in refused.stderr.lower() or "cds" in refused.stderr.lower(), \
        refused.stderr[-2000:]


def test_on_a_cluster_the_executors_get_the_jars_or_the_installation(tmp_path: Path) -> None:
    args = json.loads(_tool("--master", "spark://127.0.0.1:7077", "--json").stdout)
    assert args[args.index("--jars") + 1].split(",")[0].endswith(".jar")
    assert not any(a.startswith("spark.executor.") for a in args[1::2])
    installed = json.loads(_tool("--master", "k8s://https://127.0.0.1:6443",
                                 "--executors-installed", "--json").stdout)
    conf = dict(a.split("=", 1) for a in installed[1::2] if "=" in a)
    assert "--jars" not in installed
    assert conf["spark.executor.extraClassPath"] == conf["spark.driver.extraClassPath"]
    assert conf["spark.python.daemon.module"] == "compactor.spark.daemon"
    missing = _tool("--master", "local[1]",
                    env=dict(os.environ, COMPACTOR_JARS_HOME=str(tmp_path / "none")))
    assert missing.returncode == EXIT_CONFIG
    assert "compactor.tools.build.jars" in missing.stderr
