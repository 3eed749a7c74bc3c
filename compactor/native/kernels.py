"""Native record kernels (numba JIT) for the records section of a v2 batch: the writer's
per-record work without a Python object per record.

:func:`parse_layout` reads every record of a section (``DefaultRecord.readFrom``'s grammar,
see :mod:`compactor.codec.records`) into a row of integers: where it starts and ends, where its
timestamp delta sits, its offset and timestamp deltas, where its key is and how long the key
and value are. :func:`rebuild_records` writes the retained records of a section again against
a new base timestamp: each record's bytes after its timestamp delta are copied unchanged (the
offset deltas stay, the base offset does not move), only the length and the timestamp delta are
written anew, which is what ``MemoryRecords.filterTo`` produces when it re-appends the records
to a builder with the batch's base offset.

The pure-Python codec stays the reference and the judge of odd input: the kernels report, instead
of deciding, anything where their bytes could differ from it (:data:`MALFORMED`, a record the
pure decoder must raise on or accept on its own terms; :data:`NOT_CANONICAL`, a record the pure
encoder would write differently: record attributes other than 0, a varint longer than needed, a
varint32 beyond 32 bits, a non-ASCII header key; :data:`ODD_OFFSETS`, offset deltas that do not
strictly increase from 0 or pass the batch's ``lastOffsetDelta``), and the callers hand those
batches to the pure path.

Compiled on first use and cached on disk next to this module (``cache=True``); importing this
module does not compile anything.
"""

from __future__ import annotations

import numpy as np

from compactor.native.cache import kernel

OK = 0
MALFORMED = 1
NOT_CANONICAL = 2
ODD_OFFSETS = 4

# the columns of a layout row (one row per record)
REST = 0  # position right after the timestamp delta (offset delta, key, value, headers)
END = 1  # position after the record's last byte
OFFSET_DELTA = 2
TS_DELTA = 3
KEY_POS = 4
KEY_LEN = 5  # -1: null key
VALUE_LEN = 6  # -1: null value (a tombstone)
COLUMNS = 7

_INT32_MIN = -(2**31)
_INT32_MAX = 2**31 - 1
# a timestamp delta the kernel leaves to the pure encoder (Python integers do not overflow)
_TS_LIMIT = 2**61


@kernel(inline="always")
def _varint(buf: np.ndarray, pos: int, end: int, max_bytes: int) -> tuple[int, int, bool]:
    """A zig-zag varint at ``pos``: ``(value, next position, minimal)``; next position -1
    when it runs past ``end`` or beyond ``max_bytes`` bytes."""
    raw = np.uint64(0)
    shift = np.uint64(0)
    count = 0
    last = 0
    while True:
        if pos >= end or count == max_bytes:
            return 0, -1, False
        last = buf[pos]
        pos += 1
        count += 1
        raw |= np.uint64(last & 0x7F) << shift
        if last < 0x80:
            break
        shift += np.uint64(7)
    value = np.int64(raw >> np.uint64(1)) ^ -np.int64(raw & np.uint64(1))
    return int(value), pos, count == 1 or last != 0


@kernel(inline="always")
def _field(buf: np.ndarray, pos: int, end: int, nullable: bool) -> tuple[int, int, bool]:
    """A length-prefixed field at ``pos`` (a key, value, header name or header value):
    ``(length, position after it, minimal varint)``; position -1 when it is malformed (a
    length below -1, or -1 where null is not allowed, or bytes past ``end``)."""
    length, pos, minimal = _varint(buf, pos, end, 5)
    if pos < 0 or length < (-1 if nullable else 0) or pos + max(length, 0) > end:
        return 0, -1, False
    return length, pos + max(length, 0), minimal


