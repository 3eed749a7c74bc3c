"""Segment indexes (Kafka's ``OffsetIndex``, ``TimeIndex``, ``TransactionIndex``): ``.index``,
``.timeindex``, ``.txnindex``.

Grammar (big-endian, no header, entries back to back)::

    .index      => (RelativeOffset:int32 Position:int32)*            8-byte entries
    .timeindex  => (Timestamp:int64 RelativeOffset:int32)*           12-byte entries
    .txnindex   => (Version:int16 ProducerId:int64 FirstOffset:int64
                    LastOffset:int64 LastStableOffset:int64)*        34-byte entries

Offsets in the read model are absolute; the files hold offsets relative to the segment's base
offset. :func:`build_indexes` is the canonical builder: Kafka's recovery path (``LogSegment.
recover``), which equals the 4.1+ per-batch append path for a freshly written segment.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from compactor.errors import CorruptIndexError

OFFSET_ENTRY = struct.Struct(">ii")
TIME_ENTRY = struct.Struct(">qi")
TXN_ENTRY = struct.Struct(">hqqqq")
INT32_MAX = 2**31 - 1
DEFAULT_INDEX_INTERVAL_BYTES = 4096
DEFAULT_SEGMENT_INDEX_BYTES = 10 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class OffsetIndexEntry:
    """``(offset, position)``: the batch starting at byte ``position`` is where a reader looking
    for ``offset`` starts scanning."""

    offset: int
    position: int


@dataclass(frozen=True, slots=True)
class TimeIndexEntry:
    """``(timestamp, offset)``: ``timestamp`` was the largest so far, carried by the batch whose
    last offset is ``offset``."""

    timestamp: int
    offset: int


@dataclass(frozen=True, slots=True, kw_only=True)
class AbortedTxn:
    """One ``.txnindex`` entry; ``first_offset`` and ``last_offset`` are inclusive (the data's
    first offset and the ABORT marker's offset)."""

    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int
    version: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class BatchIndexInfo:
    """What the index builder needs of one batch."""

    position: int
    size_in_bytes: int
    last_offset: int
    max_timestamp: int


def _relative(offset: int, base_offset: int, what: str) -> int:
    relative = offset - base_offset
    if not 0 <= relative <= INT32_MAX:
        raise ValueError(
            f"{what} offset {offset} cannot be stored relative to base offset {base_offset}"
        )
    return relative


def _slots(
    data: bytes,
    entry: struct.Struct,
    what: str,
    base_offset: int,
    path: str | None,
    allow_preallocated: bool,
) -> list[tuple[int, int]]:
    """Unpack fixed-size index slots, dropping trailing all-zero slots when allowed."""
    if len(data) % entry.size:
        raise CorruptIndexError(
            f"{what} is {len(data)} bytes, not a multiple of {entry.size}",
            path=path,
            base_offset=base_offset,
        )
    raw = [entry.unpack_from(data, p) for p in range(0, len(data), entry.size)]
    if allow_preallocated:
        while raw and raw[-1] == (0, 0):
            raw.pop()
    return raw


# ---------------------------------------------------------------------------------------------
# .index


def encode_offset_index(entries: Sequence[OffsetIndexEntry], base_offset: int) -> bytes:
    """Encode ``.index`` (trimmed: exactly ``len(entries) * 8`` bytes)."""
    return b"".join(
        OFFSET_ENTRY.pack(_relative(e.offset, base_offset, "index"), e.position) for e in entries
    )


def decode_offset_index(
    data: bytes, base_offset: int, *, path: str | None = None, allow_preallocated: bool = False
) -> list[OffsetIndexEntry]:
    """Decode ``.index``; entries must strictly increase in offset and position.

    Args:
        allow_preallocated: accept (and drop) all-zero slots at the end, as a live broker's
            active segment has them. Inactive segments must be trimmed (Kafka counts every slot).
    """
    try:
        return _decode_offset_index(data, base_offset, path, allow_preallocated)
    except CorruptIndexError as err:
        if _twelve_byte_entries(data):
            err.message += _KIP_1333
        raise


# KIP-1333 proposes offset index entries of 12 bytes (a 4-byte relative offset, an 8-byte
# position). Kafka 4.1-4.4's OffsetIndex writes and reads 8 (ENTRY_SIZE); its sanityCheck
# refuses another size (CorruptIndexException) and 8-byte reads of 12-byte entries fail the
# ordering checks, as ours do. A refused index that reads as 12-byte entries says so.
_KIP_1333 = ("; it reads as 12-byte entries, the format KIP-1333 proposes, which no Kafka "
             "release up to 4.4 writes or reads: the tool reads 8-byte entries only")
_TWELVE = np.dtype([("relative", ">i4"), ("position", ">i8")])


def _twelve_byte_entries(data: bytes) -> bool:
    if not data or len(data) % _TWELVE.itemsize:
        return False
    rows = np.frombuffer(data, _TWELVE)
    return bool((rows["relative"] >= 0).all() and (rows["position"] >= 0).all()
                and (np.diff(rows["relative"]) > 0).all()
                and (np.diff(rows["position"]) > 0).all())


def _decode_offset_index(data: bytes, base_offset: int, path: str | None,
                         allow_preallocated: bool) -> list[OffsetIndexEntry]:
    raw = _slots(data, OFFSET_ENTRY, "offset index", base_offset, path, allow_preallocated)
    entries: list[OffsetIndexEntry] = []
    for slot, (relative, position) in enumerate(raw):
        if relative < 0 or position < 0:
            raise CorruptIndexError(
                f"offset index slot {slot} holds negative relative offset {relative} or "
                f"position {position}",
                path=path,
                position=slot * OFFSET_ENTRY.size,
                base_offset=base_offset,
            )
        if entries and (
            base_offset + relative <= entries[-1].offset or position <= entries[-1].position
        ):
            raise CorruptIndexError(
                f"offset index slot {slot} ({base_offset + relative}, position {position}) does "
                f"not follow ({entries[-1].offset}, position {entries[-1].position})",
                path=path,
                position=slot * OFFSET_ENTRY.size,
                base_offset=base_offset,
            )
        entries.append(OffsetIndexEntry(base_offset + relative, position))
    return entries


def last_offset_entry(data: bytes, base_offset: int, *, path: str | None = None,
                      allow_preallocated: bool = False) -> tuple[int, OffsetIndexEntry] | None:
    """The last entry of ``.index`` and its slot (``None`` when it has none) after every
    check of :func:`decode_offset_index`, made on whole columns at once: a segment's metadata
    needs only the last entry of an index of thousands. Raises the same located error."""
    columns = offset_index_columns(data, allow_preallocated=allow_preallocated)
    if columns is None:
        entries = decode_offset_index(data, base_offset, path=path,
                                      allow_preallocated=allow_preallocated)
        # (it raised: the checks are the same)
        return (len(entries) - 1, entries[-1]) if entries else None
    relative, position = columns
    if not len(relative):
        return None
    return len(relative) - 1, OffsetIndexEntry(base_offset + int(relative[-1]),
                                               int(position[-1]))


def offset_index_columns(data: bytes, *, allow_preallocated: bool = False
                         ) -> tuple[np.ndarray, np.ndarray] | None:
    """The relative offsets and positions of ``.index``'s entries (int64 arrays) when every
    check of :func:`decode_offset_index` passes, made on whole columns at once; ``None``
    when one fails (:func:`decode_offset_index` then says which slot, and where)."""
    rows = _rows(data, OFFSET_ENTRY, np.dtype([("relative", ">i4"), ("position", ">i4")]),
                 allow_preallocated)
    if rows is None or (rows["relative"] < 0).any() or (rows["position"] < 0).any() or (
            np.diff(rows["relative"]) <= 0).any() or (np.diff(rows["position"]) <= 0).any():
        return None
    return rows["relative"].astype(np.int64), rows["position"].astype(np.int64)


def _rows(data: bytes, entry: struct.Struct, dtype: np.dtype, allow_preallocated: bool
          ) -> np.ndarray | None:
    """The slots of an index as a structured array (trailing all-zero slots dropped when
    allowed), or ``None`` when its size is not a whole number of slots."""
    if len(data) % entry.size:
        return None
    rows = np.frombuffer(data, dtype)
    if allow_preallocated:
        used = np.flatnonzero(np.frombuffer(data, np.uint8).reshape(-1, entry.size).any(axis=1))
        rows = rows[:used[-1] + 1 if used.size else 0]
    return rows


# ---------------------------------------------------------------------------------------------
# .timeindex


def encode_time_index(entries: Sequence[TimeIndexEntry], base_offset: int) -> bytes:
    """Encode ``.timeindex`` (trimmed)."""
    return b"".join(
        TIME_ENTRY.pack(e.timestamp, _relative(e.offset, base_offset, "time index"))
        for e in entries
    )


def time_index_columns(data: bytes, *, allow_preallocated: bool = False
                       ) -> tuple[np.ndarray, np.ndarray] | None:
    """The timestamps and relative offsets of ``.timeindex``'s entries (int64 arrays) when
    every check of :func:`decode_time_index` passes, made on whole columns at once; ``None``
    when one fails (:func:`decode_time_index` then says which slot, and where)."""
    rows = _rows(data, TIME_ENTRY, np.dtype([("timestamp", ">i8"), ("relative", ">i4")]),
                 allow_preallocated)
    if rows is None or (rows["relative"] < 0).any() or (
            np.diff(rows["timestamp"]) < 0).any() or (np.diff(rows["relative"]) < 0).any():
        return None
    return rows["timestamp"].astype(np.int64), rows["relative"].astype(np.int64)


def decode_time_index(
    data: bytes, base_offset: int, *, path: str | None = None, allow_preallocated: bool = False
) -> list[TimeIndexEntry]:
    """Decode ``.timeindex``; timestamps and offsets must not decrease (Kafka rejects such
    appends)."""
    raw = _slots(data, TIME_ENTRY, "time index", base_offset, path, allow_preallocated)
    entries: list[TimeIndexEntry] = []
    for slot, (timestamp, relative) in enumerate(raw):
        if relative < 0:
            raise CorruptIndexError(
                f"time index slot {slot} holds negative relative offset {relative}",
                path=path,
                position=slot * TIME_ENTRY.size,
                base_offset=base_offset,
            )
        offset = base_offset + relative
        if entries and (timestamp < entries[-1].timestamp or offset < entries[-1].offset):
            raise CorruptIndexError(
                f"time index slot {slot} ({timestamp}, {offset}) goes back from "
                f"({entries[-1].timestamp}, {entries[-1].offset})",
                path=path,
                position=slot * TIME_ENTRY.size,
                base_offset=base_offset,
            )
        entries.append(TimeIndexEntry(timestamp, offset))
    return entries


def last_time_entry(data: bytes, base_offset: int, *, path: str | None = None,
                    allow_preallocated: bool = False) -> TimeIndexEntry | None:
    """The last entry of ``.timeindex`` (``None`` when it has none) after every check of
    :func:`decode_time_index`, made on whole columns at once (:func:`last_offset_entry`)."""
    rows = _rows(data, TIME_ENTRY, np.dtype([("timestamp", ">i8"), ("relative", ">i4")]),
                 allow_preallocated)
    if rows is None or (rows["relative"] < 0).any() or (
            np.diff(rows["timestamp"]) < 0).any() or (np.diff(rows["relative"]) < 0).any():
        entries = decode_time_index(data, base_offset, path=path,
                                    allow_preallocated=allow_preallocated)
        return entries[-1] if entries else None  # (it raised: the checks are the same)
    if not len(rows):
        return None
    return TimeIndexEntry(int(rows["timestamp"][-1]), base_offset + int(rows["relative"][-1]))


# ---------------------------------------------------------------------------------------------
# .txnindex


def encode_txn_index(entries: Sequence[AbortedTxn]) -> bytes:
    """Encode ``.txnindex`` (absolute offsets; Kafka stores them absolute)."""
    return b"".join(
        TXN_ENTRY.pack(e.version, e.producer_id, e.first_offset, e.last_offset,
                       e.last_stable_offset)
        for e in entries
    )


def decode_txn_index(
    data: bytes, base_offset: int, *, path: str | None = None
) -> list[AbortedTxn]:
    """Decode ``.txnindex``; entries must have strictly increasing ``last_offset`` >= the
    segment base offset and ``first_offset <= last_offset``."""
    if len(data) % TXN_ENTRY.size:
        raise CorruptIndexError(
            f"transaction index is {len(data)} bytes, not a multiple of {TXN_ENTRY.size}",
            path=path,
            base_offset=base_offset,
        )
    entries: list[AbortedTxn] = []
    for slot, pos in enumerate(range(0, len(data), TXN_ENTRY.size)):
        version, producer_id, first, last, lso = TXN_ENTRY.unpack_from(data, pos)
        problem = None
        if version != 0:
            problem = f"unknown version {version}"
        elif last < base_offset:
            problem = f"last offset {last} is below the segment base offset"
        elif first > last:
            problem = f"first offset {first} is after last offset {last}"
        elif entries and last <= entries[-1].last_offset:
            problem = f"last offset {last} does not increase (previous {entries[-1].last_offset})"
        if problem:
            raise CorruptIndexError(
                f"transaction index slot {slot}: {problem}",
                path=path,
                position=pos,
                base_offset=base_offset,
            )
        entries.append(
            AbortedTxn(
                producer_id=producer_id,
                first_offset=first,
                last_offset=last,
                last_stable_offset=lso,
                version=version,
            )
        )
    return entries


# ---------------------------------------------------------------------------------------------
# Canonical builder


def build_indexes(
    batches: Iterable[BatchIndexInfo],
    base_offset: int,
    *,
    index_interval_bytes: int = DEFAULT_INDEX_INTERVAL_BYTES,
    segment_index_bytes: int = DEFAULT_SEGMENT_INDEX_BYTES,
) -> tuple[list[OffsetIndexEntry], list[TimeIndexEntry]]:
    """Offset and time index entries of a segment, as Kafka's recovery path writes them.

    For each batch in file order: raise the running max timestamp (remembering the last offset
    of the first batch that carried it); if more than ``index_interval_bytes`` were appended
    since the last indexed batch, index ``(batch.last_offset, batch.position)`` and the running
    max; count the batch's bytes. The first batch is never indexed. Finally the segment becomes
    inactive: the running max is appended to the time index if it is larger than its last entry.
    Time entries are only appended when their timestamp exceeds the last one (initially -1).

    Raises:
        ValueError: more entries than ``segment_index_bytes`` can hold, or an offset that does
            not fit 32 bits relative to ``base_offset``.
    """
    offsets: list[OffsetIndexEntry] = []
    times: list[TimeIndexEntry] = []
    max_timestamp = -1
    offset_of_max = -1
    last_indexed_position = 0
    valid_bytes = 0
    for batch in batches:
        if batch.max_timestamp > max_timestamp:
            max_timestamp = batch.max_timestamp
            offset_of_max = batch.last_offset
        if valid_bytes - last_indexed_position > index_interval_bytes:
            offsets.append(OffsetIndexEntry(batch.last_offset, batch.position))
            _maybe_append_time(times, max_timestamp, offset_of_max)
            last_indexed_position = valid_bytes
        valid_bytes += batch.size_in_bytes
    _maybe_append_time(times, max_timestamp, offset_of_max)
    if len(offsets) > segment_index_bytes // OFFSET_ENTRY.size:
        raise ValueError(f"{len(offsets)} offset index entries exceed segment.index.bytes")
    if len(times) > segment_index_bytes // TIME_ENTRY.size:
        raise ValueError(f"{len(times)} time index entries exceed segment.index.bytes")
    for entry in offsets:
        _relative(entry.offset, base_offset, "index")
    return offsets, times


def _maybe_append_time(times: list[TimeIndexEntry], timestamp: int, offset: int) -> None:
    last_timestamp = times[-1].timestamp if times else -1
    if timestamp > last_timestamp:
        times.append(TimeIndexEntry(timestamp, offset))
