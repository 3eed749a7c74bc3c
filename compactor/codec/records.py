"""Record batches: the read model, the write model and the v2 encoder (Kafka's
``DefaultRecordBatch``, ``DefaultRecord``).

Wire grammar of one ``.log`` entry (every integer big-endian)::

    Entry        => Offset:int64 Size:int32 <Size bytes, the first of which sit at byte 12>
    v2 batch     => BaseOffset:int64 Length:int32 PartitionLeaderEpoch:int32 Magic:int8(=2)
                    Crc:uint32 Attributes:int16 LastOffsetDelta:int32 BaseTimestamp:int64
                    MaxTimestamp:int64 ProducerId:int64 ProducerEpoch:int16 BaseSequence:int32
                    RecordsCount:int32 Records                     (61-byte header)
    Crc          => CRC-32C of bytes [21, end of batch)            (epoch at 12..15 not covered)
    Attributes   => bits 0-2 codec | 3 LogAppendTime | 4 transactional | 5 control
                    | 6 delete horizon in BaseTimestamp
    Record       => Length:varint Attributes:int8 TimestampDelta:varlong OffsetDelta:varint
                    KeyLength:varint Key ValueLength:varint Value HeaderCount:varint Header*
    Header       => KeyLength:varint Key(utf-8) ValueLength:varint Value
    Control key  => Version:int16 Type:int16 (0 ABORT, 1 COMMIT)
    Marker value => Version:int16 CoordinatorEpoch:int32

Legacy v0/v1 messages are handled in :mod:`compactor.codec.legacy` and surface through the same
read model (:class:`RecordBatch` with ``magic`` 0 or 1).

The hot path (record decoding of v2 batches) is aiokafka's compiled reader, fed one batch at a
time by our own framing (aiokafka mis-frames buffers that mix magics, so it never sees more than
one entry).
"""

from __future__ import annotations

import gzip
import struct
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any

import cramjam
import crc32c
import zstandard
from aiokafka.errors import CorruptRecordException, UnsupportedCodecError
from aiokafka.record._crecords import DefaultRecordBatch as _CompiledBatch

from compactor.codec import varint
from compactor.codec.compression import CODEC_MASK, Codec, DecompressionError, codec_name, compress
from compactor.errors import CorruptSegmentError

# The v2 batch header, field by field: where each starts (``DefaultRecordBatch``'s
# ``*_OFFSET`` constants). The kernels read and write the header by these names.
BASE_OFFSET_OFFSET = 0
LENGTH_OFFSET = 8  # the batch's size after this field
PARTITION_LEADER_EPOCH_OFFSET = 12
MAGIC_OFFSET = 16
CRC_OFFSET = 17
ATTRIBUTES_OFFSET = 21  # the CRC-32C covers from here to the end of the batch
LAST_OFFSET_DELTA_OFFSET = 23
BASE_TIMESTAMP_OFFSET = 27
MAX_TIMESTAMP_OFFSET = 35
PRODUCER_ID_OFFSET = 43
PRODUCER_EPOCH_OFFSET = 51
BASE_SEQUENCE_OFFSET = 53
RECORDS_COUNT_OFFSET = 57
RECORDS_OFFSET = 61

LOG_OVERHEAD = 12  # offset + size, the framing in front of every entry
MAGIC_POSITION = MAGIC_OFFSET
RECORD_BATCH_OVERHEAD = RECORDS_OFFSET
CRC_START = ATTRIBUTES_OFFSET
NO_TIMESTAMP = -1
NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
NO_PARTITION_LEADER_EPOCH = -1
INT32_MAX = 2**31 - 1

ATTR_TIMESTAMP_TYPE = 0x08
ATTR_TRANSACTIONAL = 0x10
ATTR_CONTROL = 0x20
ATTR_DELETE_HORIZON = 0x40

# The whole 61-byte header as one struct; field order is the wire order.
V2_HEADER = struct.Struct(">qiibIhiqqqhii")
_CRC_FIELD = struct.Struct(">I")
_CONTROL_KEY = struct.Struct(">hh")
_MARKER_VALUE = struct.Struct(">hi")


class TimestampType(IntEnum):
    """Attribute bit 3."""

    CREATE_TIME = 0
    LOG_APPEND_TIME = 1


class ControlType(IntEnum):
    """Control record types (Kafka's ``ControlRecordType``, ``EndTransactionMarker``); KRaft-only
    types are listed for display."""

    ABORT = 0
    COMMIT = 1
    LEADER_CHANGE = 2
    SNAPSHOT_HEADER = 3
    SNAPSHOT_FOOTER = 4
    KRAFT_VERSION = 5
    KRAFT_VOTERS = 6
    UNKNOWN = -1


