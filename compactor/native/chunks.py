"""The native writer's chunk kernels: a 16 MB chunk of v2 batches in one call per pass.
:func:`frame_chunk` frames it and checks its headers, :func:`decide_chunk` decides every record
newest first (with :func:`compactor.native.keytable.decide_records`), :func:`filter_chunk`
writes every output batch (verbatim copies, rebuilt batches, empty headers) by the
batch-rebuild rules of :mod:`compactor.cleaner.policy`, compiled here; the key scan of the
distributed offset map (:func:`scan_chunk_keys`, :func:`segment_keys`) and the bulk header
reader (:func:`segment_headers`) work a chunk at a time too. The engine glue that calls them
is :mod:`compactor.native.fast`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

import crc32c
import numpy as np

from compactor.cleaner import policy
from compactor.cleaner.policy import (
    ABORTED,
    KEPT,
    MARKER_EXPIRED,
    NO_CONTROL_TYPE,
    BatchHeader,
    BatchRetention,
)
from compactor.cleaner.rewrite import Window
from compactor.cleaner.scan import batch_header
from compactor.codec.compression import CODEC_MASK, Codec, DecompressionError, decompress
from compactor.codec.records import (
    ATTR_CONTROL,
    ATTR_DELETE_HORIZON,
    ATTR_TIMESTAMP_TYPE,
    ATTR_TRANSACTIONAL,
    ATTRIBUTES_OFFSET,
    BASE_OFFSET_OFFSET,
    BASE_TIMESTAMP_OFFSET,
    CRC_OFFSET,
    CRC_START,
    LAST_OFFSET_DELTA_OFFSET,
    LENGTH_OFFSET,
    LOG_OVERHEAD,
    MAGIC_OFFSET,
    MAX_TIMESTAMP_OFFSET,
    PARTITION_LEADER_EPOCH_OFFSET,
    PRODUCER_EPOCH_OFFSET,
    PRODUCER_ID_OFFSET,
    RECORDS_COUNT_OFFSET,
    RECORDS_OFFSET,
)
from compactor.codec.segment import chunk_ranges, iter_batches
from compactor.native import kernels
from compactor.native.cache import kernel
from compactor.native.keytable import _map_entry_offset, decide_records
from compactor.native.xxh3 import xxh3_128

# the batch-rebuild rules, written once there too
_needs_delete_horizon = kernel(inline="always")(policy.needs_delete_horizon)
_emptied_batch = kernel(inline="always")(policy.emptied_batch)
_copied_verbatim = kernel(inline="always")(policy.copied_verbatim)


# how often each path ran in this process, by "groups_native", "groups_fallback",
# "batches_rebuilt" (re-encoded by the kernels), "batches_pure" (filtered by the pure path),
# "chunks_native" (decided in one call), "chunks_filtered" (filtered in one call) and
# "batches_scanned" (keys read by the kernels): the tests check the native path really ran
STATS: Counter[str] = Counter()


@kernel
def _retained_figures(layout: np.ndarray, count: int, reasons: np.ndarray, source_base_ts: int,
                      fixed: bool, fixed_ts: int) -> tuple[int, int, int]:
    """``(retained tombstones, first retained timestamp, max retained timestamp)``."""
    retained = tombstones = 0
    first_ts = max_ts = 0
    for i in range(count):
        if reasons[i] != KEPT:
            continue
        ts = fixed_ts if fixed else source_base_ts + layout[i, kernels.TS_DELTA]
        if retained == 0:
            first_ts = max_ts = ts
        elif ts > max_ts:
            max_ts = ts
        retained += 1
        if layout[i, kernels.VALUE_LEN] < 0:
            tombstones += 1
    return tombstones, first_ts, max_ts


# the columns of a framed batch (frame_chunk)
F_POS, F_SIZE, F_BASE, F_ATTRS, F_LAST_DELTA, F_COUNT, F_CRC = range(7)
F_COLUMNS = 7
# per batch of a decided chunk (decide_chunk)
D_FIRST, D_DROPPED, D_TOMBSTONES, D_STATUS = range(4)
# per batch decision flags (decide_chunk)
DISCARD, ABORTED_BATCH, RETAIN_DELETES = 1, 2, 4


@kernel(inline="always")
def _be(buf: np.ndarray, pos: int, size: int) -> int:
    """A big-endian signed integer of ``size`` bytes."""
    value = 0
    for i in range(size):
        value = (value << 8) | int(buf[pos + i])
    if value >= 1 << (8 * size - 1) and size < 8:
        value -= 1 << (8 * size)
    return value


@kernel(inline="always")
def _frame_at(buf: np.ndarray, pos: int, end: int, codecs: bool, frames: np.ndarray,
              n: int) -> int:
    """Frame the batch at ``pos`` into ``frames[n]``: its size, or 0 when it is not a v2
    batch with a sound header (uncompressed unless ``codecs``) ending by ``end``."""
    if pos + RECORDS_OFFSET > end:
        return 0
    size = LOG_OVERHEAD + _be(buf, pos + LENGTH_OFFSET, 4)
    if size < RECORDS_OFFSET or pos + size > end or buf[pos + MAGIC_OFFSET] != 2:
        return 0
    attributes = _be(buf, pos + ATTRIBUTES_OFFSET, 2)
    last_delta = _be(buf, pos + LAST_OFFSET_DELTA_OFFSET, 4)
    count = _be(buf, pos + RECORDS_COUNT_OFFSET, 4)
    if ((attributes & CODEC_MASK and not codecs) or last_delta < 0 or count < 0
            or (count == 0 and size != RECORDS_OFFSET)):
        return 0
    frames[n, F_POS] = pos
    frames[n, F_SIZE] = size
    frames[n, F_BASE] = _be(buf, pos + BASE_OFFSET_OFFSET, 8)
    frames[n, F_ATTRS] = attributes
    frames[n, F_LAST_DELTA] = last_delta
    frames[n, F_COUNT] = count
    frames[n, F_CRC] = _be(buf, pos + CRC_OFFSET, 4) & 0xFFFFFFFF
    return size


@kernel
def frame_chunk(buf: np.ndarray, codecs: bool) -> np.ndarray:
    """The frames of a chunk that holds only v2 batches with sound headers
    (``segment._decode_v2_header``'s checks but the CRC and the codec's id), uncompressed
    unless ``codecs``, one row of ``F_COLUMNS`` each; an empty array when anything else is
    there (the caller decodes the chunk the general way, which raises the located error where
    there is one)."""
    end = buf.shape[0]
    frames = np.empty((end // RECORDS_OFFSET + 1, F_COLUMNS), np.int64)
    n = 0
    pos = 0
    while pos < end:
        size = _frame_at(buf, pos, end, codecs, frames, n)
        if size == 0:
            return frames[:0]
        n += 1
        pos += size
    return frames[:n]


# the header fields of a framed batch beside its frame (frame_headers)
H_PRODUCER_ID, H_PRODUCER_EPOCH, H_BASE_TS, H_MAX_TS = range(4)


@kernel
def frame_headers(buf: np.ndarray, start: int, frames: np.ndarray, fields: np.ndarray
                  ) -> tuple[int, int]:
    """:func:`frame_chunk` (codecs allowed) of a segment from byte ``start``, at most
    ``frames.shape[0]`` batches, with their producer id and epoch and timestamps in ``fields``:
    ``(batches framed, where the next one starts)``, or ``(-1, where framing stopped)`` at
    anything it refuses."""
    end = buf.shape[0]
    pos = start
    n = 0
    while pos < end and n < frames.shape[0]:
        size = _frame_at(buf, pos, end, True, frames, n)
        if size == 0:
            return -1, pos
        fields[n, H_PRODUCER_ID] = _be(buf, pos + PRODUCER_ID_OFFSET, 8)
        fields[n, H_PRODUCER_EPOCH] = _be(buf, pos + PRODUCER_EPOCH_OFFSET, 2)
        fields[n, H_BASE_TS] = _be(buf, pos + BASE_TIMESTAMP_OFFSET, 8)
        fields[n, H_MAX_TS] = _be(buf, pos + MAX_TIMESTAMP_OFFSET, 8)
        n += 1
        pos += size
    return n, pos


@kernel
def decide_chunk(buf: np.ndarray, frames: np.ndarray, flags: np.ndarray, first_dirty: int,
                 superseded: np.ndarray, within: np.ndarray, tabled: bool,
                 table: np.ndarray, arena: np.ndarray,
                 used: np.ndarray, tally: np.ndarray, reasons: np.ndarray, out: np.ndarray,
                 scratch: np.ndarray) -> tuple[int, np.ndarray, np.ndarray, np.ndarray]:
    """:meth:`NativeRewrite.decide_batch` for every batch of a framed chunk, newest first, in one
    call: ``reasons`` holds every record's (batch after batch in file order), ``out`` per batch
    its first record's index there, drops, retained tombstones and parse status.

    Returns:
        ``(status, table, arena, scratch)``: status :data:`kernels.OK`, or
        :data:`kernels.MALFORMED` / :data:`COLLISION` (the group must fall back).
    """
    n = frames.shape[0]
    first = 0
    for i in range(n):
        out[i, D_FIRST] = first
        first += frames[i, F_COUNT]
    for i in range(n - 1, -1, -1):
        pos = frames[i, F_POS]
        count = frames[i, F_COUNT]
        base_offset = frames[i, F_BASE]
        if count > scratch.shape[0]:
            scratch = np.empty((count, kernels.COLUMNS), np.int64)
        status = kernels.parse_layout(buf, pos + RECORDS_OFFSET, pos + frames[i, F_SIZE], count,
                                      frames[i, F_LAST_DELTA], scratch)
        if status & (kernels.MALFORMED | kernels.ODD_OFFSETS):
            return kernels.MALFORMED, table, arena, scratch
        out[i, D_STATUS] = status
        at = out[i, D_FIRST]
        mine = reasons[at:at + count]
        control = (frames[i, F_ATTRS] & ATTR_CONTROL) != 0
        if flags[i] & DISCARD:
            code = MARKER_EXPIRED if control else ABORTED
            mine[:] = code
            tally[code] += count
            out[i, D_DROPPED] = count
            out[i, D_TOMBSTONES] = -1
            continue
        if control:
            out[i, D_DROPPED] = 0
            out[i, D_TOMBSTONES] = -1
            continue
        entry = _map_entry_offset((flags[i] & ABORTED_BATCH) != 0, first_dirty)
        decided, dropped, tombstones, table, arena = decide_records(
            buf, scratch, count, base_offset, entry, not flags[i] & RETAIN_DELETES, superseded,
            within, tabled, table, arena, used, mine, tally)
        if decided != kernels.OK:
            return decided, table, arena, scratch
        out[i, D_DROPPED] = dropped
        out[i, D_TOMBSTONES] = tombstones
    return kernels.OK, table, arena, scratch


# per batch of a chunk to filter (filter_chunk): the backward pass's figures and the decision
C_FIRST, C_DROPPED, C_TOMBSTONES, C_RETENTION, C_MARKER_HORIZON = range(5)
# per output batch of filter_chunk: where it is in the output, its size, and the source batch
# it came from (-1 - index when copied verbatim: its CRC stands)
O_POS, O_SIZE, O_SOURCE = range(3)
NEEDS_BATCHES = 16  # a status of filter_chunk: the chunk needs the batch-by-batch walk
_DELETE = int(BatchRetention.DELETE)


@kernel(inline="always")
def _put_be(out: np.ndarray, pos: int, value: int, size: int) -> None:
    for i in range(size - 1, -1, -1):
        out[pos + i] = value & 0xFF
        value >>= 8


@kernel(inline="always")
def _header(out: np.ndarray, at: int, buf: np.ndarray, src: int, body: int, attributes: int,
            base_ts: int, max_ts: int, count: int) -> None:
    """A v2 header at ``out[at]`` for ``body`` bytes of records, the source batch's base
    offset, leader epoch, ``lastOffsetDelta`` and producer fields, CRC left 0."""
    out[at:at + LENGTH_OFFSET] = buf[src:src + LENGTH_OFFSET]  # the base offset
    _put_be(out, at + LENGTH_OFFSET, RECORDS_OFFSET - LOG_OVERHEAD + body, 4)
    out[at + PARTITION_LEADER_EPOCH_OFFSET:at + MAGIC_OFFSET] = \
        buf[src + PARTITION_LEADER_EPOCH_OFFSET:src + MAGIC_OFFSET]
    out[at + MAGIC_OFFSET] = 2
    _put_be(out, at + CRC_OFFSET, 0, 4)
    _put_be(out, at + ATTRIBUTES_OFFSET, attributes, 2)
    out[at + LAST_OFFSET_DELTA_OFFSET:at + BASE_TIMESTAMP_OFFSET] = \
        buf[src + LAST_OFFSET_DELTA_OFFSET:src + BASE_TIMESTAMP_OFFSET]
    _put_be(out, at + BASE_TIMESTAMP_OFFSET, base_ts, 8)
    _put_be(out, at + MAX_TIMESTAMP_OFFSET, max_ts, 8)
    # producer id, producer epoch and base sequence
    out[at + PRODUCER_ID_OFFSET:at + RECORDS_COUNT_OFFSET] = \
        buf[src + PRODUCER_ID_OFFSET:src + RECORDS_COUNT_OFFSET]
    _put_be(out, at + RECORDS_COUNT_OFFSET, count, 4)


@kernel(inline="always")
def _emit(outs: np.ndarray, n_out: int, pos: int, size: int, source: int) -> int:
    outs[n_out, O_POS] = pos
    outs[n_out, O_SIZE] = size
    outs[n_out, O_SOURCE] = source
    return n_out + 1


@kernel
def filter_chunk(buf: np.ndarray, frames: np.ndarray, reasons: np.ndarray, dec: np.ndarray,
                 horizon_if_set: int, out: np.ndarray, outs: np.ndarray,
                 scratch: np.ndarray) -> tuple[int, int, np.ndarray]:
    """:func:`filter_fast` for every batch of a framed chunk of uncompressed v2 batches (data
    and control) in one call: the output batches one after the other in ``out`` (CRCs left 0 for the
    caller), one row of ``outs`` each.

    Returns:
        ``(status, output batches, scratch)``: status :data:`kernels.OK`, or
        :data:`NEEDS_BATCHES` (a record the pure encoder would write differently, a timestamp
        out of the kernels' range: nothing of ``out`` counts).
    """
    n_out = 0
    pos = 0
    for i in range(frames.shape[0]):
        retention = dec[i, C_RETENTION]
        if retention == _DELETE:
            continue
        src = frames[i, F_POS]
        size = frames[i, F_SIZE]
        count = frames[i, F_COUNT]
        attrs = frames[i, F_ATTRS]
        control = (attrs & ATTR_CONTROL) != 0
        retained = count - dec[i, C_DROPPED]
        max_ts_source = _be(buf, src + MAX_TIMESTAMP_OFFSET, 8)
        base_ts_source = _be(buf, src + BASE_TIMESTAMP_OFFSET, 8)
        has_horizon = (attrs & ATTR_DELETE_HORIZON) != 0
        keep_attrs = attrs & (ATTR_TIMESTAMP_TYPE | ATTR_TRANSACTIONAL | ATTR_CONTROL)
        if retained == 0:
            emptied = _emptied_batch(retention, count)
            if emptied == policy.EMPTIED_DROPPED:
                continue
            if emptied == policy.EMPTIED_VERBATIM:
                out[pos:pos + size] = buf[src:src + size]
                n_out = _emit(outs, n_out, pos, size, -1 - i)
            else:  # empty_batch_like
                _header(out, pos, buf, src, 0, keep_attrs, -1, max_ts_source, 0)
                size = RECORDS_OFFSET
                n_out = _emit(outs, n_out, pos, size, i)
            pos += size
            continue
        needs_horizon = _needs_delete_horizon(has_horizon, dec[i, C_MARKER_HORIZON] != 0,
                                              control, dec[i, C_TOMBSTONES])
        if _copied_verbatim(retained, count, needs_horizon):
            out[pos:pos + size] = buf[src:src + size]
            n_out = _emit(outs, n_out, pos, size, -1 - i)
            pos += size
            continue
        if count > scratch.shape[0]:
            scratch = np.empty((count, kernels.COLUMNS), np.int64)
        status = kernels.parse_layout(buf, src + RECORDS_OFFSET, src + size, count,
                                      frames[i, F_LAST_DELTA], scratch)
        if status != kernels.OK:
            return NEEDS_BATCHES, 0, scratch
        if abs(base_ts_source) >= _TS_SAFE or abs(max_ts_source) >= _TS_SAFE:
            return NEEDS_BATCHES, 0, scratch
        fixed = (attrs & ATTR_TIMESTAMP_TYPE) != 0
        at = dec[i, C_FIRST]
        keep = reasons[at:at + count]
        _, first_ts, max_ts = _retained_figures(scratch, count, keep, base_ts_source, fixed,
                                                   max_ts_source)
        if needs_horizon:
            horizon = horizon_if_set
            has_horizon = True
        else:
            horizon = base_ts_source
        new_base_ts = horizon if has_horizon else first_ts
        if abs(new_base_ts) >= _TS_SAFE:
            return NEEDS_BATCHES, 0, scratch
        body = kernels.rebuild_records(buf, scratch, count, keep, base_ts_source, fixed,
                                       max_ts_source, new_base_ts, out[pos + RECORDS_OFFSET:])
        new_attrs = keep_attrs | (ATTR_DELETE_HORIZON if has_horizon else 0)
        _header(out, pos, buf, src, body, new_attrs, new_base_ts,
                max_ts_source if fixed else max_ts, retained)
        n_out = _emit(outs, n_out, pos, RECORDS_OFFSET + body, i)
        pos += RECORDS_OFFSET + body
    return kernels.OK, n_out, scratch


_TS_SAFE = 2**61  # timestamps beyond this go to the pure encoder (no int64 overflow here)


@kernel
def _keyed_rows(layout: np.ndarray, count: int, base_offset: int
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(offsets, key positions, key lengths)`` of the keyed records of a parsed section."""
    offsets = np.empty(count, np.int64)
    positions = np.empty(count, np.int64)
    lengths = np.empty(count, np.int64)
    n = 0
    for i in range(count):
        if layout[i, kernels.KEY_LEN] >= 0:
            offsets[n] = base_offset + layout[i, kernels.OFFSET_DELTA]
            positions[n] = layout[i, kernels.KEY_POS]
            lengths[n] = layout[i, kernels.KEY_LEN]
            n += 1
    return offsets[:n], positions[:n], lengths[:n]


@kernel
def scan_chunk_keys(buf: np.ndarray, positions: np.ndarray, scratch: np.ndarray
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray,
                               np.ndarray]:
    """The keyed records of the plain uncompressed v2 data batches that start at
    ``positions`` (ascending) of a chunk, in file order: their offsets, the two signed halves
    of their keys' XXH3-128 digests (:func:`compactor.cleaner.scan.key_digest`, computed here
    on the chunk's bytes) and the index in ``positions`` of their batch. The indices of the
    batches it leaves (another format, a codec, a control batch, a header that does not fit
    the chunk, records the layout parse does not vouch for) come back apart, for the
    batch-by-batch reader.

    Returns:
        ``(offsets, key_hi, key_lo, batch_index, left, scratch)``.
    """
    end = buf.shape[0]
    cap = 1024
    offsets = np.empty(cap, np.int64)
    key_hi = np.empty(cap, np.int64)
    key_lo = np.empty(cap, np.int64)
    which = np.empty(cap, np.int64)
    left = np.empty(positions.shape[0], np.int64)
    n = 0
    n_left = 0
    for j in range(positions.shape[0]):
        pos = positions[j]
        if pos < 0 or pos + RECORDS_OFFSET > end:
            left[n_left] = j
            n_left += 1
            continue
        size = LOG_OVERHEAD + _be(buf, pos + LENGTH_OFFSET, 4)
        attributes = _be(buf, pos + ATTRIBUTES_OFFSET, 2)
        count = _be(buf, pos + RECORDS_COUNT_OFFSET, 4)
        if (size < RECORDS_OFFSET or pos + size > end or buf[pos + MAGIC_OFFSET] != 2
                or attributes & (CODEC_MASK | ATTR_CONTROL)
                or count < 0):
            left[n_left] = j
            n_left += 1
            continue
        if count > scratch.shape[0]:
            scratch = np.empty((count, kernels.COLUMNS), np.int64)
        if kernels.parse_layout(buf, pos + RECORDS_OFFSET, pos + size, count, _be(buf,
                pos + LAST_OFFSET_DELTA_OFFSET, 4),
                                scratch) != kernels.OK:
            left[n_left] = j
            n_left += 1
            continue
        if n + count > cap:
            cap = max(2 * cap, n + count)
            offsets = _grown(offsets, n, cap)
            key_hi = _grown(key_hi, n, cap)
            key_lo = _grown(key_lo, n, cap)
            which = _grown(which, n, cap)
        base_offset = _be(buf, pos + BASE_OFFSET_OFFSET, 8)
        for i in range(count):
            length = scratch[i, kernels.KEY_LEN]
            if length < 0:
                continue
            lo, hi = xxh3_128(buf, scratch[i, kernels.KEY_POS], length)
            offsets[n] = base_offset + scratch[i, kernels.OFFSET_DELTA]
            key_hi[n] = np.int64(hi)
            key_lo[n] = np.int64(lo)
            which[n] = j
            n += 1
    return offsets[:n], key_hi[:n], key_lo[:n], which[:n], left[:n_left], scratch


@kernel(inline="always")
def _grown(values: np.ndarray, n: int, cap: int) -> np.ndarray:
    out = np.empty(cap, values.dtype)
    out[:n] = values[:n]
    return out


def segment_keys(data: bytes, positions: Sequence[int], chunk_bytes: int, window: Window
                 ) -> tuple[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray], list[int]]:
    """:func:`scan_chunk_keys` over a segment, ``chunk_bytes`` at a time (cut between the
    listed batches, each chunk taken by ``window``: a view of a mapped segment's pages, a
    ranged read of an object), the compressed data batches it leaves decompressed and read
    by the same kernel (:func:`_compressed_keys`): the keyed records of the batches at
    ``positions`` (ascending) that the kernels read, as ``(offsets, key_hi, key_lo, batch
    index into positions)`` in offset order, and the positions they left."""
    parts = []
    # a position outside the segment is no chunk's: the batch-by-batch reader reports it
    left: list[int] = [p for p in positions if not 0 <= p < len(data)]
    scratch = np.empty((1024, kernels.COLUMNS), np.int64)
    wanted = np.asarray(positions, np.int64)
    for start, end in chunk_ranges(positions, len(data), chunk_bytes):
        lo_j, hi_j = np.searchsorted(wanted, (start, end))
        if lo_j == hi_j:
            continue
        buf = np.frombuffer(window(data, start, end), np.uint8)
        offsets, key_hi, key_lo, which, rest, scratch = scan_chunk_keys(
            buf, wanted[lo_j:hi_j] - start, scratch)
        parts.append((offsets, key_hi, key_lo, which + lo_j))
        if len(rest):
            expanded = _compressed_keys(buf, wanted[lo_j:hi_j][rest] - start, scratch)
            if expanded is not None:
                (offsets, key_hi, key_lo, read), unread, scratch = expanded
                parts.append((offsets, key_hi, key_lo, rest[read] + lo_j))
                rest = rest[unread]
        left += (wanted[lo_j:hi_j][rest]).tolist()
        STATS["batches_scanned"] += int(hi_j - lo_j) - len(rest)
    if not parts:
        empty = np.zeros(0, np.int64)
        return (empty, empty, empty, empty), left
    offsets, key_hi, key_lo, which = (np.concatenate([p[k] for p in parts]) for k in range(4))
    if len(offsets) > 1 and np.any(offsets[1:] < offsets[:-1]):
        # a chunk's compressed batches were read after its plain ones
        order = np.argsort(offsets, kind="stable")
        offsets, key_hi, key_lo, which = offsets[order], key_hi[order], key_lo[order], which[order]
    return (offsets, key_hi, key_lo, which), left


