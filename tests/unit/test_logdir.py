from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from compactor.codec.indexes import (
    BatchIndexInfo,
    build_indexes,
    encode_offset_index,
    encode_time_index,
)
from compactor.codec.records import NewRecord, NewRecordBatch, encode_batch
from compactor.codec.segment import decode_segment, iter_batches
from compactor.log.layout import (
    load_partition,
    open_log_dir,
    parse_partition_dir_name,
)
from compactor.log.recovery import (
    plan_recovery,
    recover_partition,
)
from compactor.model import TopicPartition


@pytest.mark.parametrize(("name", "expected"), [
    ("orders-0", TopicPartition("orders", 0)),
    ("my-topic-with-dashes-12", TopicPartition("my-topic-with-dashes", 12)),
    ("__consumer_offsets-49", TopicPartition("__consumer_offsets", 49)),
    ("t.with.dots-3", TopicPartition("t.with.dots", 3)),
    ("orders-0.0123456789abcdef0123456789abcdef-delete", None),
    ("orders-0.0123456789abcdef0123456789abcdef-future", None),
    ("orders-0.0123456789abcdef0123456789abcdef-stray", None),
    ("orders", None),
    ("orders-", None),
    ("-5", None),
    ("orders-x", None),
])
def test_partition_dir_names(name: str, expected: TopicPartition | None) -> None:
    assert parse_partition_dir_name(name) == expected


def test_open_log_dir_lists_copies_and_foreign_entries_apart_from_partitions(
        small_log: Path) -> None:
    (small_log / "orders-v2-0.abc-delete").mkdir()
    (small_log / "orders-v2-1.abc-future").mkdir()
    (small_log / "backup").mkdir()
    (small_log / "remote-log-index-cache").mkdir()  # Kafka's own (RemoteIndexCache)
    (small_log / "notes.txt").write_text("x")
    log_dir = open_log_dir(str(small_log))
    assert log_dir.partitions == tuple(sorted(
        TopicPartition(t, p) for t in ("orders-v2", "user-profiles") for p in (0, 1)))
    assert {c.name for c in log_dir.copies} == {"orders-v2-0.abc-delete",
                                                "orders-v2-1.abc-future"}
    assert {(f.name, f.kind) for f in log_dir.foreign} == {("backup", "directory"),
                                                          ("notes.txt", "file")}


def test_duplicate_and_non_canonical_partition_dirs_are_refused(small_log: Path) -> None:
    shutil.copytree(small_log / "orders-v2-1", small_log / "orders-v2-01")
    (small_log / "user-profiles-0").rename(small_log / "user-profiles-00")
    log_dir = open_log_dir(str(small_log))
    assert log_dir.partitions == (TopicPartition("orders-v2", 0), TopicPartition("user-profiles",
                                                                                 1))
    refused = {r.name: r.error.message for r in log_dir.refused}
    assert set(refused) == {"orders-v2-01", "orders-v2-1", "user-profiles-00"}
    assert "duplicate log directories" in refused["orders-v2-1"]
    assert "leading zeros" in refused["user-profiles-00"]


def test_load_partition_lists_segments(small_log: Path) -> None:
    log = load_partition(str(small_log / "orders-v2-0"))
    assert len(log.segments) > 3
    assert [s.base_offset for s in log.segments] == sorted(s.base_offset for s in log.segments)
    for seg in log.segments:
        data = Path(seg.log_path).read_bytes()
        batches = list(iter_batches(data))
        assert seg.size_bytes == len(data)
        assert seg.base_offset == batches[0].base_offset
        assert seg.largest_timestamp_ms == max(b.max_timestamp for b in batches)
        assert seg.mtime_ms == os.stat(seg.log_path).st_mtime_ns // 1_000_000
        assert seg.has_index and seg.has_time_index
    assert log.active_segment == log.segments[-1]
    assert log.snapshots == tuple(s.base_offset for s in log.segments[1:])


# --- recovery of interrupted swaps -----------------------------------------------------------

def segment_bytes(base: int, count: int, tag: bytes) -> bytes:
    return b"".join(
        encode_batch(NewRecordBatch(base_offset=base + i, records=[
            NewRecord(offset_delta=0, timestamp=1000 + base + i, key=b"k%d" % (i % 3),
                      value=tag)]))
        for i in range(count))


