"""The distributed offset map's kernels: the map-side combine of a group's key scan
(:func:`combine_keys`), by hash table where the reference sorts
(:func:`compactor.cleaner.scan.combine_group`, which calls it through the engine).

Keys here are key digests (two int64 halves, :func:`compactor.cleaner.scan.key_digest`), so
equal keys are equal pairs and the table compares pairs, not bytes.
"""

from __future__ import annotations

import numpy as np

from compactor.native.cache import kernel

#: the golden ratio's odd 64-bit multiplier: a digest's high half times it, its top bits
#: index the table (the low half picks the bucket, so the two never correlate)
_MIX = np.uint64(0x9E3779B97F4A7C15)


@kernel(nogil=True)
def _combine(key_hi: np.ndarray, key_lo: np.ndarray, offset: np.ndarray, in_map: np.ndarray,
             buckets: int, superseded: np.ndarray, order: np.ndarray,
             counts: np.ndarray) -> bool:
    """Fill ``superseded`` (a row with a later row of its key that enters the map), the
    others' row indices by bucket into ``order`` (stable) and each bucket's count into
    ``counts``; ``False`` when the offsets do not ascend (nothing to vouch for)."""
    n = len(key_hi)
    for i in range(1, n):
        if offset[i - 1] >= offset[i]:
            return False
    size, bits = 16, 4
    while size < 2 * n:
        size <<= 1
        bits += 1
    table_hi = np.empty(size, np.int64)
    table_lo = np.empty(size, np.int64)
    used = np.zeros(size, np.bool_)
    shift = np.uint64(64 - bits)
    # newest first: the table holds the keys with a later row that enters the map
    for i in range(n - 1, -1, -1):
        slot = np.int64((np.uint64(key_hi[i]) * _MIX) >> shift)
        found = False
        while used[slot]:
            if table_hi[slot] == key_hi[i] and table_lo[slot] == key_lo[i]:
                found = True
                break
            slot = (slot + 1) & (size - 1)
        superseded[i] = found
        if in_map[i] and not found:
            used[slot] = True
            table_hi[slot] = key_hi[i]
            table_lo[slot] = key_lo[i]
    width = np.uint64(buckets)
    counts[:] = 0
    for i in range(n):
        if not superseded[i]:
            counts[np.int64(np.uint64(key_lo[i]) % width)] += 1
    starts = np.empty(buckets, np.int64)
    total = 0
    for b in range(buckets):
        starts[b] = total
        total += counts[b]
    for i in range(n):
        if not superseded[i]:
            k = np.int64(np.uint64(key_lo[i]) % width)
            order[starts[k]] = i
            starts[k] += 1
    return True


def combine_keys(key_hi: np.ndarray, key_lo: np.ndarray, offset: np.ndarray,
                 in_map: np.ndarray, buckets: int
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """:func:`compactor.cleaner.scan.combine_group` of rows whose offsets ascend (a group's
    rows in file order): one pass from the newest row with a table of the keys seen entering
    the map, then a counting sort of the rest by bucket. 0.32 s for the 10 M records of
    ``bench/kafka_cleaner.py``'s 1 M-key log against the reference's 0.75 (30 Nov). ``None``
    when the offsets do not ascend: the reference decides."""
    n = len(key_hi)
    superseded = np.empty(n, np.bool_)
    order = np.empty(n, np.int64)
    counts = np.zeros(max(1, buckets), np.int64)
    if not _combine(key_hi, key_lo, offset, in_map, max(1, buckets), superseded, order, counts):
        return None
    return superseded, order[:int(counts.sum())], counts


def compile_kernels() -> None:
    """Compile (or load from numba's cache) the kernel, on empty columns."""
    empty = np.zeros(0, np.int64)
    _combine(empty, empty, empty, np.zeros(0, np.bool_), 1, np.zeros(0, np.bool_), empty,
             np.zeros(1, np.int64))
