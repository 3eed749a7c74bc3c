"""Framing of a ``.log`` segment: bytes in, :class:`RecordBatch` entries out.

Every byte is accounted for. Each entry starts with ``offset:int64 size:int32`` and its magic at
byte 16 (Kafka's ``ByteBufferLogInputStream.nextBatch``); we frame entries ourselves and hand each
one to the decoder for its magic, because aiokafka's compiled ``MemoryRecords`` misreads buffers
that mix magics.

Any defect raises a subclass of :class:`~compactor.errors.CompactorError` that carries the
entry's byte position and (when readable) its base offset; the caller adds the file path.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Sequence

import crc32c

from compactor.codec.compression import CODEC_MASK, KNOWN_CODECS
from compactor.codec.legacy import V0_OVERHEAD, decode_legacy_entry
from compactor.codec.records import (
    CRC_START,
    LOG_OVERHEAD,
    MAGIC_POSITION,
    RECORD_BATCH_OVERHEAD,
    V2_HEADER,
    RecordBatch,
)
from compactor.errors import (
    CorruptSegmentError,
    CrcMismatchError,
    TruncatedSegmentError,
    UnsupportedFormatError,
)

_FRAME = struct.Struct(">qi")
_OFFSET = struct.Struct(">q")


def iter_batches(
    data: bytes,
    *,
    path: str | None = None,
    start_position: int = 0,
    end_position: int | None = None,
    verify_crc: bool = True,
) -> Iterator[RecordBatch]:
    """Yield every entry of ``data[start_position:end_position]`` in file order.

    Args:
        data: the segment's bytes (or a prefix of them): anything that slices into ``bytes``
            and has a length (bytes, an mmap, a ranged object reader).
        path: file name used in error messages.
        start_position: byte position of the first entry (inclusive).
        end_position: byte position where entries stop (exclusive); default: end of ``data``.
        verify_crc: check each batch's CRC (v2: CRC-32C over bytes [21, end); v0/v1: CRC-32).

    Raises:
        TruncatedSegmentError: an entry or its header runs past ``end_position``.
        CorruptSegmentError: bad size, CRC mismatch, inconsistent header.
        UnsupportedFormatError: unknown magic or compression codec.
    """
    end = len(data) if end_position is None else end_position
    pos = start_position
    while pos < end:
        # one small slice for the frame, one for the entry: ``data`` may be an mmap or an
        # object read by ranges (storage.mapped), so nothing here indexes into it directly
        head = data[pos:min(pos + MAGIC_POSITION + 1, end)]
        if len(head) < MAGIC_POSITION + 1:
            raise TruncatedSegmentError(
                f"{end - pos} trailing bytes are too short to be an entry header "
                f"(a partial write or trailing garbage)",
                path=path,
                position=pos,
                base_offset=_OFFSET.unpack_from(head, 0)[0] if len(head) >= 8 else None,
            )
        base_offset, size = _FRAME.unpack_from(head, 0)
        if size < V0_OVERHEAD:
            hint = " (zero-filled tail of a preallocated segment?)" if size == 0 else ""
            raise CorruptSegmentError(
                f"entry declares size {size}, below the minimum of {V0_OVERHEAD} bytes{hint}",
                path=path,
                position=pos,
                base_offset=base_offset,
            )
        entry_end = pos + LOG_OVERHEAD + size
        if entry_end > end:
            raise TruncatedSegmentError(
                f"entry declares {size + LOG_OVERHEAD} bytes but only {end - pos} remain in "
                f"the file (truncated batch)",
                path=path,
                position=pos,
                base_offset=base_offset,
            )
        magic = head[MAGIC_POSITION]
        if magic == 2:
            yield _decode_v2_header(bytes(data[pos:entry_end]), pos, path, verify_crc)
        elif magic in (0, 1):
            try:
                batch = decode_legacy_entry(bytes(data[pos:entry_end]), pos,
                                            verify_crc=verify_crc)
            except (CorruptSegmentError, UnsupportedFormatError) as err:
                raise err.with_location(path=path)
            yield batch
        else:
            raise UnsupportedFormatError(
                f"entry has unknown magic {magic} (Kafka writes 0, 1 or 2)",
                path=path,
                position=pos,
                base_offset=base_offset,
            )
        pos = entry_end


def chunk_ranges(positions: Sequence[int], end: int, max_bytes: int) -> list[tuple[int, int]]:
    """``[start, end)`` byte ranges that cut a segment of ``end`` bytes between the entries at
    ``positions`` (ascending: where the planning scan found them) into chunks of at most
    ``max_bytes`` (one entry may exceed it alone), from the first byte to the last: a backward
    walk can then decode a chunk at a time, newest chunk first, without reading the file to
    find them. Nothing is checked here: decoding a chunk (:func:`iter_batches`) raises the
    located error where the segment is not what the positions say."""
    bounds: list[tuple[int, int]] = []
    chunk_start = last = 0  # the chunk being filled; the last entry boundary in it
    for boundary in (*positions, end):
        if boundary <= last or boundary > end:
            continue
        if boundary - chunk_start > max_bytes and last > chunk_start:
            bounds.append((chunk_start, last))
            chunk_start = last
        last = boundary
    if chunk_start < end:
        bounds.append((chunk_start, end))
    return bounds


def _decode_v2_header(raw: bytes, pos: int, path: str | None, verify_crc: bool) -> RecordBatch:
    """The v2 batch ``raw`` (its whole entry), found at byte ``pos`` of the file."""
    size_in_bytes = len(raw)
    if size_in_bytes < RECORD_BATCH_OVERHEAD:
        raise CorruptSegmentError(
            f"v2 batch of {size_in_bytes} bytes is shorter than its "
            f"{RECORD_BATCH_OVERHEAD}-byte header",
            path=path,
            position=pos,
            base_offset=_FRAME.unpack_from(raw, 0)[0],
        )
    (
        base_offset,
        _length,
        partition_leader_epoch,
        magic,
        crc,
        attributes,
        last_offset_delta,
        base_timestamp,
        max_timestamp,
        producer_id,
        producer_epoch,
        base_sequence,
        records_count,
    ) = V2_HEADER.unpack_from(raw, 0)
    if verify_crc:
        computed = crc32c.crc32c(memoryview(raw)[CRC_START:])
        if computed != crc:
            raise CrcMismatchError(
                f"batch CRC-32C mismatch: stored {crc:#010x}, computed {computed:#010x}",
                path=path,
                position=pos,
                base_offset=base_offset,
            )
    codec = attributes & CODEC_MASK
    if codec not in KNOWN_CODECS:
        raise UnsupportedFormatError(
            f"batch uses unknown compression codec id {codec}",
            path=path,
            position=pos,
            base_offset=base_offset,
        )
    if last_offset_delta < 0 or records_count < 0:
        raise CorruptSegmentError(
            f"batch has negative lastOffsetDelta ({last_offset_delta}) or record count "
            f"({records_count})",
            path=path,
            position=pos,
            base_offset=base_offset,
        )
    if records_count == 0 and size_in_bytes != RECORD_BATCH_OVERHEAD:
        raise CorruptSegmentError(
            f"empty batch carries {size_in_bytes - RECORD_BATCH_OVERHEAD} bytes of records",
            path=path,
            position=pos,
            base_offset=base_offset,
        )
    return RecordBatch(
        position=pos,
        base_offset=base_offset,
        size_in_bytes=size_in_bytes,
        partition_leader_epoch=partition_leader_epoch,
        magic=magic,
        crc=crc,
        attributes=attributes,
        last_offset_delta=last_offset_delta,
        base_timestamp=base_timestamp,
        max_timestamp=max_timestamp,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        records_count=records_count,
        raw=raw,
    )


def decode_segment(data: bytes, *, path: str | None = None) -> list[RecordBatch]:
    """All batches of a segment with their records fully decoded and checked.

    Convenience for tools and tests; jobs stream with :func:`iter_batches`.
    """
    batches = list(iter_batches(data, path=path))
    for batch in batches:
        try:
            batch.records()
        except (CorruptSegmentError, UnsupportedFormatError) as err:
            raise err.with_location(path=path)
    return batches