@dataclass(frozen=True, slots=True, kw_only=True)
class Record:
    """One record as read: absolute offset and timestamp, raw key and value (``None`` = null).

    A record with a non-null key and a null value is a tombstone.
    """

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...] = ()

    @property
    def is_tombstone(self) -> bool:
        return self.value is None


@dataclass(frozen=True, slots=True, kw_only=True)
class ControlRecord:
    """The decoded key (and marker value) of a control record."""

    version: int
    type: ControlType
    coordinator_epoch: int | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class RecordBatch:
    """One entry of a ``.log`` file: a v2 record batch, or a v0/v1 (wrapper) message.

    Offsets are absolute. For legacy entries ``base_offset`` is the first inner offset and
    ``last_offset`` the wrapper offset; producer fields and the leader epoch are absent (-1).

    Attributes:
        position: byte position of the entry's first byte in its segment.
        size_in_bytes: the entry's total size, framing included (``LOG_OVERHEAD`` + size field).
        raw: the entry's exact bytes, for verbatim copies and lazy record decoding.
    """

    position: int
    base_offset: int
    size_in_bytes: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int
    raw: bytes = field(repr=False, compare=False)
    legacy_records: tuple[Record, ...] | None = field(default=None, repr=False, compare=False)

    @property
    def compression(self) -> int:
        return self.attributes & CODEC_MASK

    @property
    def timestamp_type(self) -> TimestampType:
        return TimestampType(1 if self.attributes & ATTR_TIMESTAMP_TYPE else 0)

    @property
    def is_transactional(self) -> bool:
        return self.magic >= 2 and bool(self.attributes & ATTR_TRANSACTIONAL)

    @property
    def is_control(self) -> bool:
        return self.magic >= 2 and bool(self.attributes & ATTR_CONTROL)

    @property
    def has_delete_horizon(self) -> bool:
        return self.magic >= 2 and bool(self.attributes & ATTR_DELETE_HORIZON)

    @property
    def delete_horizon_ms(self) -> int | None:
        """The delete horizon (epoch ms) when attribute bit 6 is set, else ``None``."""
        return self.base_timestamp if self.has_delete_horizon else None

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.last_offset + 1

    @property
    def has_producer_id(self) -> bool:
        return self.producer_id > NO_PRODUCER_ID

    @property
    def last_sequence(self) -> int:
        """``base_sequence + last_offset_delta`` with Kafka's wrap-around at ``INT32_MAX``."""
        return add_sequence(self.base_sequence, self.last_offset_delta)

    @property
    def end_position(self) -> int:
        return self.position + self.size_in_bytes

    def records(self) -> list[Record]:
        """Decode every record of the batch (decompressing it if needed).

        Raises:
            CorruptSegmentError: the records do not match the batch header (unknown codecs
                were already refused when the batch was framed).
        """
        if self.legacy_records is not None:
            return list(self.legacy_records)
        return [
            Record(
                offset=r.offset,
                timestamp=r.timestamp,
                key=r.key,
                value=r.value,
                headers=tuple(r.headers),
            )
            for r in self.iter_compiled()
        ]

    def compiled_records(self) -> list[_CompiledRecord]:
        """:meth:`iter_compiled` as a list, decoded in one C loop (the hot path of the scan
        and the writer); the same errors."""
        if self.legacy_records is not None:
            return list(self.legacy_records)  # type: ignore[arg-type]
        try:
            records = list(_CompiledBatch(self.raw))
        except _DECODE_ERRORS:
            records = None
        if records is None or len(records) != self.records_count:
            return list(self.iter_compiled())  # raises the located error
        previous, last = self.base_offset - 1, self.last_offset
        for record in records:
            offset = record.offset
            if not previous < offset <= last:
                return list(self.iter_compiled())  # raises the located error
            previous = offset
        return records

    def iter_compiled(self) -> Iterator[_CompiledRecord]:
        """Fast path: aiokafka's compiled record objects (``offset``, ``timestamp``, ``key``,
        ``value``, ``headers``) without building our own :class:`Record` per record.

        Only for v2 batches; legacy entries are decoded eagerly at framing time.
        """
        if self.legacy_records is not None:
            yield from self.legacy_records  # type: ignore[misc]
            return
        count = 0
        previous, last = self.base_offset - 1, self.last_offset
        try:
            for record in _CompiledBatch(self.raw):
                # DefaultRecordBatch's records carry base offset + delta; a delta must grow
                # from record to record and stay within lastOffsetDelta (the batch's last
                # offset), or the offsets a reader sees overlap each other or the next batch
                if not previous < record.offset <= last:
                    raise CorruptSegmentError(
                        f"record {count} has offset {record.offset}, but record offsets must "
                        f"increase within a batch (previous {previous}) and not pass its last "
                        f"offset {last} (lastOffsetDelta {self.last_offset_delta})",
                        position=self.position, base_offset=self.base_offset)
                previous = record.offset
                count += 1
                yield record
        except _DECODE_ERRORS as err:
            raise CorruptSegmentError(
                f"record {count} of a {codec_name(self.compression)} batch cannot be decoded "
                f"({type(err).__name__}: {err})",
                position=self.position,
                base_offset=self.base_offset,
            ) from err
        if count != self.records_count:
            raise CorruptSegmentError(
                f"batch declares {self.records_count} records but holds {count}",
                position=self.position,
                base_offset=self.base_offset,
            )

    def control_record(self) -> ControlRecord | None:
        """The control record of a control batch; ``None`` for data batches and for control
        batches emptied by the cleaner (they carry no type)."""
        if not self.is_control or self.records_count == 0:
            return None
        first = next(iter(self.iter_compiled()))
        return parse_control_record(first.key, first.value, position=self.position,
                                    base_offset=self.base_offset)


