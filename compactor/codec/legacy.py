"""Legacy v0/v1 messages ("message sets", Kafka's ``LegacyRecord``, ``AbstractLegacyRecordBatch``).

Wire grammar (every integer big-endian)::

    Entry   => Offset:int64 Size:int32 Message
    Message => Crc:uint32 Magic:int8 Attributes:int8 [Timestamp:int64 (v1 only)]
               KeyLength:int32 Key ValueLength:int32 Value
    Crc     => CRC-32 (IEEE) of bytes [Magic, end of message)

A message whose attributes carry a codec is a *wrapper*: its key is null and its value is the
compressed concatenation of uncompressed inner entries. v0 inner offsets are absolute; v1 inner
offsets are relative and the wrapper's offset is the absolute offset of the last inner message
(librdkafka wrote wrapper offset 0 with absolute inner offsets; Kafka accepts that, so do we).
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Sequence
from dataclasses import dataclass

from compactor.codec.compression import CODEC_MASK, Codec, DecompressionError, codec_name, compress
from compactor.codec.compression import decompress as _decompress
from compactor.codec.records import (
    ATTR_TIMESTAMP_TYPE,
    LOG_OVERHEAD,
    NO_PARTITION_LEADER_EPOCH,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    NO_TIMESTAMP,
    Record,
    RecordBatch,
    TimestampType,
)
from compactor.errors import CorruptSegmentError, CrcMismatchError, UnsupportedFormatError

_ENTRY_HEAD = struct.Struct(">qiIbb")  # offset, size, crc, magic, attributes
_INT32 = struct.Struct(">i")
_INT64 = struct.Struct(">q")
V0_OVERHEAD = 14  # crc + magic + attributes + key length + value length
V1_OVERHEAD = 22  # ... + timestamp


@dataclass(frozen=True, slots=True, kw_only=True)
class _Message:
    offset: int
    magic: int
    crc: int
    attributes: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    size_in_bytes: int


def _parse_message(data: bytes, pos: int, end: int, verify_crc: bool = True) -> _Message:
    """Parse one legacy entry in ``data[pos:end]`` (``end`` = end of the entry).

    Raises ValueError-derived CorruptSegmentError without location; the caller adds it.
    """
    offset, size, crc, magic, attributes = _ENTRY_HEAD.unpack_from(data, pos)
    if magic not in (0, 1):
        raise UnsupportedFormatError(f"legacy message has magic {magic}")
    overhead = V0_OVERHEAD if magic == 0 else V1_OVERHEAD
    if size < overhead:
        raise CorruptSegmentError(
            f"magic {magic} message size {size} is below the minimum of {overhead} bytes"
        )
    computed = zlib.crc32(data[pos + 16 : end]) if verify_crc else crc
    if computed != crc:
        raise CrcMismatchError(
            f"message CRC-32 mismatch: stored {crc:#010x}, computed {computed:#010x}"
        )
    cursor = pos + 18
    timestamp = NO_TIMESTAMP
    if magic == 1:
        (timestamp,) = _INT64.unpack_from(data, cursor)
        cursor += 8
    key, cursor = _read_bytes(data, cursor, end, "key")
    value, cursor = _read_bytes(data, cursor, end, "value")
    if cursor != end:
        raise CorruptSegmentError(
            f"message has {end - cursor} bytes after its value that belong to no field"
        )
    return _Message(
        offset=offset,
        magic=magic,
        crc=crc,
        attributes=attributes & 0xFF,
        timestamp=timestamp,
        key=key,
        value=value,
        size_in_bytes=end - pos,
    )


def _read_bytes(data: bytes, cursor: int, end: int, what: str) -> tuple[bytes | None, int]:
    if cursor + 4 > end:
        raise CorruptSegmentError(f"message {what} length runs past the end of the message")
    (length,) = _INT32.unpack_from(data, cursor)
    cursor += 4
    if length < 0:
        if length != -1:
            raise CorruptSegmentError(f"message {what} has negative length {length}")
        return None, cursor
    if cursor + length > end:
        raise CorruptSegmentError(
            f"message {what} of {length} bytes runs past the end of the message"
        )
    return bytes(data[cursor : cursor + length]), cursor + length


def decode_legacy_entry(entry: bytes, pos: int, *, verify_crc: bool = True) -> RecordBatch:
    """Decode the legacy entry ``entry`` (its whole bytes), found at byte ``pos`` of its file,
    into the common read model.

    The returned batch's records are decoded eagerly (legacy data is rare and small).
    Errors carry the entry's file position and offset.
    """
    end = len(entry)
    try:
        message = _parse_message(entry, 0, end, verify_crc)
        codec = message.attributes & CODEC_MASK
        if codec == Codec.NONE:
            inner = [_to_record(message, message.offset, message.timestamp)]
        else:
            inner = _decode_wrapper(message, codec)
    except (CorruptSegmentError, UnsupportedFormatError) as err:
        offset = _INT64.unpack_from(entry, 0)[0] if end >= 8 else None
        raise err.with_location(position=pos, base_offset=offset)
    base_offset = inner[0].offset
    return RecordBatch(
        position=pos,
        base_offset=base_offset,
        size_in_bytes=end,
        partition_leader_epoch=NO_PARTITION_LEADER_EPOCH,
        magic=message.magic,
        crc=message.crc,
        attributes=message.attributes,
        last_offset_delta=message.offset - base_offset,
        base_timestamp=message.timestamp,
        max_timestamp=message.timestamp,
        producer_id=NO_PRODUCER_ID,
        producer_epoch=NO_PRODUCER_EPOCH,
        base_sequence=NO_SEQUENCE,
        records_count=len(inner),
        raw=entry,
        legacy_records=tuple(inner),
    )


def _to_record(message: _Message, offset: int, timestamp: int) -> Record:
    return Record(offset=offset, timestamp=timestamp, key=message.key, value=message.value)


def _decode_wrapper(wrapper: _Message, codec: int) -> list[Record]:
    if codec == Codec.ZSTD or codec not in (Codec.GZIP, Codec.SNAPPY, Codec.LZ4):
        raise UnsupportedFormatError(
            f"magic {wrapper.magic} wrapper message uses codec {codec_name(codec)}, which "
            "legacy message formats do not allow"
        )
    if wrapper.value is None:
        raise CorruptSegmentError("compressed wrapper message has a null value")
    try:
        payload = _decompress(codec, wrapper.value, magic=wrapper.magic)
    except DecompressionError as err:
        raise CorruptSegmentError(f"wrapper message cannot be decompressed: {err}") from err
    messages: list[_Message] = []
    pos = 0
    while pos < len(payload):
        if len(payload) - pos < LOG_OVERHEAD + 6:
            raise CorruptSegmentError(
                f"compressed wrapper holds {len(payload) - pos} trailing bytes that are no message"
            )
        (size,) = _INT32.unpack_from(payload, pos + 8)
        end = pos + LOG_OVERHEAD + size
        if size < V0_OVERHEAD or end > len(payload):
            raise CorruptSegmentError(
                f"inner message at byte {pos} of the decompressed wrapper declares size {size}"
            )
        inner = _parse_message(payload, pos, end)
        if inner.attributes & CODEC_MASK:
            raise CorruptSegmentError("compressed wrapper holds a nested compressed message")
        messages.append(inner)
        pos = end
    if not messages:
        raise CorruptSegmentError("compressed wrapper message holds no inner messages")

    log_append = wrapper.magic == 1 and bool(wrapper.attributes & ATTR_TIMESTAMP_TYPE)
    records = []
    last_relative = messages[-1].offset
    for inner in messages:
        if wrapper.magic == 1 and wrapper.offset != 0:
            offset = wrapper.offset - last_relative + inner.offset
        else:
            offset = inner.offset
        timestamp = wrapper.timestamp if log_append else inner.timestamp
        records.append(_to_record(inner, offset, timestamp))
    return records


# ---------------------------------------------------------------------------------------------
# Writers (used by the generator and by tests; the compactor rewrites legacy data as v2)


def encode_message(
    *,
    offset: int,
    magic: int,
    key: bytes | None,
    value: bytes | None,
    timestamp: int = NO_TIMESTAMP,
    attributes: int = 0,
) -> bytes:
    """Encode one legacy entry (offset, size and message)."""
    if magic not in (0, 1):
        raise ValueError(f"legacy magic must be 0 or 1, not {magic}")
    body = bytearray()
    body += struct.pack(">bb", magic, attributes)
    if magic == 1:
        body += _INT64.pack(timestamp)
    for field_bytes in (key, value):
        if field_bytes is None:
            body += _INT32.pack(-1)
        else:
            body += _INT32.pack(len(field_bytes)) + field_bytes
    message = struct.pack(">I", zlib.crc32(body)) + bytes(body)
    return _INT64.pack(offset) + _INT32.pack(len(message)) + message


@dataclass(frozen=True, slots=True, kw_only=True)
class LegacyRecord:
    """One record for :func:`encode_message_set`."""

    offset: int
    key: bytes | None
    value: bytes | None
    timestamp: int = NO_TIMESTAMP


def encode_message_set(
    records: Sequence[LegacyRecord],
    *,
    magic: int,
    codec: int = Codec.NONE,
    timestamp_type: TimestampType = TimestampType.CREATE_TIME,
    log_append_time_ms: int | None = None,
) -> bytes:
    """Encode records as legacy entries: one message each (``codec`` none) or one compressed
    wrapper holding them all, with inner offsets as Kafka's broker wrote them."""
    ts_attr = ATTR_TIMESTAMP_TYPE if (magic == 1 and timestamp_type) else 0
    if codec == Codec.NONE:
        return b"".join(
            encode_message(
                offset=r.offset,
                magic=magic,
                key=r.key,
                value=r.value,
                timestamp=r.timestamp if magic == 1 else NO_TIMESTAMP,
                attributes=ts_attr,
            )
            for r in records
        )
    if not records:
        raise ValueError("a compressed wrapper needs at least one record")
    first = records[0].offset
    inner = b"".join(
        encode_message(
            offset=(r.offset - first) if magic == 1 else r.offset,
            magic=magic,
            key=r.key,
            value=r.value,
            timestamp=r.timestamp if magic == 1 else NO_TIMESTAMP,
        )
        for r in records
    )
    if magic == 1:
        if ts_attr and log_append_time_ms is not None:
            wrapper_ts = log_append_time_ms
        else:
            wrapper_ts = max(r.timestamp for r in records)
    else:
        wrapper_ts = NO_TIMESTAMP
    return encode_message(
        offset=records[-1].offset,
        magic=magic,
        key=None,
        value=compress(codec, inner, magic=magic),
        timestamp=wrapper_ts,
        attributes=ts_attr | codec,
    )