def write_segment(pdir: Path, base: int, data: bytes, suffix: str = "") -> None:
    infos = [BatchIndexInfo(position=b.position, size_in_bytes=b.size_in_bytes,
                            last_offset=b.last_offset, max_timestamp=b.max_timestamp)
             for b in iter_batches(data)]
    offsets, times = build_indexes(infos, base, index_interval_bytes=100)
    stem = pdir / f"{base:020d}"
    Path(f"{stem}.log{suffix}").write_bytes(data)
    Path(f"{stem}.index{suffix}").write_bytes(encode_offset_index(offsets, base))
    Path(f"{stem}.timeindex{suffix}").write_bytes(encode_time_index(times, base))


def content(pdir: Path) -> list[tuple[int, bytes]]:
    out = []
    for name in sorted(os.listdir(pdir)):
        if name.endswith(".log"):
            for b in decode_segment((pdir / name).read_bytes()):
                out += [(r.offset, r.value) for r in b.records()]
    return out


OLD = [(0, 10), (10, 10)]          # two old segments [0, 10) and [10, 20)
ACTIVE = (20, 5)                   # untouched active segment


def build_state(pdir: Path, step: str) -> None:
    """Lay out the partition as it is after a crash at ``step`` of the swap protocol, where
    one new segment at base 0 replaces the two old ones."""
    pdir.mkdir()
    new = segment_bytes(0, 20, b"new")
    write_segment(pdir, ACTIVE[0], segment_bytes(*ACTIVE, b"active"))
    (pdir / f"{0:020d}.snapshot").write_bytes(b"")
    (pdir / f"{10:020d}.snapshot").write_bytes(b"")
    old_state = {"cleaned": "", "half-swap": "", "swapped": "", "old-half-deleted": ".deleted",
                 "old-deleted": ".deleted", "half-final": ".deleted", "final": ".deleted"}[step]
    for base, count in OLD:
        suffix = old_state
        if step == "old-half-deleted" and base == 10:
            suffix = ""
        write_segment(pdir, base, segment_bytes(base, count, b"old"), suffix)
    if step in ("final", "half-final"):
        # the new segment at base 0 already has (some of) its final names
        write_segment(pdir, 0, new, ".swap" if step == "half-final" else "")
        if step == "half-final":
            os.rename(pdir / f"{0:020d}.log.swap", pdir / f"{0:020d}.log")
        return
    new_suffix = {"cleaned": ".cleaned", "half-swap": ".cleaned", "swapped": ".swap",
                  "old-half-deleted": ".swap", "old-deleted": ".swap"}[step]
    write_segment(pdir, 0, new, new_suffix)
    if step == "half-swap":
        os.rename(pdir / f"{0:020d}.log.cleaned", pdir / f"{0:020d}.log.swap")


OLD_CONTENT = [(o, b"old") for o in range(20)] + [(o, b"active") for o in range(20, 25)]
NEW_CONTENT = [(o, b"new") for o in range(20)] + [(o, b"active") for o in range(20, 25)]


@pytest.mark.parametrize(("step", "expected"), [
    ("cleaned", OLD_CONTENT),
    ("half-swap", OLD_CONTENT),
    ("swapped", NEW_CONTENT),
    ("old-half-deleted", NEW_CONTENT),
    ("old-deleted", NEW_CONTENT),
    ("half-final", NEW_CONTENT),
    ("final", NEW_CONTENT),
])
def test_recovery_after_a_crash_at_each_swap_step(tmp_path: Path, step: str,
                                                  expected: list) -> None:
    pdir = tmp_path / "t-0"
    build_state(pdir, step)
    recover_partition(str(pdir))
    names = sorted(os.listdir(pdir))
    assert not [n for n in names if n.endswith((".cleaned", ".swap", ".deleted"))], names
    assert content(pdir) == expected
    bases = [n for n in names if n.endswith(".log")]
    if expected is NEW_CONTENT:
        assert bases == [f"{0:020d}.log", f"{20:020d}.log"]
        if step in ("swapped", "old-half-deleted", "old-deleted"):
            # files in the replaced offset range go, snapshots included (LogLoader step 3)
            assert f"{10:020d}.snapshot" not in names
    else:
        assert bases == [f"{0:020d}.log", f"{10:020d}.log", f"{20:020d}.log"]
    # Recovery is idempotent: a second run (e.g. after a crash during the first) changes nothing.
    assert recover_partition(str(pdir)).is_empty


def test_plan_recovery_deletes_orphan_indexes() -> None:
    plan = plan_recovery([f"{5:020d}.index", f"{5:020d}.timeindex", f"{0:020d}.log",
                          f"{0:020d}.index"], lambda n: None)
    assert plan.deletes == (f"{5:020d}.index", f"{5:020d}.timeindex")
    assert plan.renames == ()
