"""Table-driven vectors for the v2 batch header and the special batches Kafka writes."""

from __future__ import annotations

import struct

import crc32c
import pytest

from compactor.codec.compression import Codec
from compactor.codec.records import (
    ATTR_CONTROL,
    ATTR_DELETE_HORIZON,
    ATTR_TRANSACTIONAL,
    ControlType,
    NewRecord,
    NewRecordBatch,
    TimestampType,
    add_sequence,
    control_key,
    empty_batch_like,
    encode_batch,
    marker_value,
    parse_control_record,
    rebuild_batch,
)
from compactor.codec.segment import decode_segment, iter_batches
from compactor.errors import CorruptSegmentError
from tests.helpers import with_attributes, with_partition_leader_epoch


def one(data: bytes):
    [batch] = decode_segment(data)
    return batch


def test_header_layout_is_exact() -> None:
    data = encode_batch(NewRecordBatch(
        base_offset=0x0102030405060708, partition_leader_epoch=7, producer_id=99,
        producer_epoch=3, base_sequence=11, is_transactional=True,
        records=[NewRecord(offset_delta=0, timestamp=1_700_000_000_123, key=b"k", value=b"v")],
    ))
    fields = struct.unpack_from(">qiibIhiqqqhii", data)
    assert fields[0] == 0x0102030405060708
    assert fields[1] == len(data) - 12
    assert fields[2] == 7
    assert fields[3] == 2
    assert fields[4] == crc32c.crc32c(data[21:])
    assert fields[5] == ATTR_TRANSACTIONAL
    assert fields[6:] == (0, 1_700_000_000_123, 1_700_000_000_123, 99, 3, 11, 1)
    # record: length 10, attrs 0, ts delta 0, offset delta 0, key len 1 "k", value len 1 "v",
    # header count 0
    assert data[61:] == bytes([0x10, 0, 0, 0, 0x02]) + b"k" + bytes([0x02]) + b"v" + b"\x00"
    assert data[61] == 2 * (len(data) - 62)  # zig-zag length


@pytest.mark.parametrize("codec", list(Codec))
def test_fields_survive_every_codec(codec: Codec) -> None:
    records = [
        NewRecord(offset_delta=0, timestamp=1_700_000_000_001, key=b"a", value=b"x" * 300,
                  headers=(("h1", b"v"), ("h2", None))),
        NewRecord(offset_delta=5, timestamp=1_699_999_999_999, key=None, value=b""),
        NewRecord(offset_delta=9, timestamp=1_700_000_000_500, key=b"t", value=None),
    ]
    batch = one(encode_batch(NewRecordBatch(base_offset=2**40, compression=codec,
                                            records=records, last_offset_delta=12)))
    assert batch.compression == codec
    assert (batch.base_offset, batch.last_offset, batch.records_count) == (2**40, 2**40 + 12, 3)
    assert batch.base_timestamp == 1_700_000_000_001
    assert batch.max_timestamp == 1_700_000_000_500
    got = batch.records()
    assert [r.offset for r in got] == [2**40, 2**40 + 5, 2**40 + 9]
    assert [r.timestamp for r in got] == [r.timestamp for r in records]
    assert got[0].headers == (("h1", b"v"), ("h2", None))
    assert got[1].key is None and got[1].value == b"" and not got[1].is_tombstone
    assert got[2].is_tombstone


def test_delete_horizon_keeps_record_timestamps() -> None:
    horizon = 1_800_000_000_000
    batch = one(encode_batch(NewRecordBatch(
        base_offset=10, delete_horizon_ms=horizon,
        records=[NewRecord(offset_delta=0, timestamp=1_700_000_000_000, key=b"k", value=None)],
    )))
    assert batch.has_delete_horizon and batch.delete_horizon_ms == horizon
    assert batch.attributes & ATTR_DELETE_HORIZON
    assert batch.base_timestamp == horizon
    assert batch.records()[0].timestamp == 1_700_000_000_000  # negative delta


def test_log_append_time_records_report_max_timestamp() -> None:
    batch = one(encode_batch(NewRecordBatch(
        base_offset=0, timestamp_type=TimestampType.LOG_APPEND_TIME, max_timestamp=5_000,
        records=[NewRecord(offset_delta=0, timestamp=1_000, key=b"k", value=b"v")],
    )))
    assert batch.timestamp_type == TimestampType.LOG_APPEND_TIME
    assert [r.timestamp for r in batch.records()] == [5_000]


