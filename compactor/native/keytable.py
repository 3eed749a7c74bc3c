"""The native writer's key table: a group's keys, exactly (``Cleaner.shouldRetainRecord``
compares keys, so a record goes as superseded only when a later record has exactly its key).
Open addressing over int64 slots: a 64-bit hash of each key (FNV-1a, then murmur3's
finalizer), the key's bytes in its slot when short, else in an arena the slot points at, and
a hash hit confirmed by comparing bytes (:func:`decide_records`). Tables are grown by
:func:`rehash` and reused across a worker's tasks (:func:`spare_table`).

The per-record rule itself is :func:`compactor.cleaner.policy.record_fate`, compiled here.
"""

from __future__ import annotations

import threading

import numpy as np

from compactor.cleaner import policy
from compactor.cleaner.policy import KEPT
from compactor.native import kernels
from compactor.native.cache import kernel

# the per-record rule, written once (compactor/cleaner/policy.py) and compiled here (the
# kernels' cache is keyed on policy.py too: compactor.native.cache)
_record_fate = kernel(inline="always")(policy.record_fate)
_map_entry_offset = kernel(inline="always")(policy.map_entry_offset)
COLLISION = 8  # a status of decide_records beside the kernels' own

_FNV_OFFSET = np.uint64(0xCBF29CE484222325)
_FNV_PRIME = np.uint64(0x100000001B3)


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
