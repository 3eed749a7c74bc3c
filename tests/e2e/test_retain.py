"""``compactor retain`` end to end on generated log dirs: what goes, what stays byte for byte,
the checkpoints afterwards, the safety floor, dry runs, and crashes during deletion."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from compactor.cli import main as cli_main
from compactor.codec.checkpoints import (
    LOG_START_OFFSET_CHECKPOINT,
    REPLICATION_OFFSET_CHECKPOINT,
    format_offset_checkpoint,
    parse_offset_checkpoint,
)
from compactor.errors import EXIT_CONFIG, EXIT_OK
from compactor.log.layout import load_partition, log_end_offset, read_leader_epochs
from compactor.model import TopicPartition
from compactor.tools.ops.generator import DEFAULT_START_MS, GeneratorConfig, generate
from tests.helpers import inspect_problems, segment_bytes, topic_lines, tree_digest

GEN = GeneratorConfig(topics=("events",), partitions=2, records_per_partition=1200,
                      distinct_keys=300, segment_bytes=12 * 1024, record_interval_ms=1000,
                      transactional_ratio=0.3, seed=11)
DAY = 86_400_000
REPO = Path(__file__).resolve().parents[2]  # subprocesses import tests.crash from here
NOW = DEFAULT_START_MS + 30 * DAY
SPAN_MS = 1200 * 1000  # the generated records span 20 minutes


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("retain") / "logs"
    generate(str(path), GEN)
    return path


@pytest.fixture()
def logs(template: Path, tmp_path: Path) -> Path:
    dest = tmp_path / "logs"
    shutil.copytree(template, dest)
    return dest


def _retain(logs: Path, capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, dict]:
    code = cli_main(["retain", "--assume-kafka-defaults", str(logs), "--now-ms", str(NOW), "--json",
                     *args])
    (report,) = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line]
    return code, report


def _checkpoint(logs: Path, name: str) -> dict[TopicPartition, int]:
    return parse_offset_checkpoint((logs / name).read_text())


def test_time_retention_deletes_an_old_prefix_and_keeps_the_rest_byte_for_byte(
        logs: Path, capsys: pytest.CaptureFixture[str]) -> None:
    before = {p.name: segment_bytes(p) for p in logs.glob("events-*")}
    snapshots = {p.name: sorted(p.glob("*.snapshot")) for p in logs.glob("events-*")}
    # segments whose records are all older than 10 minutes after the start go
    retention_ms = NOW - (DEFAULT_START_MS + SPAN_MS // 2)
    code, report = _retain(logs, capsys, "--config", "cleanup.policy=delete",
                           "--config", f"retention.ms={retention_ms}")
    assert code == EXIT_OK and report["status"] == "ok"
    for p in topic_lines(report["partitions"]):
        pdir = logs / f"{p['topic']}-{p['partition']}"
        old, new = before[pdir.name], segment_bytes(pdir)
        gone = p["deleted_segments"]
        assert p["status"] == "deleted" and 0 < len(gone) < len(old)
        assert gone == sorted(old)[:len(gone)]  # a prefix
        assert new == {b: data for b, data in old.items() if b not in gone}
        assert p["deleted_by_reason"]["retention_ms"]["segments"] == len(gone)
        assert p["deleted_by_reason"]["retention_ms"]["bytes"] == sum(len(old[b]) for b in gone)
        assert p["new_log_start_offset"] == min(new)
        # the prefix stopped at the first segment that is young enough
        first_kept = load_partition(str(pdir)).segments[0]
        assert NOW - first_kept.largest_timestamp_ms <= retention_ms
        # snapshots of deleted segments went, the others stayed
        assert sorted(pdir.glob("*.snapshot")) == [s for s in snapshots[pdir.name]
                                                   if int(s.stem) not in gone]
        epochs = read_leader_epochs(str(pdir))
        assert epochs[0].start_offset <= min(new)
        assert all(e.start_offset >= min(new) for e in epochs[1:])
        assert not list(pdir.glob("*.deleted"))
    # the start equals the first segment: no checkpoint entry needed
    assert _checkpoint(logs, LOG_START_OFFSET_CHECKPOINT) == {}
    assert inspect_problems(logs) == []


def test_everything_expired_rolls_an_empty_segment_at_the_log_end(
        logs: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ends = {p.name: log_end_offset(load_partition(str(p))) for p in logs.glob("events-*")}
    code, report = _retain(logs, capsys, "--config", "cleanup.policy=delete",
                           "--config", f"retention.ms={DAY}")
    assert code == EXIT_OK
    for p in topic_lines(report["partitions"]):
        pdir = logs / f"{p['topic']}-{p['partition']}"
        leo = ends[pdir.name]
        assert p["rolled"] and p["new_log_start_offset"] == leo == p["log_end_offset"]
        assert p["segments_after"] == 1
        assert sorted(f.name for f in pdir.iterdir() if f.name[0].isdigit()) == [
            f"{leo:020d}.index", f"{leo:020d}.log", f"{leo:020d}.timeindex"]
        assert log_end_offset(load_partition(str(pdir))) == leo
        epochs = read_leader_epochs(str(pdir))
        assert len(epochs) == 1 and epochs[0].start_offset == leo
    assert inspect_problems(logs) == []
    # a second pass deletes nothing and keeps the offsets
    digest = tree_digest(logs)
    code, again = _retain(logs, capsys, "--config", "cleanup.policy=delete",
                          "--config", f"retention.ms={DAY}")
    assert code == EXIT_OK and again["segments_deleted"] == 0
    assert tree_digest(logs) == digest


def test_high_watermark_bounds_deletion(logs: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pdir = logs / "events-0"
    bases = sorted(segment_bytes(pdir))
    hws = _checkpoint(logs, REPLICATION_OFFSET_CHECKPOINT)
    hws[TopicPartition("events", 0)] = bases[2]  # only the first two segments lie below it
    (logs / REPLICATION_OFFSET_CHECKPOINT).write_text(format_offset_checkpoint(hws))
    code, report = _retain(logs, capsys, "--config", "cleanup.policy=delete",
                           "--config", f"retention.ms={DAY}")
    assert code == EXIT_OK
    p0 = next(p for p in topic_lines(report["partitions"]) if p["partition"] == 0)
    assert p0["deleted_segments"] == bases[:2] and not p0["rolled"]
    assert p0["new_log_start_offset"] == bases[2] <= p0["high_watermark"]


def test_log_start_offset_retention_under_compact_keeps_the_checkpoint_entry(
        logs: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pdir = logs / "events-1"
    bases = sorted(segment_bytes(pdir))
    start = bases[3] + 2  # inside the fourth segment (DeleteRecords)
    tp = TopicPartition("events", 1)
    (logs / LOG_START_OFFSET_CHECKPOINT).write_text(format_offset_checkpoint({tp: start}))
    code, report = _retain(logs, capsys, "--config", "cleanup.policy=compact",
                           "--config", "retention.ms=1000")  # ignored without delete
    assert code == EXIT_OK
    p1 = next(p for p in topic_lines(report["partitions"]) if p["partition"] == 1)
    assert p1["deleted_segments"] == bases[:3]
    assert p1["deleted_by_reason"]["log_start_offset"]["segments"] == 3
    assert p1["new_log_start_offset"] == start
    assert _checkpoint(logs, LOG_START_OFFSET_CHECKPOINT) == {tp: start}
    p0 = next(p for p in topic_lines(report["partitions"]) if p["partition"] == 0)
    assert p0["deleted_segments"] == []


def test_size_retention_keeps_at_least_retention_bytes(
        logs: Path, capsys: pytest.CaptureFixture[str]) -> None:
    limit = 40_000
    code, report = _retain(logs, capsys, "--config", "cleanup.policy=delete",
                           "--config", f"retention.bytes={limit}", "--config",
                           "retention.ms=-1", "--allow-aggressive-retention")
    assert code == EXIT_OK
    for p in topic_lines(report["partitions"]):
        remaining = sum(len(b) for b in segment_bytes(
            logs / f"{p['topic']}-{p['partition']}").values())
        assert remaining >= limit
        assert p["deleted_by_reason"]["retention_bytes"]["segments"] > 0
        first_kept = sorted(segment_bytes(logs / f"{p['topic']}-{p['partition']}"))[0]
        assert p["new_log_start_offset"] == first_kept


@pytest.mark.parametrize(("setting", "needle"), [
    ("retention.bytes=40000", "retention.bytes=40000 is below the safety floor"),
    ("retention.ms=60000", "retention.ms=60000 is below the safety floor"),
])
def test_safety_floor_refuses_and_changes_nothing(
        logs: Path, capsys: pytest.CaptureFixture[str], setting: str, needle: str) -> None:
    before = tree_digest(logs)
    code, report = _retain(logs, capsys, "--config", "cleanup.policy=delete",
                           "--config", setting)
    assert code == EXIT_CONFIG
    assert report["type"] == "error" and needle in report["message"]
    assert "--allow-aggressive-retention" in report["remedy"]
    assert tree_digest(logs) == before


def test_dry_run_reports_the_same_plan_and_changes_nothing(
        logs: Path, capsys: pytest.CaptureFixture[str]) -> None:
    before = tree_digest(logs)
    args = ("--config", "cleanup.policy=delete", "--config", f"retention.ms={DAY}")
    code, dry = _retain(logs, capsys, *args, "--dry-run")
    assert code == EXIT_OK and dry["dry_run"]
    assert tree_digest(logs) == before
    assert all(p["status"] == "would_delete" for p in topic_lines(dry["partitions"]))
    code, real = _retain(logs, capsys, *args)
    strip = ("status",)
    assert [{k: v for k,
             v in p.items() if k not in strip} for p in topic_lines(dry["partitions"])] == [
        {k: v for k, v in p.items() if k not in strip} for p in topic_lines(real["partitions"])]


# Runs retention and kills itself (SIGKILL) before storage operation N.
CRASHER = r"""
import sys
from compactor.cli import main
from tests.crash import kill_before
ops = kill_before(int(sys.argv[1]))
code = main(sys.argv[2:])
print("OPS", ops())
sys.exit(code)
"""


@pytest.mark.slow
def test_a_crash_at_any_step_of_deletion_loses_nothing_and_resurrects_nothing(
        logs: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = ["retain", "--assume-kafka-defaults", "--now-ms", str(NOW), "--json", "--config",
            "cleanup.policy=delete",
            "--config", f"retention.ms={DAY}"]
    original = {p.name: segment_bytes(p) for p in logs.glob("events-*")}
    finished = tmp_path / "finished"
    shutil.copytree(logs, finished)
    assert cli_main([args[0], str(finished), *args[1:]]) == EXIT_OK
    capsys.readouterr()
    expected = tree_digest(finished)

    crash_at = 1
    while True:
        work = tmp_path / f"crash-{crash_at}"
        shutil.copytree(logs, work)
        proc = subprocess.run([sys.executable, "-c", CRASHER, str(crash_at), args[0], str(work),
                               *args[1:]], capture_output=True, text=True, check=False,
                              cwd=REPO)
        if proc.returncode == 0:
            break
        assert proc.returncode == -signal.SIGKILL, proc.stderr
        assert cli_main(["recover", str(work)]) == EXIT_OK
        capsys.readouterr()
        for pdir in work.glob("events-*"):
            now = segment_bytes(pdir)
            old = original[pdir.name]
            leo = max(now)
            # what is left is a suffix of the old segments, maybe with the empty rolled one
            kept = {b: d for b, d in now.items() if d or b not in old}
            assert all(old[b] == d for b, d in kept.items() if b in old)
            assert sorted(b for b in kept if b in old) == sorted(old)[len(old) - len(
                [b for b in kept if b in old]):]
            assert all(b == leo and not d for b, d in now.items() if b not in old)
        assert inspect_problems(work) == []
        # the next run reaches the state of an uninterrupted one
        assert cli_main([args[0], str(work), *args[1:]]) == EXIT_OK
        capsys.readouterr()
        assert tree_digest(work) == expected
        shutil.rmtree(work)
        crash_at += 1
    assert crash_at > 10  # every step of a multi-segment deletion was interrupted once


def test_the_recovery_point_moves_up_with_the_log_start(
        logs: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """UnifiedLog.updateLogStartOffset: a recovery point below the new log start offset is
    raised to it (nothing below is left to recover); one above it is kept."""
    from compactor.codec.checkpoints import RECOVERY_POINT_CHECKPOINT

    low = {TopicPartition("events", 0): 0, TopicPartition("events", 1): 10**9}
    (logs / RECOVERY_POINT_CHECKPOINT).write_text(format_offset_checkpoint(low))
    retention_ms = NOW - (DEFAULT_START_MS + SPAN_MS // 2)
    code, report = _retain(logs, capsys, "--assume-kafka-defaults", "--config",
                           "cleanup.policy=delete", "--config", f"retention.ms={retention_ms}")
    assert code == EXIT_OK
    starts = {(p["topic"], p["partition"]): p["new_log_start_offset"]
              for p in topic_lines(report["partitions"])}
    assert starts[("events", 0)] > 0
    points = _checkpoint(logs, RECOVERY_POINT_CHECKPOINT)
    assert points[TopicPartition("events", 0)] == starts[("events", 0)]
    assert points[TopicPartition("events", 1)] == 10**9


def test_a_checkpoint_failure_after_deleting_says_what_changed_and_exits_partial(
        logs: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 28.5: the log start checkpoint cannot be written after segments were deleted.
    Before the fix: exit 3 ("nothing was changed") and no report."""
    (logs / LOG_START_OFFSET_CHECKPOINT).unlink(missing_ok=True)
    (logs / (LOG_START_OFFSET_CHECKPOINT + ".tmp")).mkdir()
    code, report = _retain(logs, capsys, "--config", "retention.ms=3600000")
    assert code == 6
    (error,) = report["log_dir_errors"]
    deleted = [f"{p['topic']}-{p['partition']}" for p in report["partitions"]
               if p["status"] == "deleted"]
    assert deleted and sorted(error["changed"]) == sorted(deleted)
    assert error["step"] == LOG_START_OFFSET_CHECKPOINT and "are deleted" in error["remedy"]