# What aiokafka's compiled reader and its codecs raise on bytes they cannot decode (measured
# by fuzzing batches with valid CRCs, see tests/property): nothing wider, so that an I/O error
# or a bug is never reported as a corrupt segment.
_DECODE_ERRORS = (
    CorruptRecordException,
    UnsupportedCodecError,
    DecompressionError,
    UnicodeDecodeError,  # a header key that is not UTF-8
    struct.error,
    gzip.BadGzipFile,
    EOFError,
    zlib.error,
    zstandard.ZstdError,
    cramjam.DecompressionError,
)


class _CompiledRecord:  # pragma: no cover - typing aid for aiokafka's compiled record
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]]


def add_sequence(sequence: int, delta: int) -> int:
    """Kafka's ``DefaultRecordBatch.incrementSequence``: wrap to 0 after ``INT32_MAX``."""
    if sequence == NO_SEQUENCE:
        return NO_SEQUENCE
    if sequence > INT32_MAX - delta:
        return delta - (INT32_MAX - sequence) - 1
    return sequence + delta


def parse_control_record(
    key: bytes | None,
    value: bytes | None,
    *,
    position: int | None = None,
    base_offset: int | None = None,
) -> ControlRecord:
    """Decode a control record's key (and, for ABORT/COMMIT, its marker value).

    Kafka accepts keys of >= 4 bytes, rejects negative versions and reads other versions as 0.
    """
    if key is None or len(key) < _CONTROL_KEY.size:
        raise CorruptSegmentError(
            "control record key is shorter than 4 bytes", position=position, base_offset=base_offset
        )
    version, type_id = _CONTROL_KEY.unpack_from(key)
    if version < 0:
        raise CorruptSegmentError(
            f"control record key has negative version {version}",
            position=position,
            base_offset=base_offset,
        )
    try:
        control_type = ControlType(type_id)
    except ValueError:
        control_type = ControlType.UNKNOWN
    coordinator_epoch = None
    if control_type in (ControlType.ABORT, ControlType.COMMIT):
        if value is None or len(value) < _MARKER_VALUE.size:
            raise CorruptSegmentError(
                "transaction marker value is shorter than 6 bytes",
                position=position,
                base_offset=base_offset,
            )
        _, coordinator_epoch = _MARKER_VALUE.unpack_from(value)
    return ControlRecord(version=version, type=control_type, coordinator_epoch=coordinator_epoch)


def control_key(control_type: ControlType | int) -> bytes:
    """The 4-byte key of a control record (version 0)."""
    return _CONTROL_KEY.pack(0, int(control_type))


def marker_value(coordinator_epoch: int) -> bytes:
    """The 6-byte value of an ABORT/COMMIT marker (version 0)."""
    return _MARKER_VALUE.pack(0, coordinator_epoch)


# ---------------------------------------------------------------------------------------------
# Write model and encoder


