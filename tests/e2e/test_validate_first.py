"""Validate, then start Spark only for work: every refusal and every run with nothing to do
ends without a Spark session. The commands run with ``JAVA_HOME`` pointing nowhere, so a
session that starts fails with SPARK_UNAVAILABLE (exit 1): getting the validation's own exit
code instead proves no session was attempted (no timing involved). The control case shows the
detector works."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from compactor.errors import EXIT_CONFIG, EXIT_FAILURE, EXIT_LOCKED, EXIT_OK
from compactor.tools.ops.generator import DEFAULT_START_MS
from tests.helpers import lock_held_by_other_process

COMPACTOR = str(Path(sys.executable).parent / "compactor")
NOW = str(DEFAULT_START_MS + 3 * 86_400_000)


def _no_java(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, JAVA_HOME="/nonexistent/java")
    return subprocess.run([COMPACTOR, *args], capture_output=True, text=True, env=env,
                          timeout=120)


def _check(res: subprocess.CompletedProcess, code: int, words: str = "") -> None:
    assert "SPARK_UNAVAILABLE" not in res.stderr, res.stderr[-1500:]
    assert res.returncode == code, res.stderr[-1500:]
    assert words in res.stderr + res.stdout


def test_control_a_round_with_work_does_start_spark(small_log: Path) -> None:
    res = _no_java("compact", "--assume-kafka-defaults", str(small_log), "--now-ms", NOW,
                   "--config",
                   "cleanup.policy=compact")
    assert res.returncode == EXIT_FAILURE and "SPARK_UNAVAILABLE" in res.stderr


@pytest.mark.parametrize("command", ["plan", "compact", "run"])
def test_a_missing_log_dir_is_refused_before_spark(command: str, tmp_path: Path) -> None:
    _check(_no_java(command, str(tmp_path / "nonexistent"), "--now-ms", NOW), EXIT_CONFIG,
           "does not exist")


def test_a_misspelled_config_is_refused_before_spark(small_log: Path) -> None:
    _check(_no_java("compact", "--assume-kafka-defaults", str(small_log), "--config",
                    "cleanup.polcy=compact"),
           EXIT_CONFIG, "cleanup.polcy")


def test_a_locked_log_dir_is_refused_before_spark(small_log: Path) -> None:
    with lock_held_by_other_process(small_log):
        _check(_no_java("compact", "--assume-kafka-defaults", str(small_log), "--now-ms", NOW,
                        "--config",
                        "cleanup.policy=compact"), EXIT_LOCKED, "LOG_DIR_LOCKED")


def test_a_partition_dir_is_refused_as_a_log_dir(small_log: Path) -> None:
    partition = next(p for p in sorted(small_log.iterdir()) if p.name.startswith("orders-v2-"))
    for command in ("plan", "compact", "retain", "run"):
        _check(_no_java(command, str(partition), "--now-ms", NOW), EXIT_CONFIG,
               "--topics orders-v2")


def test_nothing_to_compact_needs_no_session(small_log: Path) -> None:
    # --config is a broker-level default: __consumer_offsets keeps its own compact policy, so
    # the round names the application topics
    selection = ["--topics", "orders-v2,user-profiles", "--config", "cleanup.policy=delete"]
    res = _no_java("compact", "--assume-kafka-defaults", str(small_log), "--now-ms", NOW,
                   *selection, "--json")
    _check(res, EXIT_OK)
    report = json.loads(res.stdout.splitlines()[0])
    reasons = {p["reason"] for p in report["partitions"]
               if p["topic"] in ("orders-v2", "user-profiles")}
    assert reasons == {"not_compacted"}
    _check(_no_java("run", "--assume-kafka-defaults", str(small_log), "--now-ms", NOW,
                    *selection, "--json"), EXIT_OK)


def test_erasure_with_nothing_pending_needs_no_session(small_log: Path, tmp_path: Path) -> None:
    state = tmp_path / "state"
    init = subprocess.run([COMPACTOR, "erase", "init", "--state-dir", str(state)],
                          capture_output=True, text=True)
    assert init.returncode == EXIT_OK, init.stderr
    for action in ("apply", "verify"):
        _check(_no_java("erase", action, str(small_log), "--state-dir", str(state), "--json"),
               EXIT_OK)


def test_an_unknown_topic_selection_is_refused_before_spark(small_log: Path) -> None:
    _check(_no_java("compact", "--assume-kafka-defaults", str(small_log), "--topics", "orders-v3",
                    "--config",
                    "cleanup.policy=compact"), EXIT_CONFIG, "orders-v3")


def test_a_selection_with_nothing_to_compact_needs_no_session(small_log: Path) -> None:
    _check(_no_java("plan", "--assume-kafka-defaults", str(small_log), "--now-ms", NOW, "--topics",
                    "orders-v2",
                    "--config", "cleanup.policy=delete"), EXIT_OK)
