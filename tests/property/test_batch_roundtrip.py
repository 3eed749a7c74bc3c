"""Round trips through our writer and reader, and agreement with two independent parsers:
aiokafka (compiled) and kafka-python (pure Python), in both directions."""

from __future__ import annotations

import struct

from aiokafka.record import MemoryRecords as AioMemoryRecords
from aiokafka.record.default_records import DefaultRecordBatchBuilder as AioBuilder
from hypothesis import given
from hypothesis import strategies as st
from kafka.record import MemoryRecords as KpMemoryRecords
from kafka.record.default_records import DefaultRecordBatchBuilder as KpBuilder
from kafka.record.legacy_records import LegacyRecordBatchBuilder as KpLegacyBuilder

from compactor.codec.compression import Codec
from compactor.codec.legacy import LegacyRecord, encode_message_set
from compactor.codec.records import (
    NewRecord,
    NewRecordBatch,
    TimestampType,
    encode_batch,
    rebuild_batch,
)
from compactor.codec.segment import decode_segment
from tests.property.strategies import codecs, new_batches, new_records, nullable_bytes, timestamps


def expected_records(batch: NewRecordBatch) -> list[tuple]:
    return [(batch.base_offset + r.offset_delta, r.timestamp, r.key, r.value, tuple(r.headers))
            for r in batch.records]


def ours(data: bytes) -> list[tuple]:
    return [(r.offset, r.timestamp, r.key, r.value, r.headers)
            for b in decode_segment(data) for r in b.records()]


def third_party(memory_records_cls, data: bytes) -> tuple[list, list]:
    records, headers = [], []
    mr = memory_records_cls(data)
    while (batch := mr.next_batch()) is not None:
        assert batch.validate_crc()
        headers.append((batch.base_offset, batch.last_offset_delta, batch.producer_id,
                        batch.producer_epoch, batch.base_sequence, batch.is_transactional,
                        batch.max_timestamp))
        for r in batch:
            records.append((r.offset, r.timestamp, r.key, r.value, tuple(r.headers)))
    return records, headers


@given(new_batches())
def test_our_writer_and_reader_round_trip(batch: NewRecordBatch) -> None:
    data = encode_batch(batch)
    [read] = decode_segment(data)
    assert read.base_offset == batch.base_offset
    assert read.last_offset_delta == batch.last_offset_delta
    assert read.partition_leader_epoch == batch.partition_leader_epoch
    assert read.producer_id == batch.producer_id
    assert read.producer_epoch == batch.producer_epoch
    assert read.base_sequence == batch.base_sequence
    assert read.is_transactional == batch.is_transactional
    assert read.delete_horizon_ms == batch.delete_horizon_ms
    assert read.records_count == len(batch.records)
    assert read.compression == (batch.compression if batch.records else Codec.NONE)
    assert ours(data) == expected_records(batch)
    assert read.raw == data


@given(new_batches(allow_flags=False))
def test_aiokafka_and_kafka_python_read_what_we_write(batch: NewRecordBatch) -> None:
    data = encode_batch(batch)
    expected = expected_records(batch)
    header = (batch.base_offset, batch.last_offset_delta, batch.producer_id,
              batch.producer_epoch, batch.base_sequence, batch.is_transactional,
              max((r.timestamp for r in batch.records), default=-1))
    for cls in (AioMemoryRecords, KpMemoryRecords):
        records, headers = third_party(cls, data)
        assert records == expected, cls
        assert headers == [header], cls


