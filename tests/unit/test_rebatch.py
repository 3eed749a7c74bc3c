"""Re-batching rules of Kafka's ``MemoryRecords.filterTo`` for cases the generated logs rarely
reach."""

from __future__ import annotations

import pytest

from compactor.cleaner.policy import BatchDecision, BatchRetention
from compactor.cleaner.rebatch import SegmentBuilder, assemble_segment, filter_batch
from compactor.cleaner.rewrite import PURE
from compactor.codec.compression import Codec
from compactor.codec.indexes import decode_time_index
from compactor.codec.legacy import LegacyRecord, encode_message_set
from compactor.codec.records import NewRecord, NewRecordBatch, encode_batch
from compactor.codec.segment import iter_batches


def _decision(retention: BatchRetention) -> BatchDecision:
    return BatchDecision(retention=retention, aborted=False, discard_records=False,
                         retain_deletes=True, marker_horizon=False)


def _legacy_wrapper() -> object:
    data = encode_message_set([LegacyRecord(offset=o, key=b"k", value=b"v", timestamp=10 + o)
                               for o in (5, 6, 7)], magic=1, codec=Codec.GZIP)
    (batch,) = iter_batches(data)
    return batch


def test_legacy_wrapper_becomes_one_v2_batch_of_the_retained_records() -> None:
    batch = _legacy_wrapper()
    out = filter_batch(batch, _decision(BatchRetention.DELETE_EMPTY), {5}, now_ms=0,
                       delete_retention_ms=0)
    (rebuilt,) = iter_batches(out.data)
    assert (rebuilt.magic, rebuilt.base_offset, rebuilt.last_offset) == (2, 6, 7)
    assert rebuilt.compression == Codec.GZIP and rebuilt.delete_horizon_ms is None
    assert [r.offset for r in rebuilt.records()] == [6, 7]


def test_legacy_entry_keeping_a_tombstone_gets_a_delete_horizon_when_cleaned() -> None:
    """Kafka 4.0+ converts v0/v1 entries to v2 before the delete-horizon check (KAFKA-13093),
    so a kept tombstone is timed like a v2 one: horizon = now + delete.retention.ms."""
    data = encode_message_set([LegacyRecord(offset=o, key=b"k%d" % o, value=None if o == 6
                                            else b"v", timestamp=10 + o) for o in (5, 6, 7)],
                              magic=1, codec=Codec.GZIP)
    (batch,) = iter_batches(data)
    cleaned = filter_batch(batch, _decision(BatchRetention.DELETE_EMPTY), {5}, now_ms=1_000,
                           delete_retention_ms=500)
    (rebuilt,) = iter_batches(cleaned.data)
    assert rebuilt.magic == 2 and rebuilt.delete_horizon_ms == 1_500
    assert [(r.offset, r.value) for r in rebuilt.records()] == [(6, None), (7, b"v")]
    # an erasure rewrite is no cleaning: no horizon; a cleaning without tombstones: none either
    erased = filter_batch(batch, _decision(BatchRetention.DELETE_EMPTY), {5}, now_ms=1_000,
                          delete_retention_ms=500, set_delete_horizon=False)
    assert next(iter_batches(erased.data)).delete_horizon_ms is None
    no_tombstone = filter_batch(batch, _decision(BatchRetention.DELETE_EMPTY), {6}, now_ms=1_000,
                                delete_retention_ms=500)
    assert next(iter_batches(no_tombstone.data)).delete_horizon_ms is None


def test_emptied_legacy_entry_ending_the_round_becomes_an_empty_v2_header() -> None:
    batch = _legacy_wrapper()
    assert filter_batch(batch, _decision(BatchRetention.DELETE_EMPTY), {5, 6, 7}, now_ms=0,
                        delete_retention_ms=0).data is None
    out = filter_batch(batch, _decision(BatchRetention.RETAIN_EMPTY), {5, 6, 7}, now_ms=0,
                       delete_retention_ms=0)
    (empty,) = iter_batches(out.data)
    assert (empty.magic, empty.records_count, empty.base_offset, empty.last_offset,
            empty.producer_id) == (2, 0, 5, 7, -1)
    # no timestamp: its records are gone, so a lookup by time must not land on it
    assert batch.max_timestamp == 17 and (empty.base_timestamp, empty.max_timestamp) == (-1, -1)


