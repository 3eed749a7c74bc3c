"""The pure compaction rules against the scenarios of Kafka's own tests (``LogCleanerTest``,
``LogCleanerManagerTest``), plus a Hypothesis property: the reference round satisfies the
invariants of :func:`tests.helpers.check_invariants` on random logs."""

from __future__ import annotations

import pytest
from hypothesis import event, given
from hypothesis import strategies as st

from compactor.cleaner.policy import (
    NO_CONTROL_TYPE,
    BatchHeader,
    BatchRetention,
    PartitionInput,
    decide_batches,
    first_dirty_offset,
    first_uncleanable_offset,
    group_segments,
    high_watermark,
    replay_producers,
)
from compactor.codec.indexes import AbortedTxn
from compactor.codec.records import ControlType, NewRecord, NewRecordBatch, encode_batch
from compactor.config import TopicConfig
from compactor.model import SegmentInfo
from tests.helpers import check_invariants
from tests.reference import compact_partition

NOW = 1_000_000_000


def seg(base: int, size: int = 100, largest: int = 0, mtime: int = 0) -> SegmentInfo:
    return SegmentInfo(base_offset=base, log_path=f"/x/{base}.log", size_bytes=size,
                       mtime_ms=mtime, largest_timestamp_ms=largest, has_index=True,
                       has_time_index=True, has_txn_index=False, index_bytes=8,
                       time_index_bytes=12)


def batch(base: int, last: int | None = None, *, pid: int = -1, epoch: int = 0,
          txn: bool = False, control: int | None = None, ts: int = 0, seg_base: int = 0
          ) -> BatchHeader:
    return BatchHeader(segment_base=seg_base, position=base, size_in_bytes=70,
                       base_offset=base, last_offset=base if last is None else last, magic=2,
                       is_control=control is not None, is_transactional=txn,
                       control_type=NO_CONTROL_TYPE if control is None else control,
                       producer_id=pid, producer_epoch=epoch, max_timestamp=ts, horizon_ms=-1,
                       records_count=1)


def test_first_dirty_offset_resets() -> None:
    # LogCleanerManagerTest: cleanable offsets reset
    assert first_dirty_offset(None, 0, 100) == (0, False)
    assert first_dirty_offset(40, 0, 100) == (40, False)
    assert first_dirty_offset(200, 0, 100) == (0, True)
    assert first_dirty_offset(0, 10, 100) == (10, True)


def test_first_uncleanable_offset_bounds() -> None:
    # LogCleanerManagerTest: first uncleanable offset
    segments = [seg(0, largest=100), seg(30, largest=200), seg(60, largest=300), seg(90)]
    # HW/LSO 50 falls inside the segment at 30: that whole segment is uncleanable
    assert first_uncleanable_offset(segments, 0, 50, 0, NOW) == 30
    # HW = LEO: the active segment bounds the round
    assert first_uncleanable_offset(segments, 0, 95, 0, NOW) == 90
    # min lag: the first segment whose largest timestamp is within the lag
    assert first_uncleanable_offset(segments, 0, 95, NOW - 150, NOW) == 30
    assert first_uncleanable_offset(segments, 0, 95, NOW - 1000, NOW) == 90
    # never below the first dirty offset
    assert first_uncleanable_offset(segments, 60, 50, 0, NOW) == 60


def test_open_transaction_bounds_the_last_stable_offset() -> None:
    # LogCleanerTest: an open transaction bounds the LSO
    batches = [batch(0, pid=1, txn=True), batch(1), batch(2, pid=1, control=ControlType.ABORT),
               batch(3, pid=2, txn=True)]
    replay = replay_producers(batches, high_watermark=4)
    assert replay.unstable_txn_firsts == (3,)
    # a marker at or above the high watermark keeps its transaction unstable
    assert replay_producers(batches[:3], high_watermark=2).unstable_txn_firsts == (0,)


def test_segment_grouping() -> None:
    # LogCleanerTest: testSegmentGrouping
    segments = [seg(i * 10, size=100) for i in range(7)]
    assert group_segments(segments, 70, 10**9, 10**9) == (tuple(range(0, 70, 10)),)
    assert group_segments(segments, 70, 1, 10**9) == tuple((i * 10,) for i in range(7))
    assert group_segments(segments, 70, 301, 10**9) == ((0, 10, 20), (30, 40, 50), (60,))
    assert group_segments(segments, 70, 10**9, 12 * 3) == ((0, 10, 20), (30, 40, 50), (60,))
    sparse = [seg(0), seg(2**31 - 5), seg(2**32)]
    assert group_segments(sparse, 2**32 + 10, 10**9, 10**9) == ((0,), (2**31 - 5,), (2**32,))


