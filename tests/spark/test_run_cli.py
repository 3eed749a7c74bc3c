"""``compactor run`` (compaction and retention per topic ``cleanup.policy``) and the retention
part of ``compactor plan``, end to end on the generated log dir with the test's Spark session."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from compactor.cli import main as cli_main
from compactor.codec.checkpoints import CLEANER_OFFSET_CHECKPOINT, parse_offset_checkpoint
from compactor.errors import EXIT_CONFIG, EXIT_OK
from compactor.log.layout import load_partition, log_end_offset
from compactor.model import TopicPartition
from compactor.tools.ops.generator import DEFAULT_START_MS
from tests.helpers import (
    inspect_problems,
    records_of,
    report_line,
    segment_bytes,
    topic_lines,
    tree_digest,
)

pytestmark = pytest.mark.spark

DAY = 86_400_000
NOW = DEFAULT_START_MS + 3 * DAY


def test_compact_delete_compacts_then_ages_out_to_one_empty_segment(
        spark, small_log: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Kafka's testCleansCombinedCompactAndDeleteTopic (``LogCleanerIntegrationTest``)."""
    policy = ["--config", "cleanup.policy=compact,delete", "--json"]
    ends = {p.name: log_end_offset(load_partition(str(p))) for p in small_log.glob("*-[0-9]")}
    # retention.ms far away: compaction only
    assert cli_main(["run", "--assume-kafka-defaults", str(small_log), "--now-ms", str(NOW),
                     *policy,
                     "--config", f"retention.ms={30 * DAY}"]) == EXIT_OK
    first = report_line(capsys)
    assert all(p["status"] == "cleaned" for p in topic_lines(first["compaction"]["partitions"]))
    assert first["retention"]["segments_deleted"] == 0
    assert inspect_problems(small_log) == []
    # everything aged past retention.ms: one empty segment at the log end per partition
    later = str(NOW + 60 * DAY)
    assert cli_main(["run", "--assume-kafka-defaults", str(small_log), "--now-ms", later, *policy,
                     "--config", f"retention.ms={30 * DAY}"]) == EXIT_OK
    second = report_line(capsys)
    for p in topic_lines(second["retention"]["partitions"]):
        pdir = small_log / f"{p['topic']}-{p['partition']}"
        leo = ends[pdir.name]
        assert p["rolled"] and p["new_log_start_offset"] == leo
        assert segment_bytes(pdir) == {leo: b""}
    assert inspect_problems(small_log) == []
    # a fresh round afterwards works and changes nothing
    digest = tree_digest(small_log)
    assert cli_main(["run", "--assume-kafka-defaults", str(small_log), "--now-ms", later, *policy,
                     "--config", f"retention.ms={30 * DAY}"]) == EXIT_OK
    third = report_line(capsys)
    assert third["retention"]["segments_deleted"] == 0
    assert all(p["status"] == "skipped" for p in topic_lines(third["compaction"]["partitions"]))
    assert {k: v for k, v in tree_digest(small_log).items()
            if not k.endswith(CLEANER_OFFSET_CHECKPOINT)} == {
        k: v for k, v in digest.items() if not k.endswith(CLEANER_OFFSET_CHECKPOINT)}


