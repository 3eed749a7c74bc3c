"""A full disk, for real: the log dir sits on a small tmpfs (mounted in a private mount
namespace by ``unshare``, so nothing outside the test sees it) that a filler file leaves with
room for about one partition's cleaned copy. ``compactor compact`` then runs out of space while
executors write ``.cleaned`` segments.

Asserted: a clear ``failed`` line naming the file and the full disk (no traceback), the
partial files removed, every byte of a failed partition unchanged, the partitions that fit
cleaned exactly as an unconstrained run cleans them, exit code 6, the disk given back; and once
space is freed the next run converges to the unconstrained result.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from compactor.codec.compression import Codec
from compactor.errors import EXIT_OK, EXIT_PARTIAL
from compactor.maintenance.compact import run
from compactor.maintenance.options import MaintenanceOptions
from compactor.tools.ops.generator import DEFAULT_START_MS, GeneratorConfig, generate
from tests.helpers import segment_bytes, topic_lines

pytestmark = [pytest.mark.spark, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
NOW = DEFAULT_START_MS + 3 * 86_400_000
# every key distinct: a cleaned copy is about as large as its source, so the room left fits
# one partition's copy and not two
GEN = GeneratorConfig(topics=("ledger",), partitions=4, records_per_partition=3000,
                      distinct_keys=3000, tombstone_ratio=0.0, segment_bytes=64 * 1024,
                      codecs=(Codec.NONE,), seed=5,
                      topic_configs={"ledger": {"cleanup.policy": "compact"}})
ARGS = ("compact", "--assume-kafka-defaults", "--now-ms", str(NOW), "--json")

# Runs inside `unshare --mount`: mounts a tmpfs, copies the log dir onto it, fills it to
# leave argv[3] bytes free, runs `compactor compact` with one executor core (tasks in a fixed
# order), then frees the filler and runs again. Prints what the outer test checks.
INNER = r"""
import json, os, shutil, subprocess, sys
from pathlib import Path
from tests.helpers import segment_bytes
src, mnt, free = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3])
args = sys.argv[4:]
size = sum(p.stat().st_size for p in src.rglob("*") if p.is_file())
subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size + free + (8 << 20)}", "tmpfs",
                str(mnt)], check=True)
try:
    logs = mnt / "logs"
    shutil.copytree(src, logs)
    def available():
        st = os.statvfs(mnt)
        return st.f_bavail * st.f_frsize
    with open(mnt / "filler", "wb") as f:
        os.posix_fallocate(f.fileno(), 0, available() - free)
    room = available()
    cli = ["-c", "import sys; from compactor.cli import main; sys.exit(main(sys.argv[1:]))"]
    def compact():
        proc = subprocess.run([sys.executable, *cli, args[0], str(logs), *args[1:],
                               "--master", "local[1]"], capture_output=True, text=True)
        return {"code": proc.returncode, "stdout": proc.stdout, "stderr": proc.stderr,
                "leftovers": sorted(p.name for p in logs.rglob("*.cleaned")),
                "segments": {d.name: {b: v.hex() for b, v in segment_bytes(d).items()}
                             for d in sorted(logs.glob("ledger-*"))},
                "available": available()}
    first = compact()
    os.remove(mnt / "filler")
    second = compact()
    print(json.dumps({"room": room, "first": first, "second": second}))
finally:
    subprocess.run(["umount", str(mnt)], check=True)
"""


def _hex(partition_dir: Path) -> dict[str, str]:
    return {str(b): v.hex() for b, v in segment_bytes(partition_dir).items()}


@pytest.fixture(scope="module")
def runs(spark, tmp_path_factory: pytest.TempPathFactory) -> dict:
    root = tmp_path_factory.mktemp("diskfull")
    src = root / "logs"
    generate(str(src), GEN)
    before = {d.name: _hex(d) for d in sorted(src.glob("ledger-*"))}
    unconstrained = root / "unconstrained"
    shutil.copytree(src, unconstrained)
    assert run(spark, MaintenanceOptions(log_dir=str(unconstrained), now_ms=NOW,
                                         assume_kafka_defaults=True)).exit_code == EXIT_OK
    cleaned = {d.name: _hex(d) for d in sorted(unconstrained.glob("ledger-*"))}
    sizes = [sum(len(v) // 2 for v in segs.values()) for segs in cleaned.values()]
    assert all(cleaned[name] != before[name] for name in cleaned), "every partition is cleaned"
    # room for one partition's cleaned copy and a half
    free = int(max(sizes) * 1.5)
    mnt = root / "mnt"
    mnt.mkdir()
    proc = subprocess.run(
        ["unshare", "--user", "--map-root-user", "--mount", sys.executable, "-c", INNER,
         str(src), str(mnt), str(free), *ARGS], capture_output=True, text=True, cwd=REPO,
        check=False, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.splitlines()[-1])
    return {"before": before, "cleaned": cleaned, "free": free, **out}


def test_a_full_disk_fails_the_partitions_that_do_not_fit_and_cleans_the_others(runs) -> None:
    first = runs["first"]
    assert first["code"] == EXIT_PARTIAL, first["stderr"][-2000:]
    assert "Traceback" not in first["stderr"]
    (report,) = [json.loads(line) for line in first["stdout"].splitlines() if line]
    lines = {f"{p['topic']}-{p['partition']}": p for p in topic_lines(report["partitions"])}
    failed = {tp: p for tp, p in lines.items() if p["status"] == "failed"}
    done = {tp: p for tp, p in lines.items() if p["status"] == "cleaned"}
    assert failed and done and len(failed) + len(done) == len(lines), lines
    for tp, p in failed.items():
        error = p["error"]
        assert error["code"] == "LOG_DIR_ERROR" and error["stage"] == "rewrite"
        assert "No space left on device" in error["message"]
        assert error["path"].endswith(".cleaned") and f"/{tp}/" in error["path"]
        assert "file system is full" in error["remedy"]
        assert runs["first"]["segments"][tp] == runs["before"][tp], f"{tp} changed"
    for tp in done:
        assert first["segments"][tp] == runs["cleaned"][tp]
    assert first["leftovers"] == []
    # the space the failed copies took is given back (the cleaned ones freed some more)
    assert first["available"] >= runs["room"]


def test_the_next_run_with_space_converges_to_the_unconstrained_result(runs) -> None:
    second = runs["second"]
    assert second["code"] == EXIT_OK, second["stderr"][-2000:]
    assert second["segments"] == runs["cleaned"]
    assert second["leftovers"] == []
