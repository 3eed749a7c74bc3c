"""``--writer pure`` where numba cannot be imported (in the driver and in Spark's Python
workers): the round runs and every group's report line says the pure path wrote it; the
native writer is refused before any work, naming numba and the remedy."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from compactor.tools.ops.generator import DEFAULT_START_MS, GeneratorConfig, generate
from tests.helpers import tree_digest

pytestmark = pytest.mark.slow

GEN = GeneratorConfig(topics=("events",), partitions=2, records_per_partition=3000,
                      distinct_keys=200, segment_bytes=24 * 1024, tombstone_ratio=0.1, seed=5)
NOW = DEFAULT_START_MS + 3 * 86_400_000


def _compact(logs: Path, writer: str, blocker: Path) -> tuple[int, dict]:
    """``compactor compact`` in a new process whose every Python (Spark's workers too, which
    inherit ``PYTHONPATH``) finds a ``numba`` that fails to import."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(blocker), *filter(None, [os.environ.get("PYTHONPATH")])])}
    proc = subprocess.run(
        [sys.executable, "-m", "compactor.cli", "compact", str(logs), "--assume-kafka-defaults",
         "--config", "cleanup.policy=compact", "--now-ms", str(NOW), "--writer", writer,
         "--master", "local[2]", "--json"],
        capture_output=True, text=True, env=env, timeout=600)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    assert lines, proc.stderr[-3000:]
    return proc.returncode, json.loads(lines[-1])


def test_the_pure_writer_runs_without_numba(tmp_path: Path) -> None:
    blocker = tmp_path / "blocker" / "numba"
    blocker.mkdir(parents=True)
    (blocker / "__init__.py").write_text(
        'raise ImportError("numba is not installed here (tests/e2e/test_without_numba.py)")\n')
    logs = tmp_path / "logs"
    generate(str(logs), GEN)
    probe = subprocess.run(
        [sys.executable, "-c", "import compactor.spark.writer, compactor.native as n; "
                               "print(n.available())"],
        capture_output=True, text=True, check=True,
        env={**os.environ, "PYTHONPATH": str(blocker.parent)})
    assert probe.stdout.strip() == "False"  # the blocker works, and the writer imports

    before = tree_digest(logs)
    code, report = _compact(logs, "native", blocker.parent)
    assert code != 0 and report["code"] == "CONFIG_ERROR", report
    assert "numba" in report["message"] and "--writer pure" in report["remedy"]
    assert tree_digest(logs) == before  # refused before any work

    reference = tmp_path / "reference"
    shutil.copytree(logs, reference)
    code, report = _compact(logs, "pure", blocker.parent)
    assert code == 0, report
    writers = [w for p in report["partitions"] for w in p.get("writers", {}).values()]
    assert writers and set(writers) == {"pure"}
    # the same bytes as the native writer (numba importable) on a copy
    native_code, native_report = _compact(reference, "native", tmp_path / "nothing")
    assert native_code == 0
    assert {w for p in native_report["partitions"]
            for w in p.get("writers", {}).values()} == {"native"}
    assert tree_digest(logs) == tree_digest(reference)