def test_basic_transaction_aware_cleaning_decisions() -> None:
    # LogCleanerTest: transaction-aware cleaning
    batches = [batch(0, 1, pid=1, txn=True), batch(2, 3, pid=2, txn=True),
               batch(4, 5, pid=1, txn=True), batch(6, pid=1, control=ControlType.ABORT),
               batch(7, pid=2, control=ControlType.COMMIT), batch(8, pid=1, txn=True),
               batch(9, pid=1, control=ControlType.COMMIT)]
    aborted = [AbortedTxn(producer_id=1, first_offset=0, last_offset=6, last_stable_offset=2)]
    active = replay_producers(batches, 10).active(NOW, 86_400_000)
    d = decide_batches(batches, aborted_txns=aborted, active_producers=active,
                       round_end_offset=10, legacy_retain_deletes={}, now_ms=NOW)
    assert [x.aborted for x in d] == [True, False, True, False, False, False, False]
    assert d[3].txn_entry == aborted[0]          # the ABORT keeps its txn index entry
    assert not d[3].discard_records and not d[4].discard_records
    assert d[9 - 3].retention == BatchRetention.RETAIN_EMPTY  # last entry of producer 1


def test_lone_commit_marker_is_kept_empty_for_the_epoch() -> None:
    # LogCleanerTest: a lone commit marker
    batches = [batch(0, pid=1, control=ControlType.COMMIT, ts=NOW), batch(1), batch(2)]
    active = replay_producers(batches, 3).active(NOW, 86_400_000)
    (marker, *_) = decide_batches(batches, aborted_txns=[], active_producers=active,
                                  round_end_offset=3, legacy_retain_deletes={}, now_ms=NOW)
    assert marker.retention == BatchRetention.RETAIN_EMPTY and marker.marker_horizon


def test_expired_producer_batches_are_not_kept() -> None:  # producer.id.expiration.ms
    batches = [batch(0, pid=1, ts=10), batch(1, pid=2, ts=NOW - 5), batch(2)]
    active = replay_producers(batches, 3).active(NOW, 1000)
    d = decide_batches(batches, aborted_txns=[], active_producers=active, round_end_offset=10,
                       legacy_retain_deletes={}, now_ms=NOW)
    assert [x.retention for x in d] == [BatchRetention.DELETE_EMPTY, BatchRetention.RETAIN_EMPTY,
                                        BatchRetention.DELETE_EMPTY]


# --- property: random logs through the reference round satisfy the invariants

records_strategy = st.lists(
    st.tuples(st.one_of(st.none(), st.sampled_from([b"a", b"b", b"c", b"d"])),
              st.one_of(st.none(), st.binary(max_size=3))),
    min_size=1, max_size=40,
)


@given(records=records_strategy, per_segment=st.integers(1, 6), batch_size=st.integers(1, 3),
       dirty_from=st.integers(0, 8), late=st.booleans())
def test_reference_round_satisfies_invariants(records, per_segment, batch_size, dirty_from,
                                              late) -> None:
    logs: dict[int, bytes] = {}
    segments = []
    offset = 0
    chunks = [records[i:i + batch_size] for i in range(0, len(records), batch_size)]
    for s in range(0, len(chunks), per_segment):
        base = offset
        data = b""
        for chunk in chunks[s:s + per_segment]:
            data += encode_batch(NewRecordBatch(base_offset=offset, records=[
                NewRecord(offset_delta=i, timestamp=1000 + offset + i, key=k, value=v)
                for i, (k, v) in enumerate(chunk)]))
            offset += len(chunk)
        logs[base] = data
        segments.append(SegmentInfo(base_offset=base, log_path=f"/x/{base}.log",
                                    size_bytes=len(data), mtime_ms=5000, largest_timestamp_ms=1000
                                    + offset, has_index=False, has_time_index=False,
                                    has_txn_index=False))
    segments.append(SegmentInfo(base_offset=offset, log_path="/x/active.log", size_bytes=0,
                                mtime_ms=5000, largest_timestamp_ms=-1, has_index=False,
                                has_time_index=False, has_txn_index=False))
    logs[offset] = b""
    now = NOW if late else 2000
    inp = PartitionInput(path="/x", segments=tuple(segments),
                         config=TopicConfig(cleanup_policy=frozenset({"compact"}),
                                            delete_retention_ms=100),
                         cleaner_checkpoint=min(dirty_from, offset), log_start_checkpoint=None,
                         replication_checkpoint=None, aborted_txns=(), now_ms=now)
    result = compact_partition(inp, logs)
    event(f"round cleans: {result.plan.will_clean}")
    if not result.plan.will_clean:
        return
    after = {b: d for b, d in logs.items() if b >= result.plan.first_uncleanable_offset}
    after.update({b: f.log for b, f in result.outputs.items()})
    check_invariants(logs, after, first_dirty=result.plan.first_dirty_offset,
                     end_offset=result.plan.first_uncleanable_offset, now_ms=now,
                     legacy_retain={})
    assert result.records_in == result.records_out + sum(result.dropped.values())


@pytest.mark.parametrize(("checkpoint", "log_start", "log_end", "assume", "expected"), [
    (600, 0, 900, False, 600),    # the checkpoint's entry
    (None, 0, 900, False, 0),     # none: Kafka's Partition.createLog takes 0
    (None, 300, 900, False, 300),  # clamped up to the log start (updateHighWatermark)
    (1200, 0, 900, False, 900),   # and down to the log end
    (None, 0, 900, True, 900),    # --assume-committed: the log end
    (600, 0, 900, True, 600),     # an entry is the broker's word, assumption or not
])
def test_the_high_watermark_a_broker_loads(checkpoint: int | None, log_start: int,
                                           log_end: int, assume: bool, expected: int) -> None:
    assert high_watermark(checkpoint, log_start, log_end, assume_committed=assume) == expected