@dataclass(frozen=True, slots=True, kw_only=True)
class NewRecord:
    """One record to write. ``offset_delta`` is relative to the batch base offset; the
    timestamp is absolute (the encoder derives the delta from the batch base timestamp)."""

    offset_delta: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class NewRecordBatch:
    """A v2 batch to write, with control of every header field.

    Fields left ``None`` take Kafka's values: ``last_offset_delta`` = the last record's offset
    delta; ``base_timestamp`` = the delete horizon when one is given, else the first record's
    timestamp, else -1 (empty batch); ``max_timestamp`` = the largest record timestamp, else -1.
    """

    base_offset: int
    records: Sequence[NewRecord] = ()
    compression: int = Codec.NONE
    compression_level: int | None = None
    timestamp_type: TimestampType = TimestampType.CREATE_TIME
    is_transactional: bool = False
    is_control: bool = False
    delete_horizon_ms: int | None = None
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH
    base_sequence: int = NO_SEQUENCE
    last_offset_delta: int | None = None
    base_timestamp: int | None = None
    max_timestamp: int | None = None

    @property
    def attributes(self) -> int:
        attrs = int(self.compression) & CODEC_MASK
        if self.timestamp_type == TimestampType.LOG_APPEND_TIME:
            attrs |= ATTR_TIMESTAMP_TYPE
        if self.is_transactional:
            attrs |= ATTR_TRANSACTIONAL
        if self.is_control:
            attrs |= ATTR_CONTROL
        if self.delete_horizon_ms is not None:
            attrs |= ATTR_DELETE_HORIZON
        return attrs


_NULL = b"\x01"  # varint -1: a null key, value or header value
_NO_HEADERS = b"\x00"


def _encode_records(records: Sequence[Any], base_offset: int, base_timestamp: int, *,
                    relative: bool) -> bytes:
    """The records part of a v2 batch, each record with its length varint.

    Args:
        records: :class:`NewRecord` (``relative``: offset deltas) or records with absolute
            offsets (:class:`Record`, the compiled reader's records); timestamps absolute.
    """
    enc = varint.encode
    small, limit = varint.SMALL, varint.SMALL_NON_NEGATIVE  # inlined encode() of small values
    out: list[bytes] = []
    append = out.append
    for r in records:
        key = r.key
        value = r.value
        headers = r.headers
        delta = r.timestamp - base_timestamp
        offset_delta = r.offset_delta if relative else r.offset - base_offset
        body = b"".join((
            b"\x00",
            small[delta << 1] if 0 <= delta < limit else enc(delta),
            small[offset_delta << 1] if 0 <= offset_delta < limit else enc(offset_delta),
            _NULL if key is None else (small[len(key) << 1] if len(key) < limit
                                       else enc(len(key))) + key,
            _NULL if value is None else (small[len(value) << 1] if len(value) < limit
                                         else enc(len(value))) + value,
            _encode_headers(headers) if headers else _NO_HEADERS,
        ))
        size = len(body)
        append(small[size << 1] if size < limit else enc(size))
        append(body)
    return b"".join(out)


def _encode_headers(headers: Sequence[tuple[str, bytes | None]]) -> bytes:
    enc = varint.encode
    parts = [enc(len(headers))]
    for name, header_value in headers:
        name_bytes = name.encode("utf-8")
        parts += (enc(len(name_bytes)), name_bytes)
        if header_value is None:
            parts.append(_NULL)
        else:
            parts += (enc(len(header_value)), header_value)
    return b"".join(parts)


def encode_batch(batch: NewRecordBatch) -> bytes:
    """Encode a v2 record batch, CRC included.

    Raises:
        ValueError: the write model is inconsistent (offset deltas not strictly increasing,
            negative, or beyond ``last_offset_delta``; zstd level out of range, ...).
    """
    records = batch.records
    previous = -1
    for record in records:
        if record.offset_delta <= previous:
            raise ValueError(
                f"record offset deltas must strictly increase from 0 (got {record.offset_delta} "
                f"after {previous})"
            )
        previous = record.offset_delta
    last_offset_delta = batch.last_offset_delta
    if last_offset_delta is None:
        last_offset_delta = records[-1].offset_delta if records else 0
    if records and last_offset_delta < records[-1].offset_delta:
        raise ValueError("last_offset_delta is smaller than the last record's offset delta")
    if not 0 <= last_offset_delta <= INT32_MAX:
        raise ValueError(f"last_offset_delta {last_offset_delta} out of range")

    if batch.base_timestamp is not None:
        base_timestamp = batch.base_timestamp
    elif batch.delete_horizon_ms is not None:
        base_timestamp = batch.delete_horizon_ms
    elif records:
        base_timestamp = records[0].timestamp
    else:
        base_timestamp = NO_TIMESTAMP
    if batch.max_timestamp is not None:
        max_timestamp = batch.max_timestamp
    elif records:
        max_timestamp = max(r.timestamp for r in records)
    else:
        max_timestamp = NO_TIMESTAMP
    body = _encode_records(records, batch.base_offset, base_timestamp, relative=True)
    return _frame(batch, body, len(records), last_offset_delta=last_offset_delta,
                  base_timestamp=base_timestamp, max_timestamp=max_timestamp)