def _compressed_keys(buf: np.ndarray, at: np.ndarray, scratch: np.ndarray
                     ) -> tuple[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray],
                                np.ndarray, np.ndarray] | None:
    """The keyed records of the compressed v2 data batches among those at ``at`` in a chunk
    (what :func:`scan_chunk_keys` left there): each one's records decompressed behind a copy
    of its header that says so (its length the new one, no codec), and the copies read by
    :func:`scan_chunk_keys` in one call, as the writer reads a chunk's compressed batches
    (:class:`compactor.native.fast.Expanded`), where the key scan of the distributed offset
    map read them one by one in Python (a ``bytes`` object and a digest call a key).

    Returns ``((offsets, key_hi, key_lo, index into at), indices into at it left, scratch)``,
    or ``None`` when none is such a batch; a batch it cannot vouch for (another format, a
    control batch, no records, a codec's error, records the layout parse refuses) is left to
    the batch-by-batch reader, which reports what is wrong."""
    view = buf.data
    end = buf.shape[0]
    pieces: list[bytes | bytearray] = []
    starts: list[int] = []
    taken: list[int] = []
    size_out = 0
    for k, pos in enumerate(at.tolist()):
        if pos < 0 or pos + RECORDS_OFFSET > end or buf[pos + MAGIC_OFFSET] != 2:
            continue
        header = bytearray(view[pos:pos + RECORDS_OFFSET])
        size = LOG_OVERHEAD + int.from_bytes(header[LENGTH_OFFSET:LENGTH_OFFSET + 4], "big")
        attributes = int.from_bytes(header[ATTRIBUTES_OFFSET:ATTRIBUTES_OFFSET + 2], "big")
        count = int.from_bytes(header[RECORDS_COUNT_OFFSET:RECORDS_COUNT_OFFSET + 4], "big",
                               signed=True)
        codec = attributes & CODEC_MASK
        if (not codec or codec > _LAST_CODEC or attributes & ATTR_CONTROL or count <= 0
                or size < RECORDS_OFFSET or pos + size > end):
            continue
        try:
            body = decompress(codec, view[pos + RECORDS_OFFSET:pos + size])
        except DecompressionError:
            continue
        header[LENGTH_OFFSET:LENGTH_OFFSET + 4] = (
            RECORDS_OFFSET - LOG_OVERHEAD + len(body)).to_bytes(4, "big")
        header[ATTRIBUTES_OFFSET:ATTRIBUTES_OFFSET + 2] = (
            attributes & ~CODEC_MASK).to_bytes(2, "big")
        pieces += (header, body)
        starts.append(size_out)
        taken.append(k)
        size_out += RECORDS_OFFSET + len(body)
    if not taken:
        return None
    offsets, key_hi, key_lo, which, rest, scratch = scan_chunk_keys(
        np.frombuffer(b"".join(pieces), np.uint8), np.asarray(starts, np.int64), scratch)
    index = np.asarray(taken, np.int64)
    unread = np.ones(len(at), dtype=bool)
    unread[index] = False
    unread[index[rest]] = True
    return (offsets, key_hi, key_lo, index[which]), np.flatnonzero(unread), scratch