def test_each_topic_gets_what_its_policy_says(
        spark, small_log: Path, capsys: pytest.CaptureFixture[str]) -> None:
    before = {p.name: segment_bytes(p) for p in small_log.glob("*-[0-9]")}
    assert cli_main(["run", "--assume-kafka-defaults", str(small_log), "--now-ms", str(NOW),
                     "--json",
                     "--topic-config", "orders-v2:cleanup.policy=delete",
                     "--topic-config", f"orders-v2:retention.ms={DAY}",
                     "--topic-config", "user-profiles:cleanup.policy=compact",
                     "--topic-config", f"user-profiles:retention.ms={DAY}"]) == EXIT_OK
    report = report_line(capsys)
    compaction = {p["topic"]: p for p in topic_lines(report["compaction"]["partitions"])}
    retention = {(p["topic"],
                  p["partition"]): p for p in topic_lines(report["retention"]["partitions"])}
    assert compaction["orders-v2"]["status"] == "skipped"  # delete only: no compaction
    assert compaction["user-profiles"]["status"] == "cleaned"
    for (topic, partition), p in retention.items():
        pdir = small_log / f"{topic}-{partition}"
        if topic == "orders-v2":  # every record is older than a day: all gone, offsets kept
            assert p["rolled"] and p["deleted_by_reason"]["retention_ms"]["segments"] == len(
                before[pdir.name])
        else:  # compact only: time retention does not apply, the records are compacted
            assert p["deleted_segments"] == []
            assert records_of(segment_bytes(pdir))
    cleaner = parse_offset_checkpoint((small_log / CLEANER_OFFSET_CHECKPOINT).read_text())
    assert TopicPartition("user-profiles", 0) in cleaner
    assert TopicPartition("orders-v2", 0) not in cleaner
    assert inspect_problems(small_log) == []


def test_plan_shows_retention_and_run_dry_run_changes_nothing(
        spark, small_log: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = ["--now-ms", str(NOW), "--json", "--config", "cleanup.policy=compact,delete",
            "--config", f"retention.ms={DAY}"]
    before = tree_digest(small_log)
    assert cli_main(["plan", "--assume-kafka-defaults", str(small_log), *args]) == EXIT_OK
    plan = report_line(capsys)
    for p in topic_lines(plan["partitions"]):
        assert p["status"] == "would_clean"
        assert p["retention"]["status"] == "would_delete" and p["retention"]["rolled"]
    assert cli_main(["run", "--assume-kafka-defaults", str(small_log), *args,
                     "--dry-run"]) == EXIT_OK
    dry = report_line(capsys)
    assert dry["dry_run"] and dry["compaction"]["command"] == "plan"
    assert all(p["status"] == "would_delete" for p in topic_lines(dry["retention"]["partitions"]))
    assert tree_digest(small_log) == before


def test_run_refuses_aggressive_retention(
        spark, small_log: Path, capsys: pytest.CaptureFixture[str]) -> None:
    before = tree_digest(small_log)
    code = cli_main(["run", "--assume-kafka-defaults", str(small_log), "--now-ms", str(NOW),
                     "--json",
                     "--config", "cleanup.policy=delete", "--config", "retention.ms=0"])
    assert code == EXIT_CONFIG
    error = report_line(capsys)
    assert "retention.ms=0 is below the safety floor" in error["message"]
    assert tree_digest(small_log) == before


def test_runs_are_recorded_in_the_runs_delta_table(
        spark, small_log: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from deltalake import DeltaTable

    state = tmp_path / "state"
    assert cli_main(["run", "--assume-kafka-defaults", str(small_log), "--now-ms", str(NOW),
                     "--json", "--state-dir",
                     str(state), "--config", "cleanup.policy=compact,delete",
                     "--config", f"retention.ms={DAY}"]) == EXIT_OK
    report = report_line(capsys)
    rows = DeltaTable(str(state / "runs")).to_pyarrow_table().to_pylist()
    by = {(r["command"], r["topic"], r["partition"]): r for r in rows}
    assert len(rows) == 2 * len(report["compaction"]["partitions"])
    for p in topic_lines(report["compaction"]["partitions"]):
        row = by[("compact", p["topic"], p["partition"])]
        assert row["run_id"] == report["compaction"]["run_id"]
        assert (row["records_in"], row["records_out"], row["status"]) == (
            p["records_in"], p["records_out"], p["status"])
        assert json.loads(row["report_json"]) == p
    for p in topic_lines(report["retention"]["partitions"]):
        row = by[("retain", p["topic"], p["partition"])]
        assert row["segments_deleted"] == len(p["deleted_segments"])
        assert row["segments_before"] == p["segments_before"]
    # the state dir may not live in the log dir
    assert cli_main(["retain", "--assume-kafka-defaults", str(small_log), "--json", "--state-dir",
                     str(small_log / "state")]) == EXIT_CONFIG
