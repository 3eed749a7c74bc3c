"""Executor-side extraction of compact rows from segment bytes: batch headers for planning,
and per-record key digests for the offset map. Values never leave the executor.

Keys are compared by their xxh3-128 digest, split into two signed 64-bit halves (Kafka compares
by MD5 digest in ``SkimpyOffsetMap``; both treat a digest collision as the same key).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import xxhash

from compactor.codec.records import RecordBatch
from compactor.codec.segment import iter_batches
from compactor.errors import CompactorError
from compactor.policy import NO_CONTROL_TYPE, BatchHeader

_MASK64 = (1 << 64) - 1
_SIGN64 = 1 << 63


def _signed(value: int) -> int:
    return value - (1 << 64) if value & _SIGN64 else value


def key_digest(key: bytes) -> tuple[int, int]:
    """``(high, low)`` signed 64-bit halves of the xxh3-128 digest of ``key``."""
    digest = xxhash.xxh3_128_intdigest(key)
    return _signed(digest >> 64), _signed(digest & _MASK64)


def batch_header(batch: RecordBatch, segment_base: int) -> BatchHeader:
    """The planning view of one batch (parses the control record of a control batch)."""
    control = batch.control_record() if batch.is_control else None
    horizon = batch.delete_horizon_ms
    return BatchHeader(
        segment_base=segment_base,
        position=batch.position,
        size_in_bytes=batch.size_in_bytes,
        base_offset=batch.base_offset,
        last_offset=batch.last_offset,
        magic=batch.magic,
        is_control=batch.is_control,
        is_transactional=batch.is_transactional,
        control_type=int(control.type) if control is not None else NO_CONTROL_TYPE,
        producer_id=batch.producer_id,
        producer_epoch=batch.producer_epoch,
        max_timestamp=batch.max_timestamp,
        horizon_ms=-1 if horizon is None else horizon,
        records_count=batch.records_count,
    )


def segment_headers(data: bytes, path: str, segment_base: int) -> list[BatchHeader]:
    """Headers of every batch of a segment, CRCs verified.

    Raises:
        CompactorError: the segment is corrupt (with file, position and base offset).
    """
    try:
        return [batch_header(b, segment_base) for b in iter_batches(data, path=path)]
    except CompactorError as err:
        raise err.with_location(path=path) from None


@dataclass(frozen=True, slots=True)
class BatchFlags:
    """The decision flags a record row inherits from its batch."""

    group_base: int
    is_control: bool
    aborted: bool
    discard_records: bool
    retain_deletes: bool


@dataclass(slots=True)
class RecordColumns:
    """Column lists of record rows (see ``schemas.spark.RECORD``)."""

    offset: list[int]
    key_hi: list[int | None]
    key_lo: list[int | None]
    is_tombstone: list[bool]
    in_dirty: list[bool]
    flags: list[BatchFlags]


def segment_records(data: bytes, path: str, flags_by_position: Mapping[int, BatchFlags],
                    first_dirty: int) -> RecordColumns:
    """Record rows of the batches of a segment that the round decided on.

    Records of batches the round drops whole need no key (they are not in the offset map);
    they still get a row so every record is accounted for.

    Args:
        flags_by_position: decision flags by batch position; batches not listed are skipped.
        first_dirty: records at or above it are in the dirty section (they feed the offset map
            unless their batch is aborted or a control batch).

    Raises:
        CompactorError: a batch cannot be decoded.
    """
    cols = RecordColumns([], [], [], [], [], [])
    try:
        for batch in iter_batches(data, path=path, verify_crc=False):
            flags = flags_by_position.get(batch.position)
            if flags is None:
                continue
            for record in batch.iter_compiled():
                key = record.key
                if key is None or flags.is_control or flags.discard_records:
                    hi = lo = None
                else:
                    hi, lo = key_digest(key)
                cols.offset.append(record.offset)
                cols.key_hi.append(hi)
                cols.key_lo.append(lo)
                cols.is_tombstone.append(record.value is None)
                cols.in_dirty.append(record.offset >= first_dirty)
                cols.flags.append(flags)
    except CompactorError as err:
        raise err.with_location(path=path) from None
    return cols
