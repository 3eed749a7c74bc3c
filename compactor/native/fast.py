"""The writer's native path: the same decisions and the same bytes as
:func:`compactor.cleaner.rebatch.iter_drops` and :func:`compactor.cleaner.rebatch.filter_batch`,
with the per-record work in numba kernels (:mod:`compactor.native.kernels`) instead of a Python
object per record.

Two grains. A 16 MB chunk of v2 batches (data and control, any codec) goes through each pass
in one native call: :meth:`NativeRewrite.decide_chunk` frames it, checks its headers (and,
through ``crc32c``, its CRCs), decompresses its compressed batches once (:class:`Expanded`),
parses and decides every record newest first; :func:`filter_chunk_batches` writes every output
batch of it (verbatim copies, rebuilt batches with their new headers, compressed again with
their codec, empty headers). Anything else (a legacy entry, a header the checks refuse) is
walked batch by batch: :meth:`NativeRewrite.decide_batch` and :func:`filter_fast`.

Whatever the kernels cannot vouch for goes to the pure path, which stays the reference
(``tests/property/test_fast_path.py`` compares the two byte for byte): a group holding a v0/v1
entry, a record the kernel finds malformed, offset deltas that do not strictly increase, or
two different keys with the same 64-bit hash make the whole group
:class:`compactor.cleaner.rewrite.Fallback` (raised
before anything is written); a batch whose records the pure encoder would write differently
(:data:`compactor.native.kernels.NOT_CANONICAL`) is filtered by the pure path, and so is a
control batch outside a plain chunk.

Keys are compared byte for byte: the group's key table (open addressing) holds a 64-bit hash
of each key (FNV-1a, murmur3's finalizer) with the key's bytes, in its slot when the key is
short, else in an arena the slot points at, and a hash hit is confirmed by comparing them, so
a record is dropped as superseded only when a later record has exactly its key
(``Cleaner.shouldRetainRecord``; within a group no digest is trusted).
"""

from __future__ import annotations

import struct
import threading
from collections import Counter
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import crc32c
import numpy as np

from compactor.cleaner import policy
from compactor.cleaner.policy import (
    ABORTED,
    FROM_MAP,
    KEPT,
    LOCAL,
    MARKER_EXPIRED,
    NO_CONTROL_TYPE,
    REASON_NAMES,
    BatchDecision,
    BatchHeader,
    BatchRetention,
)
from compactor.cleaner.rebatch import FilteredBatch, filter_batch
from compactor.cleaner.rewrite import (
    DigestProbe,
    Fallback,
    Filtered,
    GroupRewrite,
    KeyColumns,
    SubjectDigests,
    Window,
)
from compactor.cleaner.scan import batch_header
from compactor.codec.compression import (
    CODEC_MASK,
    Codec,
    DecompressionError,
    compress,
    decompress,
)
from compactor.codec.indexes import AbortedTxn
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
    RecordBatch,
    TimestampType,
    empty_batch_like,
    frame_rebuilt,
)
from compactor.codec.segment import chunk_ranges, iter_batches
from compactor.native import kernels
from compactor.native.cache import kernel
from compactor.native.xxh3 import xxh3_128

# the per-record rule, written once (compactor/cleaner/policy.py) and compiled here (the
# kernels' cache is keyed on policy.py too: compactor.native.cache)
_record_fate = kernel(inline="always")(policy.record_fate)
_map_entry_offset = kernel(inline="always")(policy.map_entry_offset)
# the batch-rebuild rules, written once there too
_needs_delete_horizon = kernel(inline="always")(policy.needs_delete_horizon)
_emptied_batch = kernel(inline="always")(policy.emptied_batch)
_copied_verbatim = kernel(inline="always")(policy.copied_verbatim)
COLLISION = 8  # a status of decide_records beside the kernels' own

_FNV_OFFSET = np.uint64(0xCBF29CE484222325)
_FNV_PRIME = np.uint64(0x100000001B3)


# how often each path ran in this process, by "groups_native", "groups_fallback",
# "batches_rebuilt" (re-encoded by the kernels), "batches_pure" (filtered by the pure path),
# "chunks_native" (decided in one call), "chunks_filtered" (filtered in one call) and
# "batches_scanned" (keys read by the kernels): the tests check the native path really ran
STATS: Counter[str] = Counter()


@kernel(inline="always")
def _hash(buf: np.ndarray, pos: int, length: int) -> int:
    """FNV-1a over the key's bytes, then murmur3's 64-bit finalizer (its low bits index the
    table)."""
    h = _FNV_OFFSET
    for i in range(pos, pos + length):
        h = (h ^ np.uint64(buf[i])) * _FNV_PRIME
    h ^= h >> np.uint64(33)
    h *= np.uint64(0xFF51AFD7ED558CCD)
    h ^= h >> np.uint64(33)
    h *= np.uint64(0xC4CEB9FE1A85EC53)
    h ^= h >> np.uint64(33)
    return int(np.int64(h))


_SLOT = 4  # int64 words a key table slot takes (_slot)
_INLINE = 16  # keys up to this many bytes live in their slot, longer ones in the arena


@kernel(inline="always")
def _words(buf: np.ndarray, pos: int, length: int) -> tuple[int, int]:
    """The first 16 bytes of a key, little-endian in two words (zeros past its end)."""
    lo = hi = np.uint64(0)
    for i in range(min(length, 8)):
        lo |= np.uint64(buf[pos + i]) << np.uint64(8 * i)
    for i in range(8, min(length, 16)):
        hi |= np.uint64(buf[pos + i]) << np.uint64(8 * (i - 8))
    return int(np.int64(lo)), int(np.int64(hi))


