"""The class-data-sharing archive of Spark's classes (``compactor.tools.build.class_archive``,
made by ``make``): the sessions the command line starts use it, and an archive the JVM cannot
use (another classpath, garbage) changes nothing a caller sees."""

from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from compactor.errors import EXIT_OK
from compactor.spark import session
from compactor.tools.ops.generator import DEFAULT_START_MS

# each test starts a JVM on a class archive of its own (14 s in all)
pytestmark = pytest.mark.slow

COMPACTOR = str(Path(sys.executable).parent / "compactor")
COMPACT = ["--assume-kafka-defaults", "--now-ms", str(DEFAULT_START_MS + 3 * 86_400_000),
           "--config", "cleanup.policy=compact", "--json", "--progress", "off"]
DYNAMIC_ARCHIVE_MAGIC = 0xF00BABA8  # HotSpot's CDS_DYNAMIC_ARCHIVE_MAGIC


def test_make_made_the_archive_and_sessions_use_it(monkeypatch: pytest.MonkeyPatch,
                                                   tmp_path: Path) -> None:
    archive = Path(session.class_archive())
    assert archive.exists(), "make makes it: python -m compactor.tools.build.class_archive"
    assert struct.unpack("<I", archive.read_bytes()[:4])[0] == DYNAMIC_ARCHIVE_MAGIC
    assert f"-XX:SharedArchiveFile={archive}" in session.driver_java_options(None).split()
    monkeypatch.setenv("COMPACTOR_CLASS_ARCHIVE", str(tmp_path / "none.jsa"))
    assert "SharedArchiveFile" not in session.driver_java_options(None)


@pytest.mark.parametrize("kind", ["another-classpath", "garbage"])
def test_an_archive_the_jvm_cannot_use_changes_nothing_a_caller_sees(
        small_log: Path, tmp_path: Path, kind: str) -> None:
    archive = tmp_path / "other.jsa"
    if kind == "another-classpath":  # a JVM with a classpath that is not Spark's made it
        java = shutil.which("java") or "java"
        subprocess.run([java, "-cp", str(tmp_path), f"-XX:ArchiveClassesAtExit={archive}",
                        "-version"], capture_output=True, check=True)
        assert struct.unpack("<I", archive.read_bytes()[:4])[0] == DYNAMIC_ARCHIVE_MAGIC
    else:
        archive.write_bytes(os.urandom(1 << 16))
    res = subprocess.run([COMPACTOR, "compact", str(small_log), *COMPACT],
                         capture_output=True, text=True, timeout=300,
                         env={**os.environ, "COMPACTOR_CLASS_ARCHIVE": str(archive)})
    assert res.returncode == EXIT_OK, res.stderr
    (line,) = res.stdout.splitlines()  # the report alone: no JVM message on stdout
    assert json.loads(line)["command"] == "compact"
    assert "cds" not in res.stderr.lower(), res.stderr
