"""Only regular files are read (issue 28.9): a FIFO named like a segment made ``inspect
--verify`` and ``retain`` hang for ever, and a symlink to ``/dev/zero`` named like an index
exhausted memory. Now each is an error naming the file, and the command ends."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from compactor.tools.ops.generator import DEFAULT_START_MS, GeneratorConfig, generate

REPO = Path(__file__).resolve().parents[2]
GEN = GeneratorConfig(topics=("events",), partitions=1, records_per_partition=200,
                      distinct_keys=50, segment_bytes=4 * 1024, seed=3, metadata_log=False)
NOW = DEFAULT_START_MS + 30 * 86_400_000


def _run(*args: str) -> subprocess.CompletedProcess:
    """The CLI in its own process, bounded: a hang fails the test instead of the suite; the
    address space is capped, so reading /dev/zero without end fails fast too."""
    code = ("import resource, sys; resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30));"
            "from compactor.cli import main; sys.exit(main(sys.argv[1:]))")
    try:
        return subprocess.run([sys.executable, "-c", code, *args], capture_output=True,
                              text=True, cwd=REPO, timeout=120)
    except subprocess.TimeoutExpired:
        pytest.fail(f"compactor {' '.join(args)} hung")


@pytest.mark.parametrize("kind", ["fifo", "link to /dev/zero"])
def test_a_special_file_named_like_a_segment_file_is_an_error_not_a_hang(
        tmp_path: Path, kind: str) -> None:
    logs = tmp_path / "logs"
    generate(str(logs), GEN)
    part = logs / "events-0"
    last = max(p.name[:20] for p in part.glob("*.log"))
    if kind == "fifo":
        victim = part / f"{int(last) + 1:020d}.log"
        os.mkfifo(victim)
    else:
        victim = part / f"{last}.timeindex"
        victim.unlink()
        victim.symlink_to("/dev/zero")
    inspected = _run("inspect", "--verify", str(logs))
    assert inspected.returncode != 0 and victim.name in inspected.stdout + inspected.stderr
    assert "not a regular file" in inspected.stdout + inspected.stderr
    retained = _run("retain", "--assume-kafka-defaults", str(logs), "--now-ms", str(NOW),
                    "--config", "retention.ms=3600000", "--json")
    assert retained.returncode == 6, retained.stderr[-2000:]
    # a link named like a segment file is refused as a link before anything reads it
    assert ("not a regular file" if kind == "fifo" else
            "symlink to /dev/zero") in retained.stdout