def test_group_ending_early_keeps_a_placeholder_and_single_segment_groups_do_not() -> None:
    first = encode_batch(NewRecordBatch(base_offset=0, records=[
        NewRecord(offset_delta=0, timestamp=1, key=b"a", value=b"1")]))
    (last,) = iter_batches(encode_batch(NewRecordBatch(base_offset=9, producer_id=4, records=[
        NewRecord(offset_delta=0, timestamp=2, key=b"b", value=b"2")])))
    files = assemble_segment(0, [first], [], last_source_batch=last, source_segments=2,
                             index_interval_bytes=4096, segment_index_bytes=1024)
    tail = list(iter_batches(files.log))[-1]
    assert (tail.base_offset, tail.last_offset, tail.records_count, tail.producer_id) == (
        9, 9, 0, -1)
    # no timestamp and no codec: a lookup by time must not land on a batch without records
    assert (tail.base_timestamp, tail.max_timestamp, tail.compression) == (-1, -1, 0)
    assert decode_time_index(files.time_index, 0)[-1].timestamp == 1
    single = assemble_segment(0, [first], [], last_source_batch=last, source_segments=1,
                              index_interval_bytes=4096, segment_index_bytes=1024)
    assert single.log == first
    # the builder says when it kept one (the report counts them: a difference from Kafka's
    # cleaner, which keeps none there)
    for segments, kept in ((2, True), (1, False)):
        builder = SegmentBuilder(0, lambda _: None)
        builder.append(first)
        assert builder.finish([], last_source_batch=last, source_segments=segments,
                              index_interval_bytes=4096,
                              segment_index_bytes=1024).placeholder is kept


def test_a_run_of_batches_appended_at_once_builds_what_one_by_one_builds() -> None:
    """``SegmentBuilder.append_run`` (the native writer's chunk of output batches, one write)
    against ``append`` batch by batch: the same bytes written, indexes, size and checksum."""
    batches = [encode_batch(NewRecordBatch(base_offset=o * 3, records=[
        NewRecord(offset_delta=d, timestamp=100 + o * 7 + d, key=b"k%d" % d, value=b"v" * o)
        for d in range(1 + o % 3)])) for o in range(40)]
    one, run = [], []
    by_one, by_run = SegmentBuilder(0, one.append), SegmentBuilder(0, run.append)
    for entry in batches[:5]:
        by_one.append(entry)
        by_run.append(entry)
    for entry in batches[5:]:
        by_one.append(entry)
    by_run.append_run(b"".join(batches[5:20]), [len(b) for b in batches[5:20]])
    by_run.append_run(b"", [])
    by_run.append_run(b"".join(batches[20:]), [len(b) for b in batches[20:]])
    assert b"".join(run) == b"".join(one) and len(run) == 5 + 2
    done = [b.finish([], last_source_batch=None, source_segments=1, index_interval_bytes=64,
                     segment_index_bytes=4096) for b in (by_one, by_run)]
    assert done[0] == done[1] and done[0].batches == 40 and len(done[0].index) > 8
    with pytest.raises(ValueError, match="40 batches"):
        SegmentBuilder(0, run.append).append_run(b"".join(batches) + b"x",
                                                 [len(b) for b in batches])


def test_a_segment_beyond_the_relative_offset_range_is_a_clear_error(tmp_path) -> None:
    """A legacy segment whose offsets lie more than 2^31 - 1 above its base (Kafka splits it
    when cleaning, ``LocalLog.splitOverflowedSegment``) is refused with a located error and leaves
    no .cleaned file."""
    from compactor.cleaner.policy import PartitionInput
    from compactor.config import TopicConfig
    from compactor.log.layout import load_partition
    from compactor.spark.writer import write_group

    far = 2**31 + 10
    pdir = tmp_path / "t-0"
    pdir.mkdir()
    data = encode_message_set([LegacyRecord(offset=o, key=b"k%d" % o, value=b"v" * 5000,
                                            timestamp=1)
                               for o in (0, far)], magic=1)  # 5 kB: both get index entries
    (pdir / f"{0:020d}.log").write_bytes(data)
    (pdir / f"{far + 1:020d}.log").write_bytes(b"")
    part = load_partition(str(pdir))
    inp = PartitionInput(path=str(pdir), segments=part.segments,
                         config=TopicConfig(cleanup_policy=frozenset({"compact"})),
                         cleaner_checkpoint=None, log_start_checkpoint=None,
                         replication_checkpoint=None, aborted_txns=(), now_ms=10)
    decisions = {(0, b.position): _decision(BatchRetention.DELETE_EMPTY)
                 for b in iter_batches(data)}
    message = write_group(inp, [0], decisions, set(), first_dirty=0, engine=PURE)
    assert message.error is not None
    assert message.error["code"] == "UNSUPPORTED_FORMAT"
    assert message.error["path"].endswith(f"{0:020d}.log") and message.error["base_offset"] == 0
    assert "cannot be indexed" in message.error["message"]
    assert not list(pdir.glob("*.cleaned"))