def test_stray_files_in_a_partition_directory_are_reported_not_ignored(
        logs: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 28.9: a file Kafka does not keep in a partition directory was ignored silently.
    It is reported in ``foreign`` (and left alone, as Kafka's loader leaves it)."""
    (logs / "events-0" / "notes.txt").write_text("someone's notes")
    (logs / "events-0" / "00000000000000000000.log.bak").write_bytes(b"copy")
    code, report = _retain(logs, capsys)
    assert code == EXIT_OK
    named = {f["name"] for f in report["foreign"]}
    assert {"events-0/notes.txt", "events-0/00000000000000000000.log.bak"} <= named
    assert (logs / "events-0" / "notes.txt").read_text() == "someone's notes"


def _set_high_watermark(logs: Path, tp: TopicPartition, hw: int | None) -> None:
    """Rewrite ``tp``'s replication-offset-checkpoint entry (``None``: remove it)."""
    entries = _checkpoint(logs, REPLICATION_OFFSET_CHECKPOINT)
    entries.pop(tp, None)
    if hw is not None:
        entries[tp] = hw
    (logs / REPLICATION_OFFSET_CHECKPOINT).write_text(format_offset_checkpoint(entries))


def test_a_missing_high_watermark_is_kafkas_zero_and_nothing_above_it_goes(
        logs: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Kafka loads a partition without a replication-offset-checkpoint entry with high
    watermark 0 (``Partition.createLog``: ``orElse(0L)``), and ``deletableSegments`` deletes no
    segment that ends past it. Before the fix the tool took the log end: with the entry of a
    partition at 600 one segment went, with the entry removed every expired one did and the
    active segment rolled (issue 52.1). The expected segments come from the file names."""
    tp = TopicPartition("events", 0)
    bases = sorted(int(p.name[:20]) for p in (logs / "events-0").glob("*.log"))
    hw = bases[2] + 5  # inside the third segment: the first two end at or below it
    expected = [b for b, nxt in zip(bases, bases[1:], strict=False) if nxt <= hw]
    assert len(expected) == 2
    _set_high_watermark(logs, tp, hw)
    _set_high_watermark(logs, TopicPartition("events", 1), None)
    before = segment_bytes(logs / "events-1")
    code, report = _retain(logs, capsys, "--topic-config", "events:retention.ms=3600000")
    events = {p["partition"]: p for p in topic_lines(report["partitions"])}
    assert code == EXIT_OK and events[0]["deleted_segments"] == expected
    assert events[1]["deleted_segments"] == [] and segment_bytes(logs / "events-1") == before
    # 0, clamped to the log start offset (UnifiedLog.updateHighWatermark)
    assert events[1]["high_watermark"] == events[1]["log_start_offset"] == 0
    assert events[1]["high_watermark_unknown"] is True and "high_watermark_unknown" not in events[0]
    assert report["high_watermark_unknown"] == ["events-1"]
    # the operator's word for an archive whose checkpoints were not copied
    code, report = _retain(logs, capsys, "--topic-config", "events:retention.ms=3600000",
                           "--assume-committed")
    events = {p["partition"]: p for p in topic_lines(report["partitions"])}
    assert code == EXIT_OK and events[1]["deleted_segments"]
    assert report["assume_committed"] is True and report["high_watermark_unknown"] == ["events-1"]


def test_a_future_replica_is_retained_as_kafka_retains_it(
        logs: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A ``-future`` directory (a replica being moved here from another log dir) is retained
    by Kafka (``LogManager.cleanupLogs``: ``futureLog.deleteOldSegments``) under its
    partition's checkpoint entries in this log dir; before the fix the tool never retained
    it (issue 52.6). The expected segments come from the file names."""
    future = logs / "events-0.0123456789abcdef0123456789abcdef-future"
    (logs / "events-0").rename(future)
    bases = sorted(int(p.name[:20]) for p in future.glob("*.log"))
    before = segment_bytes(future)
    code, report = _retain(logs, capsys, "--topic-config", "events:retention.ms=3600000")
    (line,) = [p for p in report["partitions"] if p.get("copy") == "future"]
    assert code == EXIT_OK and line["dir"] == future.name and line["status"] == "deleted"
    # every segment expired: all go, after an empty one is rolled at the log end (§5.7)
    assert line["deleted_segments"] == bases and line["rolled"] is True
    after = segment_bytes(future)
    assert list(after) == [line["log_end_offset"]] and after[line["log_end_offset"]] == b""
    assert before  # (the data was there)
    # the log starts at its first segment: no entry, as Kafka writes the file
    # (LogManager.checkpointLogStartOffsetsInDir)
    assert TopicPartition("events", 0) not in _checkpoint(logs, LOG_START_OFFSET_CHECKPOINT)
    assert inspect_problems(logs) == []
