"""``inspect --verify`` reports damage a broker would act on (issue 51.11): a ``.timeindex``
whose last entry is below the segment's largest timestamp (a broker takes it as the segment's
largest timestamp, which ``retention.ms`` reads) or whose entry is below the largest timestamp
indexed before it, and a ``meta.properties`` with bytes appended (which ``retain`` refuses).
Before the fix both passed ``--verify`` with exit 0. The expected timestamps come from the
batches, read with kafka-python (an independent parser)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from kafka.record.memory_records import MemoryRecords

from compactor.cli import main as cli_main
from compactor.codec.indexes import decode_time_index, encode_time_index
from compactor.errors import EXIT_FAILURE, EXIT_OK
from compactor.tools.ops.generator import GeneratorConfig, generate
from tests.helpers import inspect_problems

GEN = GeneratorConfig(topics=("events",), partitions=1, records_per_partition=800,
                      distinct_keys=50, segment_bytes=8 * 1024, legacy_records=0, seed=11,
                      metadata_log=False)


@pytest.fixture()
def logs(tmp_path_factory: pytest.TempPathFactory, tmp_path: Path) -> Path:
    template = tmp_path_factory.getbasetemp() / "inspect-damage"
    if not template.exists():
        generate(str(template), GEN)
    dest = tmp_path / "logs"
    shutil.copytree(template, dest)
    return dest


def _max_timestamp(log: Path) -> int:
    records = MemoryRecords(log.read_bytes())
    out = -1
    while records.has_next():
        batch = records.next_batch()
        out = max([out, *(r.timestamp for r in batch)])
    return out


def test_a_clean_log_dir_has_no_problem(logs: Path) -> None:
    assert inspect_problems(logs) == []


def test_a_time_index_whose_last_entry_is_below_the_segments_largest_timestamp(
        logs: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pdir = logs / "events-0"
    log = sorted(pdir.glob("*.log"))[0]  # a rolled segment
    base = int(log.name[:20])
    index = log.with_suffix(".timeindex")
    entries = decode_time_index(index.read_bytes(), base)
    assert entries and entries[-1].timestamp == _max_timestamp(log)  # as Kafka writes it
    # the final entry Kafka appends as the segment rolls (onBecomeInactiveSegment) is missing:
    # what is left is monotonic, and its last timestamp is too old
    stale = entries[:-1]
    assert len(stale) >= 1 and stale[-1].timestamp < entries[-1].timestamp
    index.write_bytes(encode_time_index(stale, base))
    problems = [p for p in inspect_problems(logs) if p.path == str(index)]
    assert [p.code for p in problems] == ["CORRUPT_INDEX"] * len(problems) and problems
    assert any("largest timestamp" in p.message and p.position == (len(stale) - 1) * 12
               for p in problems)
    assert cli_main(["inspect", "--verify", str(logs)]) == EXIT_FAILURE
    capsys.readouterr()


@pytest.mark.parametrize("appended", [b"\xff\xfe\x00", b"\x00\x00garbage\n"])
def test_meta_properties_with_bytes_appended(logs: Path, capsys: pytest.CaptureFixture[str],
                                             appended: bytes) -> None:
    meta = logs / "meta.properties"
    assert cli_main(["inspect", "--verify", str(logs)]) == EXIT_OK
    meta.write_bytes(meta.read_bytes() + appended)
    problems = [p for p in inspect_problems(logs) if p.path == str(meta)]
    assert len(problems) == 1, problems
    assert cli_main(["inspect", "--verify", str(logs)]) == EXIT_FAILURE
    capsys.readouterr()
