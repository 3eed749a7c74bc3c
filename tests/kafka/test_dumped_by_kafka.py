"""Kafka's own ``DumpLogSegments`` over every segment file the suite's commands wrote.

Every test that works on a ``small_log`` copy (tests/conftest.py) leaves behind the segment files
our commands put in place: compactions, retention, erasures, recoveries, through the CLI, the
Python API and the jobs. This test runs last (``pytest_collection_modifyitems``) and hands all of
them to Kafka's tool, twice, as issue 29 asks: ``--deep-iteration --index-sanity-check`` (every
record of every batch, each index's sanity check) and ``--verify-index-only`` (every index entry
against the log). It also writes some of its own (a ``compactor run`` with compaction and
retention) so that, run alone, it is never empty.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from compactor.cli import main as cli_main
from compactor.errors import EXIT_OK
from compactor.tools.ops.generator import DEFAULT_START_MS
from tests.helpers import WRITTEN_SEGMENT_FILES
from tests.kafka.broker import _kafka_empty_batch_entry, dump_log_segments

pytestmark = [pytest.mark.kafka_broker, pytest.mark.spark]

DAY = 86_400_000
# one --files argument stays far below Linux's 128 KiB limit for a single argument
CHUNK = 400


def _with_logs(files: list[Path]) -> list[Path]:
    """``files`` plus the ``.log`` each index file is checked against, each once, in order."""
    out: dict[Path, None] = {}
    for f in sorted(set(files)):
        if f.suffix != ".log" and f.with_suffix(".log").exists():
            out[f.with_suffix(".log")] = None
        out[f] = None
    return list(out)


def test_kafka_reads_every_segment_the_suite_wrote(spark, small_log: Path) -> None:
    before = {p: p.stat().st_ino for p in small_log.glob("*-*/*.*")}
    assert cli_main(["run", "--assume-kafka-defaults", str(small_log), "--quiet",
                     "--now-ms", str(DEFAULT_START_MS + 3 * DAY),
                     "--config", "cleanup.policy=compact,delete",
                     "--config", f"retention.ms={2 * DAY}"]) == EXIT_OK
    own = [p for p in small_log.glob("*-*/*.*")
           if p.suffix in (".log", ".index", ".timeindex", ".txnindex")
           and before.get(p) != p.stat().st_ino]
    assert own, "the run wrote nothing: the test would judge only other tests' files"
    files = _with_logs([f for f in [*own, *WRITTEN_SEGMENT_FILES] if f.exists()])
    print(f"DumpLogSegments over {len(files)} files "
          f"({len({f.parent for f in files})} partition dirs)")
    problems = []
    for start in range(0, len(files), CHUNK):
        chunk = files[start:start + CHUNK]
        for args in (("--deep-iteration", "--index-sanity-check"), ("--verify-index-only",)):
            problems += dump_log_segments(chunk, *args)
    assert problems == [], problems[:40]


def test_only_kafkas_own_entry_at_an_emptied_batch_is_accepted(spark, small_log: Path,
                                                                tmp_path: Path) -> None:
    """DumpLogSegments reports "timestamp mismatch ... log timestamp: -1" for a time index
    entry at a batch the cleaner emptied; Kafka's own cleaner writes that entry (the same
    bytes: tests/kafka/test_cleaner_differential.py), so the judge accepts it, but only
    exactly it: the same entry one millisecond off is reported."""
    import struct

    # within producer.id.expiration.ms of the last batches: their producers stay active
    assert cli_main(["compact", "--assume-kafka-defaults", str(small_log), "--quiet",
                     "--config", "cleanup.policy=compact",
                     "--now-ms", str(DEFAULT_START_MS + 3 * 3_600_000)]) == EXIT_OK
    at_empty = []
    for index in sorted(small_log.glob("*-*/*.timeindex")):
        data = index.read_bytes()
        for at in range(0, len(data) - 11, 12):
            stamp = struct.unpack_from(">q", data, at)[0]
            if _kafka_empty_batch_entry(index, f"Index timestamp: {stamp}, log timestamp: -1"):
                at_empty.append((index, at))
    assert at_empty, "no entry at an emptied batch: pick another log"
    index, at = at_empty[0]
    files = [index.with_suffix(".log"), index]
    assert dump_log_segments(files, "--verify-index-only") == []
    # off by one, in a copy (the suite's own files stay as the tool wrote them)
    broken = tmp_path / "broken"
    shutil.copytree(index.parent, broken)
    index = broken / index.name
    files = [index.with_suffix(".log"), index]
    data = bytearray(index.read_bytes())
    struct.pack_into(">q", data, at, struct.unpack_from(">q", data, at)[0] + 1)
    index.write_bytes(bytes(data))
    problems = dump_log_segments(files, "--verify-index-only")
    assert any("timestamp mismatch" in p for p in problems), problems
