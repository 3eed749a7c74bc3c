"""Crash injection: the driver's swap is killed (SIGKILL, a real process death) before each of
its file operations, for a partition with several groups. Recovery (``compactor recover``, as
Kafka's loader) must leave every group either exactly old or exactly new, and the next run
must finish the round with the same records as an uninterrupted one."""

from __future__ import annotations

import pickle
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from compactor.cli import main as cli_main
from compactor.log import storage, swap
from compactor.maintenance.compact import run
from compactor.maintenance.options import MaintenanceOptions
from compactor.spark.stages import write_cleaned_segments
from compactor.tools.ops.generator import DEFAULT_START_MS, GeneratorConfig, generate
from tests.helpers import partition_files, records_of, reference_round, segment_bytes

pytestmark = [pytest.mark.spark, pytest.mark.slow]

NOW_MS = DEFAULT_START_MS + 3 * 86_400_000
CONFIGS = {"cleanup.policy": "compact", "segment.index.bytes": "48"}
GEN = GeneratorConfig(topics=("accounts",), partitions=1, records_per_partition=1500,
                      distinct_keys=80, segment_bytes=8 * 1024, tombstone_ratio=0.2,
                      transactional_ratio=0.5, abort_ratio=0.4, seed=21)

# Runs the swap of the given commit messages and kills itself before file operation N.
CRASHER = r"""
import pickle, sys
from compactor.log import storage, swap
from tests.crash import kill_before
partition_dir, messages_file, crash_at = sys.argv[1], sys.argv[2], int(sys.argv[3])
messages = pickle.load(open(messages_file, "rb"))
scanned = storage.identities(partition_dir)
ops = kill_before(crash_at, ("rename", "remove", "fsync_dir", "write_atomic"))
swap.commit_partition(partition_dir, messages, scanned)
print(ops())
"""


@pytest.fixture(scope="module")
def staged(spark, tmp_path_factory: pytest.TempPathFactory) -> dict:
    root = tmp_path_factory.mktemp("crash")
    log_dir = root / "logs"
    generate(str(log_dir), GEN)
    (tp_dir, (inp, before, ref)), = reference_round(log_dir, CONFIGS, NOW_MS).items()
    assert len(ref.plan.groups) >= 3 and any(len(g) > 1 for g in ref.plan.groups)
    messages = write_cleaned_segments(spark, {0: inp}, {0: ref.plan})
    assert not any(m.error for m in messages)
    messages_file = root / "messages.pickle"
    messages_file.write_bytes(pickle.dumps(messages))
    committed = root / "committed"
    shutil.copytree(log_dir, committed)
    swap.commit_partition(str(committed / tp_dir), messages,
                          storage.identities(str(committed / tp_dir)))
    return {"log_dir": log_dir, "tp_dir": tp_dir, "before": before, "plan": ref.plan,
            "messages_file": messages_file, "new": segment_bytes(committed / tp_dir),
            "old_files": partition_files(log_dir / tp_dir),
            "new_files": partition_files(committed / tp_dir)}


def _crash(partition_dir: Path, messages_file: Path, crash_at: int) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", CRASHER, str(partition_dir),
                           str(messages_file), str(crash_at)], capture_output=True, text=True,
                          check=False, cwd=Path(__file__).resolve().parents[2])


def _assert_old_or_new(after: dict[int, bytes], staged: dict,
                       files: dict[str, bytes] | None = None) -> None:
    """Each group is exactly old or exactly new: its ``.log`` bytes and, given ``files``,
    every file of the group (indexes and producer snapshots too)."""
    before, new = staged["before"], staged["new"]
    for group in staged["plan"].groups:
        lo = group[0]
        hi = min((b for b in before if b > group[-1]), default=None)
        in_group = {b: d for b, d in after.items() if b >= lo and (hi is None or b < hi)}
        old = {b: d for b, d in before.items() if b in group}
        assert in_group in ({lo: new[lo]}, old), f"group {group} is a mix after recovery"
        if files is not None:
            def of_group(named: dict[str, bytes]) -> dict[str, bytes]:
                return {n: d for n, d in named.items()
                        if int(n[:20]) >= lo and (hi is None or int(n[:20]) < hi)}
            got = of_group(files)
            assert got in (of_group(staged["old_files"]), of_group(staged["new_files"])), (
                f"group {group}: files {sorted(got)} are neither the old nor the new ones")
    untouched = {b: d for b, d in before.items() if b >= staged["plan"].first_uncleanable_offset}
    assert {b: after[b] for b in untouched} == untouched


def test_crash_before_every_swap_step_recovers_old_or_new(staged, tmp_path: Path) -> None:
    probe = tmp_path / "probe"
    shutil.copytree(staged["log_dir"], probe)
    total = int(_crash(probe / staged["tp_dir"], staged["messages_file"], 10**9).stdout)
    assert total > 20
    outcomes = set()
    for crash_at in range(1, total + 1):
        work = tmp_path / f"crash-{crash_at}"
        shutil.copytree(staged["log_dir"], work)
        proc = _crash(work / staged["tp_dir"], staged["messages_file"], crash_at)
        assert proc.returncode == -signal.SIGKILL, proc.stderr
        assert cli_main(["recover", str(work)]) == 0
        after = segment_bytes(work / staged["tp_dir"])
        _assert_old_or_new(after, staged, partition_files(work / staged["tp_dir"]))
        assert not [p for p in (work / staged["tp_dir"]).iterdir()
                    if p.suffix in (".cleaned", ".swap", ".deleted")]
        outcomes.add(after == staged["new"])
        shutil.rmtree(work)
    assert outcomes == {True, False}, "crash points must cover both roll-back and roll-forward"


@pytest.mark.parametrize("crash_at", [3, 9, 17])
def test_next_run_completes_the_round(spark, staged, tmp_path: Path, crash_at: int) -> None:
    work = tmp_path / "logs"
    shutil.copytree(staged["log_dir"], work)
    _crash(work / staged["tp_dir"], staged["messages_file"], crash_at)
    report = run(spark, MaintenanceOptions(log_dir=str(work), now_ms=NOW_MS,
                                           assume_kafka_defaults=True, config_all=CONFIGS))
    assert report.exit_code == 0
    assert records_of(segment_bytes(work / staged["tp_dir"])) == records_of(staged["new"])