def rebuild_batch(source: RecordBatch, retained: Sequence[Any], *,
                  delete_horizon_ms: int | None) -> bytes:
    """A v2 batch rebuilt with only some of its records, the way the cleaner rebuilds it
    (Kafka's ``MemoryRecords.filterTo``): base offset, ``lastOffsetDelta``, producer fields, leader
    epoch, codec, timestamp type and the transactional and control flags kept; the base timestamp
    is the delete horizon when there is one, else the first retained record's; the max
    timestamp is the source's under LogAppendTime, else the largest retained one.

    Args:
        retained: at least one of ``source``'s records, in offset order (:class:`Record` or
            the compiled reader's records).
    """
    log_append = source.timestamp_type == TimestampType.LOG_APPEND_TIME
    base_timestamp = (delete_horizon_ms if delete_horizon_ms is not None
                      else retained[0].timestamp)
    max_timestamp = (source.max_timestamp if log_append
                     else max(r.timestamp for r in retained))
    body = _encode_records(retained, source.base_offset, base_timestamp, relative=False)
    return frame_rebuilt(source, body, len(retained), delete_horizon_ms=delete_horizon_ms,
                         base_timestamp=base_timestamp, max_timestamp=max_timestamp)


def frame_rebuilt(source: RecordBatch, body: bytes, count: int, *,
                  delete_horizon_ms: int | None, base_timestamp: int,
                  max_timestamp: int) -> bytes:
    """The header, compression and CRC of a batch rebuilt from ``source``
    (:func:`rebuild_batch`) around ``count`` encoded records ``body``."""
    header = NewRecordBatch(
        base_offset=source.base_offset, compression=source.compression,
        timestamp_type=source.timestamp_type, is_transactional=source.is_transactional,
        is_control=source.is_control, delete_horizon_ms=delete_horizon_ms,
        partition_leader_epoch=source.partition_leader_epoch, producer_id=source.producer_id,
        producer_epoch=source.producer_epoch, base_sequence=source.base_sequence,
        last_offset_delta=source.last_offset_delta,
    )
    return _frame(header, body, count, last_offset_delta=source.last_offset_delta,
                  base_timestamp=base_timestamp, max_timestamp=max_timestamp)


def _frame(batch: NewRecordBatch, body: bytes, count: int, *, last_offset_delta: int,
           base_timestamp: int, max_timestamp: int) -> bytes:
    """Header (from ``batch``'s fields and the given values), compression and CRC around the
    encoded records."""
    if batch.compression != Codec.NONE and count:
        body = compress(batch.compression, body, level=batch.compression_level)
    attributes = batch.attributes
    if not count:
        attributes &= ~CODEC_MASK  # Kafka writes empty batches uncompressed

    header = bytearray(RECORD_BATCH_OVERHEAD)
    V2_HEADER.pack_into(
        header,
        0,
        batch.base_offset,
        RECORD_BATCH_OVERHEAD - LOG_OVERHEAD + len(body),
        batch.partition_leader_epoch,
        2,
        0,  # CRC, filled in below
        attributes,
        last_offset_delta,
        base_timestamp,
        max_timestamp,
        batch.producer_id,
        batch.producer_epoch,
        batch.base_sequence,
        count,
    )
    crc = crc32c.crc32c(body, crc32c.crc32c(bytes(header[CRC_START:])))
    _CRC_FIELD.pack_into(header, 17, crc)
    return bytes(header) + body


def empty_batch_like(batch: RecordBatch) -> bytes:
    """The bare 61-byte header the cleaner writes when a batch must stay but none of its
    records (``MemoryRecords.filterTo`` keeps such batches for producer state): offsets, epoch,
        producer fields, transactional/control
    flags, timestamp type and max timestamp kept; base timestamp -1; no codec; no horizon."""
    return encode_batch(
        NewRecordBatch(
            base_offset=batch.base_offset,
            last_offset_delta=batch.last_offset_delta,
            partition_leader_epoch=batch.partition_leader_epoch,
            producer_id=batch.producer_id,
            producer_epoch=batch.producer_epoch,
            base_sequence=batch.base_sequence,
            is_transactional=batch.is_transactional,
            is_control=batch.is_control,
            timestamp_type=batch.timestamp_type,
            base_timestamp=NO_TIMESTAMP,
            max_timestamp=batch.max_timestamp,
        )
    )