@given(
    builder=st.sampled_from(["aiokafka", "kafka-python"]),
    codec=codecs,
    base_offset=st.integers(min_value=0, max_value=2**62),
    epoch=st.integers(min_value=-1, max_value=2**31 - 1),
    rows=st.lists(st.tuples(timestamps, nullable_bytes, nullable_bytes,
                            st.lists(st.tuples(st.text(max_size=6), nullable_bytes),
                                     max_size=2)),
                  min_size=1, max_size=10),
)
def test_we_read_what_they_build(builder: str, codec: Codec, base_offset: int, epoch: int,
                                 rows: list) -> None:
    cls = AioBuilder if builder == "aiokafka" else KpBuilder
    b = cls(2, int(codec), 0, 123, 4, 56, 2**20)
    for i, (ts, key, value, headers) in enumerate(rows):
        b.append(i, timestamp=ts, key=key, value=value, headers=list(headers))
    data = bytearray(b.build())
    # Producer-side builders write base offset 0 and no leader epoch: patch them in as the
    # broker does (neither field is covered by the CRC).
    struct.pack_into(">q", data, 0, base_offset)
    struct.pack_into(">i", data, 12, epoch)
    [batch] = decode_segment(bytes(data))
    assert (batch.base_offset, batch.partition_leader_epoch) == (base_offset, epoch)
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (123, 4, 56)
    # kafka-python falls back to no compression when compressing does not shrink the batch.
    assert batch.compression == codec or (builder == "kafka-python" and batch.compression == 0)
    assert batch.max_timestamp == max(r[0] for r in rows)
    assert [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in batch.records()] == [
        (base_offset + i, ts, key, value, tuple(headers))
        for i, (ts, key, value, headers) in enumerate(rows)
    ]


@given(
    magic=st.sampled_from([0, 1]),
    codec=st.sampled_from([Codec.NONE, Codec.GZIP, Codec.SNAPPY, Codec.LZ4]),
    first=st.integers(min_value=0, max_value=2**40),
    rows=st.lists(st.tuples(st.integers(min_value=1, max_value=50),
                            st.integers(min_value=0, max_value=2**41), nullable_bytes,
                            nullable_bytes), min_size=1, max_size=8),
)
def test_legacy_messages_agree_with_kafka_python(magic: int, codec: Codec, first: int,
                                                 rows: list) -> None:
    offset = first
    records = []
    for gap, ts, key, value in rows:
        records.append(LegacyRecord(offset=offset, key=key, value=value,
                                    timestamp=ts if magic == 1 else -1))
        offset += gap
    data = encode_message_set(records, magic=magic, codec=codec)
    expected = [(r.offset, r.timestamp, r.key, r.value) for r in records]
    assert [(o, t, k, v) for o, t, k, v, _ in ours(data)] == expected
    kp = []
    mr = KpMemoryRecords(data)
    while (batch := mr.next_batch()) is not None:
        kp += [(r.offset, r.timestamp if r.timestamp is not None else -1, r.key, r.value)
               for r in batch]
    assert kp == expected


@given(magic=st.sampled_from([0, 1]),
       codec=st.sampled_from([Codec.NONE, Codec.GZIP, Codec.SNAPPY, Codec.LZ4]),
       rows=st.lists(st.tuples(st.integers(min_value=0, max_value=2**41), nullable_bytes,
                               nullable_bytes), min_size=1, max_size=8))
def test_we_read_kafka_python_legacy_builds(magic: int, codec: Codec, rows: list) -> None:
    b = KpLegacyBuilder(magic, int(codec), 2**20)
    for i, (ts, key, value) in enumerate(rows):
        b.append(i, timestamp=ts if magic == 1 else None, key=key, value=value)
    data = bytes(b.build())
    got = ours(data)
    assert [(o, k, v) for o, _, k, v, _ in got] == [(i, k, v) for i, (_, k, v) in enumerate(rows)]
    if magic == 1:
        assert [t for _, t, _, _, _ in got] == [ts for ts, _, _ in rows]


@given(st.lists(new_batches(), min_size=1, max_size=4), new_records())
def test_mixed_magic_segments_frame_correctly(batches: list, legacy_rows: list) -> None:
    # A v2 batch followed by legacy messages: aiokafka's MemoryRecords misframes this; ours must
    # not (a segment after a message-format downgrade of a follower, or a hand-copied log).
    entries = [encode_batch(b) for b in batches]
    legacy = [LegacyRecord(offset=10**6 + i, key=r.key, value=r.value, timestamp=r.timestamp)
              for i, r in enumerate(legacy_rows)]
    if legacy:
        entries.append(encode_message_set(legacy, magic=1))
    data = b"".join(entries)
    read = decode_segment(data)
    assert [b.magic for b in read] == [2] * len(batches) + [1] * len(legacy)
    assert sum(b.size_in_bytes for b in read) == len(data)