_HEADER_ROWS = 1 << 16  # batches framed per frame_headers call (memory flat in the segment)


def segment_headers(data: Any, path: str, segment_base: int) -> list[BatchHeader] | None:
    """:func:`compactor.cleaner.scan.segment_headers` with the framing in a kernel and the
    CRCs through ``crc32c``: the same headers, or ``None`` when the segment holds anything
    but v2 batches with sound headers, known codecs and matching CRCs, or is not a buffer
    (an object store's ranged reader): the pure scan then reads it and raises the located
    error where there is one. A control batch's type is read from its record by the pure
    decoder."""
    try:
        buf = np.frombuffer(data, np.uint8)
    except (TypeError, ValueError):
        return None
    view = memoryview(data)
    frames = np.empty((_HEADER_ROWS, F_COLUMNS), np.int64)
    fields = np.empty((_HEADER_ROWS, 4), np.int64)
    headers: list[BatchHeader] = []
    pos = 0
    while pos < buf.shape[0]:
        n, pos = frame_headers(buf, pos, frames, fields)
        if n < 0:
            return None
        rows = frames[:n]
        if ((rows[:, F_ATTRS] & CODEC_MASK) > _LAST_CODEC).any():
            return None
        for at, size, crc in zip(rows[:, F_POS].tolist(), rows[:, F_SIZE].tolist(),
                                 rows[:, F_CRC].tolist()):
            if crc32c.crc32c(view[at + CRC_START:at + size]) != crc:
                return None
        for (at, size, base, attrs, last_delta, count, _), (pid, epoch, base_ts, max_ts) in zip(
                rows.tolist(), fields[:n].tolist()):
            if attrs & ATTR_CONTROL:  # its control type is in its record
                (batch,) = iter_batches(data, path=path, start_position=at,
                                        end_position=at + size, verify_crc=False)
                headers.append(batch_header(batch, segment_base))
                continue
            # by position, in BatchHeader's field order (half the cost of keywords; the fast
            # path's property tests hold these headers equal to the reference's)
            headers.append(BatchHeader(
                segment_base, at, size, base, base + last_delta, 2, False,
                bool(attrs & ATTR_TRANSACTIONAL), NO_CONTROL_TYPE, pid, epoch, max_ts,
                base_ts if attrs & ATTR_DELETE_HORIZON else -1, count))
    STATS["segments_framed"] += 1
    return headers


_LAST_CODEC = max(int(c) for c in Codec)