@kernel(inline="always")
def _same_key(table: np.ndarray, slot: int, arena: np.ndarray, buf: np.ndarray, pos: int,
              length: int) -> bool:
    """Whether the key in ``slot`` is exactly ``buf[pos:pos + length]``."""
    ref = table[_SLOT * slot + 1]
    if ref < 0:  # inline: the length, then the bytes in the slot's last two words
        if -ref - 1 != length:
            return False
        lo, hi = _words(buf, pos, length)
        return table[_SLOT * slot + 2] == lo and table[_SLOT * slot + 3] == hi
    at = ref - 1
    stored = (np.int64(arena[at]) | (np.int64(arena[at + 1]) << 8)
              | (np.int64(arena[at + 2]) << 16) | (np.int64(arena[at + 3]) << 24))
    if stored != length:
        return False
    for i in range(length):
        if arena[at + 4 + i] != buf[pos + i]:
            return False
    return True


@kernel(inline="always")
def _slot(table: np.ndarray, h: int) -> int:
    """The slot of hash ``h`` in the open-addressing table (linear probing): where it is, or
    the empty slot where it would go. Slot ``i`` is ``table[4i:4i + 4]``: the hash; then 0
    when empty, the key's arena position + 1 for a key longer than :data:`_INLINE` bytes, or
    -1 - its length for a shorter one, whose bytes are the last two words (:func:`_words`).
    A short key (most keys) is confirmed in the slot's own cache line, without a second miss
    in the arena."""
    mask = (table.shape[0] // _SLOT) - 1
    i = h & mask
    while table[_SLOT * i + 1] != 0 and table[_SLOT * i] != h:
        i = (i + 1) & mask
    return i


@kernel
def rehash(old: np.ndarray, new: np.ndarray) -> None:
    """Every key of table ``old`` into the empty, larger table ``new``."""
    for j in range(old.shape[0] // _SLOT):
        if old[_SLOT * j + 1] != 0:
            k = _slot(new, old[_SLOT * j])
            new[_SLOT * k:_SLOT * k + _SLOT] = old[_SLOT * j:_SLOT * j + _SLOT]


@kernel(inline="always")
def _at_or_below(offsets: np.ndarray, offset: int) -> int:
    """How many of the sorted ``offsets`` are at or below ``offset``: where a cursor walking
    down with a batch's records (:func:`_walk_down`) starts."""
    return int(np.searchsorted(offsets, offset, side="right"))


@kernel(inline="always")
def _walk_down(offsets: np.ndarray, below: int, offset: int) -> tuple[int, bool]:
    """The cursor ``below`` moved down to ``offset`` (records are walked newest first, their
    offsets strictly decreasing), and whether ``offset`` is one of ``offsets``."""
    while below > 0 and offsets[below - 1] > offset:
        below -= 1
    return below, below > 0 and offsets[below - 1] == offset


@kernel
def decide_records(buf: np.ndarray, layout: np.ndarray, count: int, base_offset: int,
                   entry: int, expire_tombstones: bool, superseded: np.ndarray,
                   within: np.ndarray, tabled: bool, table: np.ndarray,
                   arena: np.ndarray, used: np.ndarray, reasons: np.ndarray, tally: np.ndarray
                   ) -> tuple[int, int, int, np.ndarray, np.ndarray]:
    """The records of one data batch, newest first (``iter_drops``' loop): ``reasons[i]``
    for record ``i``, the reasons counted into ``tally``. A record a later one of its key in
    the group supersedes is found by key when ``tabled`` (keys that enter the offset map are
    added to the key table, :func:`_slot`, with their bytes in ``arena``; ``used`` = [arena
    bytes used, keys]; the table and the arena returned may be larger copies), else by its
    offset in ``within`` (sorted; the offset map's scan found them, and no key is read).

    Returns:
        ``(status, dropped, retained tombstones, table, arena)``: status :data:`kernels.OK`
        or :data:`COLLISION`.
    """
    dropped = tombstones = 0
    hashes = np.empty(count + 1, np.int64)
    mask = (table.shape[0] // _SLOT) - 1
    if tabled:
        # first every key's hash, touching its home slot: independent loads the processor
        # overlaps, so the decisions below find the table's lines in cache (one miss per
        # record, but many in flight at once instead of one after the other)
        touched = 0
        for i in range(count):
            key_len = layout[i, kernels.KEY_LEN]
            if key_len >= 0:
                h = _hash(buf, layout[i, kernels.KEY_POS], key_len)
                hashes[i] = h
                touched += table[_SLOT * (h & mask) + 1]
        hashes[count] = touched  # keeps the loads
    # the offsets at or below the record's, in each list: one binary search for the batch's
    # last offset, then a cursor walking down with the records (their offset deltas strictly
    # increase, or parse_layout said ODD_OFFSETS and the batch never got here)
    last = base_offset + layout[count - 1, kernels.OFFSET_DELTA] if count else base_offset
    below_map = _at_or_below(superseded, last)
    below_within = 0 if tabled else _at_or_below(within, last)
    for i in range(count - 1, -1, -1):
        key_len = layout[i, kernels.KEY_LEN]
        offset = base_offset + layout[i, kernels.OFFSET_DELTA]
        tombstone = layout[i, kernels.VALUE_LEN] < 0
        if key_len < 0:
            reason = _record_fate(False, False, False, tombstone, expire_tombstones)
            reasons[i] = reason
            tally[reason] += 1
            dropped += 1
            continue
        below_map, in_map = _walk_down(superseded, below_map, offset)
        slot = 0
        if tabled:
            key_pos = layout[i, kernels.KEY_POS]
            h = hashes[i]
            slot = _slot(table, h)
            found = table[_SLOT * slot + 1] != 0
            if found and not _same_key(table, slot, arena, buf, key_pos, key_len):
                return COLLISION, dropped, tombstones, table, arena
        else:
            below_within, found = _walk_down(within, below_within, offset)
        reason = _record_fate(True, in_map, found, tombstone, expire_tombstones)
        reasons[i] = reason
        tally[reason] += 1
        if reason != KEPT:
            dropped += 1
        elif tombstone:
            tombstones += 1
        if tabled and not found and offset >= entry:
            key_pos = layout[i, kernels.KEY_POS]
            table[_SLOT * slot] = hashes[i]
            if key_len <= _INLINE:
                lo, hi = _words(buf, key_pos, key_len)
                table[_SLOT * slot + 1] = -1 - key_len
                table[_SLOT * slot + 2] = lo
                table[_SLOT * slot + 3] = hi
            else:
                at = used[0]
                if at + 4 + key_len > arena.shape[0]:
                    bigger = np.empty(max(2 * arena.shape[0], at + 4 + key_len), np.uint8)
                    bigger[:at] = arena[:at]
                    arena = bigger
                arena[at] = key_len & 0xFF
                arena[at + 1] = (key_len >> 8) & 0xFF
                arena[at + 2] = (key_len >> 16) & 0xFF
                arena[at + 3] = (key_len >> 24) & 0xFF
                arena[at + 4:at + 4 + key_len] = buf[key_pos:key_pos + key_len]
                used[0] = at + 4 + key_len
                table[_SLOT * slot + 1] = at + 1
            used[1] += 1
            if 2 * _SLOT * used[1] > table.shape[0]:  # keep the load at most 1/2
                # (NativeRewrite grows it ahead, see _grown_table; this is the safety net)
                bigger = np.zeros(2 * table.shape[0], np.int64)
                rehash(table, bigger)
                table = bigger
    return kernels.OK, dropped, tombstones, table, arena


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


@dataclass(slots=True)
class BatchFate:
    """What the backward pass decided for one batch: ``reasons`` per record (``None`` when
    every record stays), and whether the pure path must filter it."""

    reasons: np.ndarray | None
    dropped: int
    pure: bool = False
    tombstones: int = -1  # retained tombstones; -1: not counted


_TS_SAFE = 2**61  # timestamps beyond this go to the pure encoder (no int64 overflow here)


class _Section:
    """The records section of a v2 batch (decompressed) and its parsed layout."""

    __slots__ = ("data", "buf", "layout", "status")

    def __init__(self, batch: RecordBatch) -> None:
        raw = batch.raw
        count = batch.records_count
        if batch.compression != Codec.NONE and count:
            try:
                body = decompress(batch.compression, raw[RECORDS_OFFSET:])
            except DecompressionError:
                raise Fallback from None
            self.data = body
            start = 0
        else:
            self.data = raw
            start = RECORDS_OFFSET
        self.buf = np.frombuffer(self.data, np.uint8)
        self.layout = np.empty((count, kernels.COLUMNS), np.int64)
        self.status = kernels.parse_layout(self.buf, start, self.buf.shape[0], count,
                                           batch.last_offset_delta, self.layout)


# the decompressed chunks a group's backward pass keeps for its forward pass, in bytes: beyond
# it a chunk is decompressed again (the group's memory stays bounded whatever its size)
KEEP_EXPANDED_BYTES = 256 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class Expanded:
    """A framed chunk with its compressed batches' records decompressed: each batch's 61-byte
    header, then its records as the kernels parse them (a batch without records as it is).
    ``frames`` are the chunk's frames (:func:`frame_chunk`) with positions and sizes in
    ``buf``; the kernels read headers and records there as in an uncompressed chunk."""

    buf: np.ndarray
    frames: np.ndarray

    @classmethod
    def of(cls, chunk: bytes, frames: np.ndarray) -> Expanded:
        """Raises:
            Fallback: a batch cannot be decompressed (the pure path reports where).
        """
        view = memoryview(chunk)
        parts: list[bytes | memoryview] = []
        expanded = frames.copy()
        at = 0
        for i, (pos, size, attrs, count) in enumerate(
                frames[:, [F_POS, F_SIZE, F_ATTRS, F_COUNT]].tolist()):
            codec = attrs & CODEC_MASK
            if codec and count:
                try:
                    body = decompress(codec, view[pos + RECORDS_OFFSET:pos + size])
                except DecompressionError:
                    raise Fallback from None
                parts += (view[pos:pos + RECORDS_OFFSET], body)
                size = RECORDS_OFFSET + len(body)
            else:
                parts.append(view[pos:pos + size])
            expanded[i, F_POS] = at
            expanded[i, F_SIZE] = size
            at += size
        return cls(np.frombuffer(b"".join(parts), np.uint8), expanded)


def _grown_table(table: np.ndarray, keys: int, seen: int, records: int) -> np.ndarray:
    """``table``, or a larger copy when the ``records`` about to be decided would bring it
    past half full at the rate new keys have come so far (``keys`` in ``seen`` records; all
    of them new at first). Grown here rather than in the kernel: numpy asks the kernel for
    huge pages on an allocation this large (``madvise``; numba's allocator does not), which
    spares a table of millions of keys a TLB miss on most probes, and one doubling may
    take several steps at once. On 6.5 M keys a partition the writer took 6.5-6.9 s with
    the table grown in the kernel, 5.6-6.1 s with it grown here (5.2 s allocated whole up
    front, which a bound on the keys would need)."""
    expected = keys + (records if not seen else -(-records * keys // seen))
    size = table.shape[0]
    while 2 * _SLOT * expected > size:
        size *= 2
    if size == table.shape[0]:
        return table
    bigger = _zeroed_table(size)
    rehash(table, bigger)
    spare_table(table)
    return bigger


#: key tables of at least this many bytes a worker keeps for its next groups (smaller ones
#: come from malloc's heap, which keeps them itself: ``compactor.spark.daemon``)
SPARE_TABLE_MIN_BYTES = 64 * 1024**2
#: at most this many bytes of them, the largest first: the tables of one 6.5 M-key
#: partition's growth (128, 256 and 512 MiB)
SPARE_TABLE_BYTES = 1024**3
_spares: list[np.ndarray] = []
_spares_lock = threading.Lock()  # a worker writes one task at a time; a library user may not


def _zeroed_table(size: int) -> np.ndarray:
    """An empty key table of ``size`` int64s: a spare of that size cleared, else a new one.
    Kafka's cleaner thread likewise allocates its offset map once and clears it for each
    cleaning (``LogCleaner.CleanerThread``'s ``SkimpyOffsetMap``, ``OffsetMap.clear``). A
    spare's pages are already the process's: clearing 512 MiB of them took about 0.05 s,
    faulting in a new table of that size 0.35-0.78 s on 6.5 M keys a partition (numpy asks
    for huge pages, and the kernel compacts memory to give them)."""
    with _spares_lock:
        taken = next((i for i, spare in enumerate(_spares) if spare.shape[0] == size), None)
        spare = None if taken is None else _spares.pop(taken)
    if spare is None:
        return np.zeros(size, np.int64)
    spare.fill(0)
    return spare


def spare_table(table: np.ndarray) -> None:
    """Keep ``table``, no longer used, for a later :func:`_zeroed_table` of its size: the
    largest spares up to :data:`SPARE_TABLE_BYTES` in all. An idle worker holds them (Spark
    stops workers idle for a minute), memory its tasks needed anyway."""
    if table.nbytes < SPARE_TABLE_MIN_BYTES:
        return
    with _spares_lock:
        kept = 0
        spares = sorted([*_spares, table], key=lambda t: t.nbytes, reverse=True)
        _spares.clear()
        for spare in spares:
            if kept + spare.nbytes <= SPARE_TABLE_BYTES:
                _spares.append(spare)
                kept += spare.nbytes


def _sorted_offsets(offsets: Collection[int]) -> np.ndarray:
    """Offsets as a sorted int64 array. The offset map's rows arrive as an array of sorted
    runs, one a bucket, in no order: a stable sort (timsort) merges the runs (0.7 ms for
    375 K offsets in 17 runs, against 16 ms for quicksort). Other callers give a set."""
    if isinstance(offsets, np.ndarray):
        return np.sort(offsets.astype(np.int64), kind="stable")
    return np.sort(np.fromiter(offsets, np.int64, len(offsets)))


class NativeRewrite:
    """A group's record work with the kernels (:class:`compactor.cleaner.rewrite.GroupRewrite`):
    the backward pass (``iter_drops`` natively) keeps the group's key table, or, given the
    offsets superseded within the group, no table at all; the forward pass filters by its
    fates (:class:`BatchFate`)."""

    path = "native"

    def __init__(self, superseded: Collection[int], first_dirty: int,
                 within: np.ndarray | None = None) -> None:
        self.superseded = _sorted_offsets(superseded)
        self.first_dirty = first_dirty
        # with ``within`` (the offset map's scan found the records superseded within the
        # group) no key is read and the table stays empty: memory flat in the group's keys
        self.tabled = within is None
        self.within = _sorted_offsets(() if within is None else within)
        self.table = np.zeros(_SLOT << (12 if self.tabled else 0), np.int64)
        self.arena = np.empty(1 << 16, np.uint8)
        self.used = np.zeros(2, np.int64)
        self.tally = np.zeros(8, np.int64)
        self.seen = 0  # records decided: with the keys held, the rate new keys come at
        self.released = False  # decided() gave the table back
        self.scratch = np.empty((1024, kernels.COLUMNS), np.int64)
        # decompressed chunks for filter_chunk, by segment and chunk start
        self._kept: dict[tuple[int, int], Expanded] = {}
        self._kept_bytes = 0

    def decide(self, newest_first: Sequence[tuple[RecordBatch, BatchDecision]]
               ) -> list[BatchFate]:
        """The fates of batches given newest first, in that order.

        Raises:
            Fallback: the group must take the pure path.
        """
        return [self.decide_batch(batch, decision) for batch, decision in newest_first]

    def decide_batch(self, batch: RecordBatch, decision: BatchDecision) -> BatchFate:
        """The fate of ``batch``'s records.

        Raises:
            Fallback: the group must take the pure path.
        """
        if batch.magic < 2:
            raise Fallback
        raw = batch.raw
        if batch.compression != Codec.NONE and batch.records_count:
            # the header, then the decompressed records: the layout decide_chunk reads
            try:
                raw = raw[:RECORDS_OFFSET] + decompress(
                    batch.compression, raw[RECORDS_OFFSET:])
            except DecompressionError:
                raise Fallback from None
        frames = np.array([[0, len(raw), batch.base_offset, batch.attributes,
                            batch.last_offset_delta, batch.records_count, batch.crc]], np.int64)
        return self._decide_frames(np.frombuffer(raw, np.uint8), frames, [decision])[0]

    def decide_chunk(self, chunk: bytes, start: int, segment_base: int,
                     decisions: Mapping[tuple[int, int], BatchDecision]
                     ) -> tuple[list[int], list[int], list[BatchFate]] | None:
        """:meth:`decide` for every batch of a chunk of a segment (``chunk`` holds the
        segment's bytes from ``start``) in one native call: ``(positions, base offsets,
        fates)`` of its batches in file order, or ``None``, before anything is decided, when
        the chunk needs the general walk (a legacy batch, a header or CRC the checks refuse, a
        batch without a decision). A chunk with compressed batches is decided on its
        :class:`Expanded` form, which is kept for :meth:`filter_chunk` while the group's
        :data:`KEEP_EXPANDED_BYTES` allow.

        Raises:
            Fallback: the group must take the pure path.
        """
        buf = np.frombuffer(chunk, np.uint8)
        frames = frame_chunk(buf, True)
        if not frames.shape[0]:
            return None
        view = memoryview(chunk)
        positions = (frames[:, F_POS] + start).tolist()
        chosen: list[BatchDecision] = []
        for i, (at, size, crc) in enumerate(zip(frames[:, F_POS].tolist(),
                                                frames[:, F_SIZE].tolist(),
                                                frames[:, F_CRC].tolist())):
            if crc32c.crc32c(view[at + CRC_START:at + size]) != crc:
                return None
            decision = decisions.get((segment_base, positions[i]))
            if decision is None:
                return None
            chosen.append(decision)
        if (frames[:, F_ATTRS] & CODEC_MASK).any():
            expanded = Expanded.of(chunk, frames)
            fates = self._decide_frames(expanded.buf, expanded.frames, chosen)
            if self._kept_bytes + expanded.buf.shape[0] <= KEEP_EXPANDED_BYTES:
                self._kept[(segment_base, start)] = expanded
                self._kept_bytes += expanded.buf.shape[0]
            STATS["chunks_expanded"] += 1
        else:
            fates = self._decide_frames(buf, frames, chosen)
        STATS["chunks_native"] += 1
        return positions, frames[:, F_BASE].tolist(), fates

    def _decide_frames(self, buf: np.ndarray, frames: np.ndarray,
                       decisions: Sequence[BatchDecision]) -> list[BatchFate]:
        """The fates of the framed batches of ``buf`` (:func:`decide_chunk`), in file order.

        Raises:
            Fallback: the group must take the pure path.
        """
        flags = np.array([(DISCARD if d.discard_records else 0)
                          | (ABORTED_BATCH if d.aborted else 0)
                          | (RETAIN_DELETES if d.retain_deletes else 0) for d in decisions],
                         np.int8)
        if self.released:
            raise RuntimeError("the group's records were decided: its key table is gone")
        records = int(frames[:, F_COUNT].sum())
        if self.tabled:
            self.table = _grown_table(self.table, int(self.used[1]), self.seen, records)
        self.seen += records
        reasons = np.zeros(records, np.int8)
        out = np.empty((frames.shape[0], 4), np.int64)
        status, self.table, self.arena, self.scratch = decide_chunk(
            buf, frames, flags, self.first_dirty, self.superseded, self.within, self.tabled,
            self.table, self.arena, self.used, self.tally, reasons, out, self.scratch)
        if status != kernels.OK:
            raise Fallback
        fates = []
        for (first, dropped, tombstones, parsed), count, attrs, flag in zip(
                out.tolist(), frames[:, F_COUNT].tolist(), frames[:, F_ATTRS].tolist(),
                flags.tolist()):
            noncanonical = bool(parsed & kernels.NOT_CANONICAL)
            if flag & DISCARD:
                fates.append(BatchFate(reasons[first:first + count] if count else None,
                                       count, noncanonical))
            elif attrs & ATTR_CONTROL:  # control (filter_fast hands it to the pure path)
                fates.append(BatchFate(None, 0, noncanonical))
            else:
                fates.append(BatchFate(reasons[first:first + count] if dropped else None,
                                       dropped, noncanonical, tombstones))
        return fates

    def decided(self) -> None:
        """The key table goes back to the worker's spares (:func:`spare_table`)."""
        if self.tabled and not self.released:
            spare_table(self.table)
        self.released = True
        self.table = np.zeros(0, np.int64)

    def filter_chunk(self, chunk: bytes, start: int, segment_base: int,
                     positions: Sequence[int], base_offsets: Sequence[int], fates: Sequence[Any],
                     decisions: Sequence[BatchDecision], *, now_ms: int,
                     delete_retention_ms: int) -> Filtered | None:
        kept = self._kept.pop((segment_base, start), None)
        if kept is not None:
            self._kept_bytes -= kept.buf.shape[0]
        return filter_chunk_batches(chunk, start, positions, base_offsets, fates, decisions,
                                    now_ms=now_ms, delete_retention_ms=delete_retention_ms,
                                    expanded=kept)

    def filter(self, batch: RecordBatch, decision: BatchDecision, fate: object, *, now_ms: int,
               delete_retention_ms: int) -> tuple[FilteredBatch, int]:
        assert isinstance(fate, BatchFate)
        return filter_fast(batch, decision, fate, now_ms=now_ms,
                           delete_retention_ms=delete_retention_ms), fate.dropped

    def from_map(self) -> int:
        return int(self.tally[FROM_MAP])

    def later(self) -> int:
        return int(self.tally[LOCAL])

    def keys(self) -> int:
        return int(self.used[1])

    def records(self) -> int:
        return self.seen

    def reasons(self) -> Counter[str]:
        counts: Counter[str] = Counter()
        for code, name in REASON_NAMES.items():
            if self.tally[code]:
                counts[name] += int(self.tally[code])
        return counts


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
    ranged read of an object): the keyed records of the batches at ``positions`` (ascending)
    that the kernels read, as ``(offsets, key_hi, key_lo, batch index into positions)``, and
    the positions they left."""
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
        left += (wanted[lo_j:hi_j][rest]).tolist()
        STATS["batches_scanned"] += int(hi_j - lo_j) - len(rest)
    if not parts:
        empty = np.zeros(0, np.int64)
        return (empty, empty, empty, empty), left
    columns = tuple(np.concatenate([p[k] for p in parts]) for k in range(4))
    return columns, left  # type: ignore[return-value]


def batch_keys(batch: RecordBatch) -> tuple[np.ndarray, list[bytes]] | None:
    """The offsets and keys of a v2 batch's keyed records, in offset order, read by the
    kernels (the key scan of :func:`compactor.cleaner.scan.keyed_records`); ``None`` when the
    pure decoder must read the batch (legacy, or anything the kernel flags)."""
    if batch.magic < 2:
        return None
    count = batch.records_count
    try:
        section = _Section(batch)
    except Fallback:
        return None
    if section.status != kernels.OK:
        return None
    offsets, positions, lengths = _keyed_rows(section.layout, count, batch.base_offset)
    STATS["batches_scanned"] += 1
    data = section.data
    keys = [data[p:p + n] for p, n in zip(positions.tolist(), lengths.tolist())]
    return offsets, keys


def filter_fast(batch: RecordBatch, decision: BatchDecision, fate: BatchFate, *, now_ms: int,
                delete_retention_ms: int) -> FilteredBatch:
    """:func:`compactor.cleaner.rebatch.filter_batch` for a batch the backward pass decided
    (a cleaning round: the delete horizon is set where Kafka sets it)."""
    count = batch.records_count
    if decision.retention == BatchRetention.DELETE:
        return FilteredBatch(data=None, records_in=count, records_out=0)
    if fate.pure or batch.is_control:
        STATS["batches_pure"] += 1
        return filter_batch(batch, decision, _dropped_offsets(batch, fate),
                            now_ms=now_ms, delete_retention_ms=delete_retention_ms)
    retained = count - fate.dropped
    horizon = batch.delete_horizon_ms
    if retained == 0:
        emptied = policy.emptied_batch(decision.retention, count)
        data = (batch.raw if emptied == policy.EMPTIED_VERBATIM else
                empty_batch_like(batch) if emptied == policy.EMPTIED_HEADER else None)
        return FilteredBatch(data=data, records_in=count, records_out=0)
    if fate.reasons is None and fate.tombstones >= 0 and policy.copied_verbatim(
            retained, count, policy.needs_delete_horizon(
                horizon is not None, decision.marker_horizon, False, fate.tombstones)):
        # every record stays and no horizon is due: the batch as it is (data batches only
        # reach here: a control batch took the pure path above)
        return FilteredBatch(data=batch.raw, records_in=count, records_out=count)
    section = _Section(batch)
    if section.status != kernels.OK:  # the backward pass parsed it: only NOT_CANONICAL
        STATS["batches_pure"] += 1
        return filter_batch(batch, decision, _dropped_offsets(batch, fate),
                            now_ms=now_ms, delete_retention_ms=delete_retention_ms)
    fixed = batch.timestamp_type == TimestampType.LOG_APPEND_TIME
    if abs(batch.base_timestamp) >= _TS_SAFE or abs(batch.max_timestamp) >= _TS_SAFE:
        STATS["batches_pure"] += 1
        return filter_batch(batch, decision, _dropped_offsets(batch, fate),
                            now_ms=now_ms, delete_retention_ms=delete_retention_ms)
    reasons = fate.reasons if fate.reasons is not None else np.zeros(count, np.int8)
    tombstones, first_ts, max_ts = _retained_figures(
        section.layout, count, reasons, batch.base_timestamp, fixed, batch.max_timestamp)
    needs_horizon = policy.needs_delete_horizon(horizon is not None, decision.marker_horizon,
                                                False, tombstones)
    if policy.copied_verbatim(retained, count, needs_horizon):
        return FilteredBatch(data=batch.raw, records_in=count, records_out=count)
    if needs_horizon:
        horizon = policy.delete_horizon_ms(now_ms, delete_retention_ms)
    new_base_ts = horizon if horizon is not None else first_ts
    if abs(new_base_ts) >= _TS_SAFE:
        STATS["batches_pure"] += 1
        return filter_batch(batch, decision, _dropped_offsets(batch, fate),
                            now_ms=now_ms, delete_retention_ms=delete_retention_ms)
    STATS["batches_rebuilt"] += 1
    size = section.buf.shape[0] + 15 * count
    out = np.empty(size, np.uint8)
    written = kernels.rebuild_records(section.buf, section.layout, count, reasons,
                                      batch.base_timestamp, fixed, batch.max_timestamp,
                                      new_base_ts, out)
    data = frame_rebuilt(batch, out[:written].tobytes(), retained, delete_horizon_ms=horizon,
                         base_timestamp=new_base_ts,
                         max_timestamp=batch.max_timestamp if fixed else max_ts)
    return FilteredBatch(data=data, records_in=count, records_out=retained)


_CRC_BYTES = struct.Struct(">I")


def filter_chunk_batches(chunk: bytes, start: int, positions: Sequence[int],
                         base_offsets: Sequence[int], fates: Sequence[BatchFate],
                         decisions: Sequence[BatchDecision], *, now_ms: int,
                         delete_retention_ms: int, expanded: Expanded | None = None
                         ) -> Filtered | None:
    """:func:`filter_fast` for the batches of a chunk of a segment (``chunk`` holds the
    segment's bytes from ``start``; ``positions``, ``base_offsets``, ``fates`` and
    ``decisions`` are its batches', as the backward pass saw them) in one native call. A chunk
    with compressed batches is filtered on its :class:`Expanded` form (``expanded``, as the
    backward pass kept it, or decompressed here): a batch that stays whole is copied from
    ``chunk`` as it is, a rebuilt one is compressed again with its codec
    (:func:`compactor.codec.records.frame_rebuilt`).

    Returns:
        ``(the output batches in runs that lie end to end, each run with its batches'
        sizes; their transaction index entries; records in; records out)``: a run is written
        in one call, and those of ``out`` are views of it, not copies (a fresh buffer a chunk
        would cost a page fault every 4 KiB). ``None`` when the chunk needs the
        batch-by-batch walk (anything but v2 data
        batches the kernels parsed cleanly, or a chunk that is not what the backward pass
        saw: the walk then raises the located error).
    """
    buf = np.frombuffer(chunk, np.uint8)
    frames = frame_chunk(buf, True)
    n = frames.shape[0]
    if (n != len(positions) or (frames[:, F_POS] + start).tolist() != list(positions)
            or frames[:, F_BASE].tolist() != list(base_offsets)):
        return None
    codecs = (frames[:, F_ATTRS] & CODEC_MASK).tolist()
    source_frames = frames
    if any(codecs):
        if expanded is None:
            try:
                expanded = Expanded.of(chunk, frames)
            except Fallback:
                return None  # the walk raises the located error
            STATS["chunks_expanded_again"] += 1
        elif expanded.frames[:, F_CRC].tolist() != frames[:, F_CRC].tolist():
            return None  # not the bytes the backward pass decided
        buf, frames = expanded.buf, expanded.frames
    counts = frames[:, F_COUNT].tolist()
    dec = np.empty((n, 5), np.int64)
    parts = []
    first = records_in = records_out = 0
    for i, (fate, decision, count) in enumerate(zip(fates, decisions, counts)):
        if fate.pure:
            return None
        retention = int(decision.retention)
        if retention == _DELETE and fate.dropped != count:
            return None  # the walk reports the imbalance
        parts.append(fate.reasons if fate.reasons is not None else np.zeros(count, np.int8))
        dec[i] = (first, fate.dropped, fate.tombstones, retention, decision.marker_horizon)
        first += count
        records_in += count
        if retention != _DELETE:
            records_out += count - fate.dropped
    reasons = np.concatenate(parts) if parts else np.zeros(0, np.int8)
    out = np.empty(buf.shape[0] + 15 * first + RECORDS_OFFSET, np.uint8)
    outs = np.empty((n, 3), np.int64)
    status, n_out, _ = filter_chunk(buf, frames, reasons, dec,
                                    policy.delete_horizon_ms(now_ms, delete_retention_ms),
                                    out, outs, np.empty((256, kernels.COLUMNS), np.int64))
    if status != kernels.OK:
        return None
    view = out.data
    runs: list[tuple[Any, list[int]]] = []  # (bytes, each batch's size), in output order
    txn_entries: list[AbortedTxn] = []
    run_start = run_end = 0  # the run of output batches next to each other in ``out``
    run_sizes: list[int] = []
    for at, size, source in outs[:n_out, [O_POS, O_SIZE, O_SOURCE]].tolist():
        entry = None  # the batch's bytes when they are not ``out``'s
        if source < 0:  # the batch as it is: its CRC stands
            source = -1 - source
            if codecs[source]:
                pos = source_frames[source, F_POS]
                entry = bytes(chunk[pos:pos + source_frames[source, F_SIZE]])
        else:
            STATS["batches_rebuilt"] += 1
            if codecs[source] and size > RECORDS_OFFSET:  # records: compressed again
                entry = _compressed(view[at:at + size], codecs[source])
            else:  # uncompressed, or no records left (written uncompressed, as Kafka does)
                _CRC_BYTES.pack_into(view, at + CRC_OFFSET,
                                     crc32c.crc32c(view[at + CRC_START:at + size]))
        if entry is None and at == run_end and run_sizes:
            run_end += size
            run_sizes.append(size)
        else:
            if run_sizes:
                runs.append((view[run_start:run_end], run_sizes))
            if entry is None:
                run_start, run_end, run_sizes = at, at + size, [size]
            else:
                runs.append((entry, [len(entry)]))
                run_sizes = []
        if (txn_entry := decisions[source].txn_entry) is not None:
            txn_entries.append(txn_entry)
    if run_sizes:
        runs.append((view[run_start:run_end], run_sizes))
    STATS["chunks_filtered"] += 1
    return runs, txn_entries, records_in, records_out


_LENGTH_BYTES = struct.Struct(">i")
_ATTRIBUTES_BYTES = struct.Struct(">h")


def _compressed(rebuilt: memoryview, codec: int) -> bytes:
    """A batch the kernels rebuilt uncompressed, its records compressed with ``codec``: the
    header's length, attributes and CRC as :func:`compactor.codec.records.frame_rebuilt`
    writes them."""
    body = compress(codec, bytes(rebuilt[RECORDS_OFFSET:]))
    header = bytearray(rebuilt[:RECORDS_OFFSET])
    _LENGTH_BYTES.pack_into(header, LENGTH_OFFSET, RECORDS_OFFSET - LOG_OVERHEAD + len(body))
    (attributes,) = _ATTRIBUTES_BYTES.unpack_from(header, ATTRIBUTES_OFFSET)
    _ATTRIBUTES_BYTES.pack_into(header, ATTRIBUTES_OFFSET, attributes | codec)
    crc = crc32c.crc32c(header[CRC_START:])
    crc = crc32c.crc32c(body, crc)
    _CRC_BYTES.pack_into(header, CRC_OFFSET, crc)
    return bytes(header) + body


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
            headers.append(BatchHeader(
                segment_base=segment_base, position=at, size_in_bytes=size, base_offset=base,
                last_offset=base + last_delta, magic=2, is_control=False,
                is_transactional=bool(attrs & ATTR_TRANSACTIONAL),
                control_type=NO_CONTROL_TYPE, producer_id=pid, producer_epoch=epoch,
                max_timestamp=max_ts,
                horizon_ms=base_ts if attrs & ATTR_DELETE_HORIZON else -1,
                records_count=count))
    STATS["segments_framed"] += 1
    return headers


_LAST_CODEC = max(int(c) for c in Codec)


class NativeEngine:
    """The kernels as a :class:`compactor.cleaner.rewrite.Engine`."""

    name = "native"

    def group(self, superseded: Collection[int], first_dirty: int,
              within: np.ndarray | None = None) -> GroupRewrite:
        return NativeRewrite(superseded, first_dirty, within)

    def segment_keys(self, data: bytes, positions: Sequence[int], chunk_bytes: int,
                     window: Window) -> tuple[KeyColumns, Sequence[int]] | None:
        return segment_keys(data, positions, chunk_bytes, window)

    def batch_keys(self, batch: RecordBatch) -> tuple[np.ndarray, list[bytes]] | None:
        return batch_keys(batch)

    def segment_digests(self, data: Any, path: str, segment_base: int, names: Sequence[str],
                        keep: DigestProbe | None) -> SubjectDigests | None:
        from compactor.native.erasure import segment_digests

        return segment_digests(data, path, segment_base, names, keep)

    def segment_headers(self, data: Any, path: str, segment_base: int
                        ) -> list[BatchHeader] | None:
        return segment_headers(data, path, segment_base)


def compile_kernels() -> None:
    """Compile every kernel (or load it from numba's on-disk cache, next to the modules or in
    ``NUMBA_CACHE_DIR``) by calling it once on empty input: about 30 s the first time, under
    a second after. ``make demo``/``make test`` call it, so Spark's Python workers find the
    kernels compiled instead of compiling them side by side; the workers' daemon
    (:mod:`compactor.spark.daemon`) calls it before it forks them.

    The kernels that read a segment's bytes are called with both kinds of buffer they meet: a
    read-only one (``np.frombuffer`` over ``bytes`` or a read-only map) and a writable one.
    numba compiles a signature per kind, and each missing one would cost a worker tens of
    milliseconds of LLVM at its first use (py-spy, a cold demo round)."""
    small = np.zeros(64, np.uint8)
    layout = np.zeros((1, kernels.COLUMNS), np.int64)
    reasons = np.zeros(0, np.int8)
    table = np.zeros(_SLOT << 2, np.int64)  # four empty slots
    used = np.zeros(2, np.int64)
    tally = np.zeros(8, np.int64)
    no_offsets = np.zeros(0, np.int64)
    for none in (np.zeros(0, np.uint8), np.frombuffer(b"", np.uint8)):
        kernels.parse_layout(none, 0, 0, 0, 0, layout)
        kernels.rebuild_records(none, layout, 0, reasons, 0, False, 0, 0, small)
        decide_records(none, layout, 0, 0, 0, False, no_offsets, no_offsets, True, table,
                       small.copy(), used, reasons, tally)
        scan_chunk_keys(none, no_offsets, layout)
        frames = frame_chunk(none, False)
        frame_headers(none, 0, np.zeros((1, F_COLUMNS), np.int64), np.zeros((1, 4), np.int64))
        decide_chunk(none, frames, reasons, 0, no_offsets, no_offsets, True, table,
                     small.copy(), used, tally, reasons, np.zeros((0, 4), np.int64), layout)
        filter_chunk(none, frames, reasons, np.zeros((0, 5), np.int64), 0, small,
                     np.zeros((0, 3), np.int64), layout)
    rehash(table, table.copy())
    _retained_figures(layout, 0, reasons, 0, False, 0)
    _keyed_rows(layout, 0, 0)


def _dropped_offsets(batch: RecordBatch, fate: BatchFate) -> frozenset[int]:
    if fate.reasons is None:
        return frozenset()
    records = batch.compiled_records()
    return frozenset(r.offset for r, code in zip(records, fate.reasons.tolist()) if code)