def test_control_batch_and_markers() -> None:
    batch = one(encode_batch(NewRecordBatch(
        base_offset=42, is_transactional=True, is_control=True, producer_id=7, producer_epoch=1,
        records=[NewRecord(offset_delta=0, timestamp=1, key=control_key(ControlType.ABORT),
                           value=marker_value(5))],
    )))
    assert batch.is_control and batch.is_transactional
    assert batch.attributes & ATTR_CONTROL
    control = batch.control_record()
    assert control is not None
    assert (control.type, control.coordinator_epoch) == (ControlType.ABORT, 5)
    assert parse_control_record(struct.pack(">hh", 3, 77), None).type == ControlType.UNKNOWN
    with pytest.raises(CorruptSegmentError):
        parse_control_record(b"\x00", None)
    with pytest.raises(CorruptSegmentError):
        parse_control_record(struct.pack(">hh", -1, 0), None)


def test_empty_batch_like_matches_kafka_cleaner() -> None:
    source = one(encode_batch(NewRecordBatch(
        base_offset=100, compression=Codec.ZSTD, is_transactional=True, producer_id=9,
        producer_epoch=2, base_sequence=50, partition_leader_epoch=4, delete_horizon_ms=123,
        records=[NewRecord(offset_delta=i, timestamp=1000 + i, key=b"k", value=b"v")
                 for i in range(4)],
    )))
    empty = one(empty_batch_like(source))
    assert empty.size_in_bytes == 61 and empty.records_count == 0
    assert (empty.base_offset, empty.last_offset) == (100, 103)
    assert empty.base_timestamp == -1 and empty.max_timestamp == source.max_timestamp
    assert empty.compression == Codec.NONE and not empty.has_delete_horizon
    assert (empty.producer_id, empty.producer_epoch, empty.base_sequence) == (9, 2, 50)
    assert empty.partition_leader_epoch == 4 and empty.is_transactional
    assert empty.records() == []


def test_header_patches() -> None:
    data = encode_batch(NewRecordBatch(base_offset=0, records=[
        NewRecord(offset_delta=0, timestamp=1, key=b"k", value=b"v")]))
    assert one(with_partition_leader_epoch(data, 12)).partition_leader_epoch == 12
    patched = one(with_attributes(data, ATTR_CONTROL | ATTR_TRANSACTIONAL))
    assert patched.is_control and patched.is_transactional


@pytest.mark.parametrize(("sequence", "delta", "expected"), [
    (-1, 5, -1), (0, 0, 0), (10, 5, 15), (2**31 - 1, 1, 0), (2**31 - 2, 3, 1),
])
def test_sequence_wraps_like_kafka(sequence: int, delta: int, expected: int) -> None:
    assert add_sequence(sequence, delta) == expected


def test_writer_rejects_inconsistent_batches() -> None:
    rec = NewRecord(offset_delta=3, timestamp=1, key=b"k", value=b"v")
    with pytest.raises(ValueError, match="strictly increase"):
        encode_batch(NewRecordBatch(base_offset=0, records=[rec, rec]))
    with pytest.raises(ValueError, match="smaller than the last"):
        encode_batch(NewRecordBatch(base_offset=0, records=[rec], last_offset_delta=1))


def test_verbatim_copy_is_byte_identical() -> None:
    data = b"".join(encode_batch(NewRecordBatch(base_offset=i * 10, compression=Codec.GZIP,
                                                records=[NewRecord(offset_delta=0, timestamp=i,
                                                                   key=b"k", value=b"v")]))
                    for i in range(5))
    assert b"".join(b.raw for b in iter_batches(data)) == data


def test_rebuild_encodes_values_beyond_the_inlined_varint_table() -> None:
    # lengths and deltas of 2**13 and more leave the encoder's inlined table: a 9,000-byte key,
    # a 20,000-byte value, an offset delta of 100,000 and a timestamp below the base
    big = NewRecord(offset_delta=100_000, timestamp=1_000, key=b"k" * 9_000,
                    value=b"v" * 20_000, headers=(("h", b"x" * 10_000),))
    batch = NewRecordBatch(base_offset=7, records=[
        NewRecord(offset_delta=0, timestamp=5_000_000, key=b"a", value=None), big])
    [source] = decode_segment(encode_batch(batch))
    records = source.compiled_records()
    for retained in (records, records[1:]):
        [read] = decode_segment(rebuild_batch(source, retained, delete_horizon_ms=None))
        assert [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in read.records()] == [
            (r.offset, r.timestamp, r.key, r.value, tuple(r.headers)) for r in retained]
        assert read.last_offset_delta == 100_000
