from __future__ import annotations

import struct

from hypothesis import given
from hypothesis import strategies as st

from compactor.codec.checkpoints import (
    format_leader_epoch_checkpoint,
    format_offset_checkpoint,
    parse_leader_epoch_checkpoint,
    parse_offset_checkpoint,
    truncate_epochs_from_start,
)
from compactor.codec.indexes import (
    AbortedTxn,
    BatchIndexInfo,
    OffsetIndexEntry,
    TimeIndexEntry,
    build_indexes,
    decode_offset_index,
    decode_time_index,
    decode_txn_index,
    encode_offset_index,
    encode_time_index,
    encode_txn_index,
)
from compactor.model import EpochEntry, TopicPartition


def infos(sizes_ts: list[tuple[int, int]], first_offset: int = 100) -> list[BatchIndexInfo]:
    out, pos, off = [], 0, first_offset
    for size, ts in sizes_ts:
        out.append(BatchIndexInfo(position=pos, size_in_bytes=size, last_offset=off + 9,
                                  max_timestamp=ts))
        pos += size
        off += 10
    return out


def test_canonical_builder_by_hand() -> None:
    # Positions 0, 3000, 6000, 9000, 12000; interval 4096. The check runs before a batch's
    # bytes are counted, so the first batch is never indexed and batch 2 (at 6000) is the first.
    offsets, times = build_indexes(
        infos([(3000, 10), (3000, 30), (3000, 20), (3000, 40), (3000, 35)]), 100,
        index_interval_bytes=4096)
    assert offsets == [OffsetIndexEntry(129, 6000), OffsetIndexEntry(149, 12000)]
    # At batch 2 the running max is 30 (carried by batch 1, last offset 119); at batch 4 it is
    # 40 (batch 3, 139); the final inactive-segment entry adds nothing larger.
    assert times == [TimeIndexEntry(30, 119), TimeIndexEntry(40, 139)]


def test_final_time_entry_and_no_timestamps() -> None:
    _, times = build_indexes(infos([(100, 5), (100, 7)]), 100)
    assert times == [TimeIndexEntry(7, 119)]
    offsets, times = build_indexes(infos([(5000, -1), (5000, -1)]), 100)
    assert times == [] and offsets == [OffsetIndexEntry(119, 5000)]


@given(st.lists(st.tuples(st.integers(min_value=61, max_value=9000),
                          st.integers(min_value=-1, max_value=10**13)), max_size=60),
       st.integers(min_value=0, max_value=2**40), st.integers(min_value=1, max_value=8192))
def test_built_indexes_round_trip_and_are_valid(sizes_ts, base, interval) -> None:
    batches = infos(sizes_ts, first_offset=base)
    offsets, times = build_indexes(batches, base, index_interval_bytes=interval)
    assert decode_offset_index(encode_offset_index(offsets, base), base) == offsets
    assert decode_time_index(encode_time_index(times, base), base) == times
    starts = {b.position: b for b in batches}
    for e in offsets:
        assert starts[e.position].last_offset == e.offset
    assert [t.timestamp for t in times] == sorted({t.timestamp for t in times})
    if times:
        assert times[-1].timestamp == max(ts for _, ts in sizes_ts)


def test_txn_index_round_trip() -> None:
    entries = [AbortedTxn(producer_id=7, first_offset=5, last_offset=9, last_stable_offset=10),
               AbortedTxn(producer_id=8, first_offset=3, last_offset=12, last_stable_offset=13)]
    data = encode_txn_index(entries)
    assert len(data) == 68 and struct.unpack_from(">h", data)[0] == 0
    assert decode_txn_index(data, 0) == entries


def test_offset_checkpoint_round_trip_and_whitespace() -> None:
    offsets = {TopicPartition("orders-v2", 0): 5, TopicPartition("a-b-c", 12): 2**40}
    text = format_offset_checkpoint(offsets)
    assert text == "0\n2\na-b-c 12 1099511627776\norders-v2 0 5\n"
    assert parse_offset_checkpoint(text) == offsets
    assert parse_offset_checkpoint("0\n1\nt  3\t9\n") == {TopicPartition("t", 3): 9}
    assert parse_offset_checkpoint("") == {}


def test_leader_epochs_round_trip_and_truncate() -> None:
    epochs = [EpochEntry(epoch=0, start_offset=0), EpochEntry(epoch=2, start_offset=100),
              EpochEntry(epoch=5, start_offset=300)]
    assert parse_leader_epoch_checkpoint(format_leader_epoch_checkpoint(epochs)) == epochs
    assert truncate_epochs_from_start(epochs, 150) == [
        EpochEntry(epoch=2, start_offset=150), EpochEntry(epoch=5, start_offset=300)]
    assert truncate_epochs_from_start(epochs, 0) == epochs
    assert truncate_epochs_from_start(epochs, 300) == [EpochEntry(epoch=5, start_offset=300)]