@kernel
def parse_layout(buf: np.ndarray, start: int, end: int, count: int, last_delta: int,
                 layout: np.ndarray) -> int:
    """Fill ``layout[:count]`` with the rows of the ``count`` records in ``buf[start:end]``,
    a batch whose header says ``lastOffsetDelta`` = ``last_delta``.

    Returns:
        :data:`OK`, or the bits :data:`MALFORMED` (the rows are incomplete),
        :data:`NOT_CANONICAL`, :data:`ODD_OFFSETS`.
    """
    status = OK
    pos = start
    previous_delta = -1
    for i in range(count):
        length, pos, minimal = _varint(buf, pos, end, 5)
        if pos < 0 or length < 0 or pos + length > end:
            return MALFORMED
        if not minimal:
            status |= NOT_CANONICAL
        record_end = pos + length
        if pos >= record_end:
            return MALFORMED
        if buf[pos] != 0:
            status |= NOT_CANONICAL
        pos += 1
        ts_delta, pos, minimal = _varint(buf, pos, record_end, 10)
        if pos < 0:
            return MALFORMED
        if not minimal or ts_delta > _TS_LIMIT or ts_delta < -_TS_LIMIT:
            status |= NOT_CANONICAL
        layout[i, REST] = pos
        offset_delta, pos, minimal = _varint(buf, pos, record_end, 5)
        if pos < 0:
            return MALFORMED
        if not minimal or offset_delta < _INT32_MIN or offset_delta > _INT32_MAX:
            status |= NOT_CANONICAL
        if offset_delta <= previous_delta or offset_delta > last_delta:
            status |= ODD_OFFSETS
        previous_delta = offset_delta
        key_len, after, minimal = _field(buf, pos, record_end, True)
        if after < 0:
            return MALFORMED
        layout[i, KEY_POS] = after - max(key_len, 0)
        value_len, pos, minimal_value = _field(buf, after, record_end, True)
        if pos < 0:
            return MALFORMED
        if not (minimal and minimal_value):
            status |= NOT_CANONICAL
        headers, pos, minimal = _varint(buf, pos, record_end, 5)
        if pos < 0 or headers < 0:
            return MALFORMED
        if not minimal:
            status |= NOT_CANONICAL
        for _ in range(headers):
            name_len, after, minimal = _field(buf, pos, record_end, False)
            if after < 0:
                return MALFORMED
            for j in range(after - name_len, after):
                if buf[j] >= 0x80:
                    status |= NOT_CANONICAL  # the pure path decodes and re-encodes UTF-8
            _, pos, minimal_value = _field(buf, after, record_end, True)
            if pos < 0:
                return MALFORMED
            if not (minimal and minimal_value):
                status |= NOT_CANONICAL
        if pos != record_end:
            return MALFORMED
        layout[i, END] = pos
        layout[i, OFFSET_DELTA] = offset_delta
        layout[i, TS_DELTA] = ts_delta
        layout[i, KEY_LEN] = key_len
        layout[i, VALUE_LEN] = value_len
    if pos != end:
        return MALFORMED
    return status


@kernel(inline="always")
def _put_varint(out: np.ndarray, pos: int, value: int) -> int:
    raw = np.uint64((value << 1) ^ (value >> 63))
    while raw >= np.uint64(0x80):
        out[pos] = np.uint8((raw & np.uint64(0x7F)) | np.uint64(0x80))
        raw >>= np.uint64(7)
        pos += 1
    out[pos] = np.uint8(raw)
    return pos + 1


@kernel(inline="always")
def _varint_size(value: int) -> int:
    raw = np.uint64((value << 1) ^ (value >> 63))
    size = 1
    while raw >= np.uint64(0x80):
        raw >>= np.uint64(7)
        size += 1
    return size


@kernel
def rebuild_records(buf: np.ndarray, layout: np.ndarray, count: int, keep: np.ndarray,
                    source_base_ts: int, fixed: bool, fixed_ts: int, new_base_ts: int,
                    out: np.ndarray) -> int:
    """Write the records ``i`` with ``keep[i] == 0`` of a parsed section into ``out`` with
    timestamp deltas against ``new_base_ts``; returns the bytes written (``out`` holds at
    least ``len(section) + 15 * count`` bytes: a length and a timestamp delta can grow).

    Args:
        fixed: every record's timestamp is ``fixed_ts`` (LogAppendTime: the batch's max
            timestamp, as the readers report it), else ``source_base_ts + delta``.
    """
    pos = 0
    for i in range(count):
        if keep[i] != 0:
            continue
        timestamp = fixed_ts if fixed else source_base_ts + layout[i, TS_DELTA]
        delta = timestamp - new_base_ts
        rest = layout[i, REST]
        rest_len = layout[i, END] - rest
        pos = _put_varint(out, pos, 1 + _varint_size(delta) + rest_len)
        out[pos] = 0
        pos = _put_varint(out, pos + 1, delta)
        out[pos:pos + rest_len] = buf[rest:rest + rest_len]
        pos += rest_len
    return pos
