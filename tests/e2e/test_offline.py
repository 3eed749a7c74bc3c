"""Once set up, the Spark commands need no network: an erasure (delta-spark's join and MERGE)
and a compaction recording its run, in a network namespace of their own with nothing but a
loopback interface (``unshare``: a user and a network namespace, no privilege needed where
user namespaces are allowed)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from compactor.tools.ops.generator import GeneratorConfig, generate
from tests.helpers import init_ledger

pytestmark = [pytest.mark.slow]

COMPACTOR = str(Path(sys.executable).with_name("compactor"))


def offline(*args: str) -> subprocess.CompletedProcess[str]:
    """A compactor command with no route to anything but 127.0.0.1."""
    script = 'ip link set lo up && exec "$@"'
    return subprocess.run(["unshare", "--user", "--map-root-user", "--net", "sh", "-c", script,
                           "sh", COMPACTOR, *args], capture_output=True, text=True,
                          timeout=600, env={"PATH": "/usr/sbin:/usr/bin:/bin",
                                            "SPARK_LOCAL_IP": "127.0.0.1",
                                            "HOME": "/tmp", "PYSPARK_PYTHON": sys.executable})


def test_the_spark_commands_and_delta_spark_start_without_network(tmp_path: Path) -> None:
    assert shutil.which("unshare") and shutil.which("ip", path="/usr/sbin:/usr/bin:/bin")
    probe = offline("--version")
    assert probe.returncode == 0, probe.stderr  # the namespace itself works here
    logs, state = tmp_path / "logs", tmp_path / "state"
    generate(str(logs), GeneratorConfig(topics=("accounts",), partitions=1,
                                        records_per_partition=500, distinct_keys=50, seed=3,
                                        topic_configs={"accounts": {"cleanup.policy":
                                                                    "compact"}}))
    common = ["--assume-kafka-defaults", "--state-dir", str(state), "--json"]
    init_ledger(state)
    request = offline("erase", "request", "--state-dir", str(state), "--topic", "accounts",
                      "--key", "key-00000007", "--request-id", "r1", "--reason", "art. 17")
    assert request.returncode == 0, request.stderr
    applied = offline("erase", "apply", str(logs), *common)
    assert applied.returncode == 0, applied.stderr[-3000:]
    report = json.loads(applied.stdout.splitlines()[0])
    assert report["requests"][0]["status"] == "applied"
    assert report["requests"][0]["records_erased"] > 0
    compacted = offline("compact", str(logs), *common)
    assert compacted.returncode == 0, compacted.stderr[-3000:]
    history = offline("history", "--state-dir", str(state), "--json")
    runs = [json.loads(line) for line in history.stdout.splitlines()]
    assert {r["command"] for r in runs} >= {"erase_apply", "compact"}