@given(new_batches(), st.data())
def test_rebuilt_batch_keeps_the_header_and_exactly_the_retained_records(
        batch: NewRecordBatch, data: st.DataObject) -> None:
    [source] = decode_segment(encode_batch(batch))
    records = source.compiled_records()
    if not records:
        return
    keep = data.draw(st.lists(st.booleans(), min_size=len(records), max_size=len(records))
                     .filter(any), label="keep")
    horizon = data.draw(st.one_of(st.none(), timestamps), label="horizon")
    retained = [r for r, k in zip(records, keep, strict=True) if k]

    rebuilt = rebuild_batch(source, retained, delete_horizon_ms=horizon)

    [read] = decode_segment(rebuilt)
    wanted = [(r.offset, r.timestamp, r.key, r.value, tuple(r.headers)) for r in retained]
    assert ours(rebuilt) == wanted
    for parser in (AioMemoryRecords, KpMemoryRecords):
        assert third_party(parser, rebuilt)[0] == wanted
    assert (read.base_offset, read.last_offset_delta) == (source.base_offset,
                                                          source.last_offset_delta)
    assert (read.producer_id, read.producer_epoch, read.base_sequence) == (
        source.producer_id, source.producer_epoch, source.base_sequence)
    assert (read.partition_leader_epoch, read.compression, read.timestamp_type) == (
        source.partition_leader_epoch, source.compression, source.timestamp_type)
    assert (read.is_transactional, read.is_control) == (source.is_transactional,
                                                        source.is_control)
    assert read.delete_horizon_ms == horizon
    assert read.base_timestamp == (horizon if horizon is not None else retained[0].timestamp)
    # the general encoder, given the same batch as a write model, writes the same bytes
    assert rebuilt == encode_batch(NewRecordBatch(
        base_offset=source.base_offset,
        records=[NewRecord(offset_delta=r.offset - source.base_offset, timestamp=r.timestamp,
                           key=r.key, value=r.value, headers=tuple(r.headers))
                 for r in retained],
        compression=source.compression, timestamp_type=source.timestamp_type,
        is_transactional=source.is_transactional, is_control=source.is_control,
        delete_horizon_ms=horizon, partition_leader_epoch=source.partition_leader_epoch,
        producer_id=source.producer_id, producer_epoch=source.producer_epoch,
        base_sequence=source.base_sequence, last_offset_delta=source.last_offset_delta,
        max_timestamp=(source.max_timestamp
                       if source.timestamp_type == TimestampType.LOG_APPEND_TIME else None)))


@given(new_batches(), st.data())
def test_damage_under_a_valid_crc_is_reported_as_a_corrupt_segment_and_nothing_else(
        batch: NewRecordBatch, data: st.DataObject) -> None:
    """Bytes damaged after the header, then given a CRC that matches them (what a buggy
    producer or a bit flip before checksumming leaves): decoding raises the codec's own error
    with the batch's position and base offset, never a stray library exception (the codec
    catches exactly what its decoders raise on bad bytes, not every RuntimeError/OSError)."""
    import crc32c

    from compactor.codec.records import CRC_START, RECORD_BATCH_OVERHEAD
    from compactor.errors import CorruptSegmentError

    raw = bytearray(encode_batch(batch))
    if len(raw) <= RECORD_BATCH_OVERHEAD:
        return
    for _ in range(data.draw(st.integers(1, 4))):
        at = data.draw(st.integers(RECORD_BATCH_OVERHEAD, len(raw) - 1))
        raw[at] = data.draw(st.integers(0, 255))
    if data.draw(st.booleans()):
        raw = raw[:data.draw(st.integers(RECORD_BATCH_OVERHEAD, len(raw)))]
        struct.pack_into(">i", raw, 8, len(raw) - 12)
    struct.pack_into(">I", raw, 17, crc32c.crc32c(bytes(raw[CRC_START:])))
    try:
        decoded = decode_segment(bytes(raw), path="/t-0/0.log")
    except CorruptSegmentError as err:
        assert (err.path, err.position, err.base_offset) == ("/t-0/0.log", 0, batch.base_offset)
        return
    assert len(decoded) == 1  # damage that still decodes (a changed value byte) is legal
