"""Executor-side extraction of compact rows from segment bytes: batch headers for planning,
and the key digests of keyed records for the offset map. Values never leave the executor.

Keys are compared by their xxh3-128 digest, split into two signed 64-bit halves (Kafka compares
by MD5 digest in ``SkimpyOffsetMap``; both treat a digest collision as the same key).
"""

from __future__ import annotations

import hashlib
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import xxhash

from compactor.cleaner.policy import NO_CONTROL_TYPE, BatchHeader
from compactor.cleaner.rewrite import DigestProbe, Engine, SubjectDigests, Window, sliced
from compactor.codec.records import RecordBatch
from compactor.codec.segment import iter_batches
from compactor.errors import CompactorError, TruncatedSegmentError

#: a SHA-256 digest's bytes
DIGEST_BYTES = 32

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
    """What a keyed record row inherits from its batch.

    Attributes:
        group_base: base offset of the group the batch is rewritten in.
        feeds_map: the batch's dirty-section records enter the offset map (it is not aborted).
    """

    group_base: int
    feeds_map: bool


def batch_flags(group_base: int, *, is_control: bool, aborted: bool,
                discard_records: bool) -> BatchFlags | None:
    """The flags of a batch whose records can be superseded; ``None`` for control batches and
    batches the round discards (their records never meet the offset map)."""
    if is_control or discard_records:
        return None
    return BatchFlags(group_base, feeds_map=not aborted)


@dataclass(frozen=True, slots=True)
class KeyedRows:
    """Columns of keyed record rows (what ``compactor.schemas.spark.KEY_BUCKET`` packs), as numpy
    arrays."""

    group_base: np.ndarray
    offset: np.ndarray
    key_hi: np.ndarray
    key_lo: np.ndarray
    in_map: np.ndarray

    def __len__(self) -> int:
        return len(self.offset)


def key_digests(keys: Sequence[bytes]) -> tuple[np.ndarray, np.ndarray]:
    """:func:`key_digest` of many keys at once, as two int64 arrays (one C call per key, no
    Python integers in between: the digest's canonical bytes are big-endian)."""
    raw = b"".join(map(xxhash.xxh3_128_digest, keys))
    halves = np.frombuffer(raw, dtype=">i8").reshape(-1, 2).astype(np.int64)
    return halves[:, 0], halves[:, 1]


#: how much of a segment the native key scan reads at a time (as the writer's chunks)
KEY_SCAN_CHUNK_BYTES = 16 * 1024 * 1024


def keyed_records(data: bytes, path: str, flags_by_position: Mapping[int, BatchFlags],
                  first_dirty: int, *, engine: Engine, window: Window = sliced) -> KeyedRows:
    """Rows of the keyed records of the listed batches of a segment, in file order.

    Args:
        flags_by_position: by batch position, the data batches whose records can be
            superseded (the round neither discards them nor are they control batches);
            other batches are skipped.
        first_dirty: records at or above it are in the dirty section.
        engine: what reads the records (:func:`compactor.native.engine`). The native one
            reads plain uncompressed batches a chunk at a time with the keys digested in the
            kernel, and the batches it leaves one by one (what it cannot vouch for goes to
            the compiled reader). The pure one walks every batch of the segment with the
            compiled reader (the reference).
        window: how the native engine takes a chunk of ``data``
            (:func:`compactor.log.storage.window` for a file :func:`~compactor.log.storage.mapped`:
            a view of its pages instead of a 16 MB copy a chunk); bytes are sliced.

    Raises:
        CompactorError: a batch cannot be decoded.
    """
    positions = sorted(flags_by_position)
    columns: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = []
    try:
        bulk = engine.segment_keys(data, positions, KEY_SCAN_CHUNK_BYTES, window)
        if bulk is not None:
            scanned, left = bulk
            columns.append(scanned)
            batches: Iterable[RecordBatch] = (_batch_at(data, path, p) for p in left)
        else:
            batches = (b for b in iter_batches(data, path=path, verify_crc=False)
                       if b.position in flags_by_position)
        index = {p: j for j, p in enumerate(positions)}
        columns += [_batch_rows(b, index[b.position], engine) for b in batches]
    except CompactorError as err:
        raise err.with_location(path=path) from None
    if columns:
        offset, key_hi, key_lo, which = (np.concatenate([c[k] for c in columns])
                                         for k in range(4))
    else:
        offset = key_hi = key_lo = which = np.zeros(0, np.int64)
    if len(columns) > 1 and len(offset) > 1 and np.any(offset[1:] < offset[:-1]):
        order = np.argsort(offset, kind="stable")  # batches read one by one come last
        offset, key_hi, key_lo, which = offset[order], key_hi[order], key_lo[order], which[order]
    flags = [flags_by_position[p] for p in positions]
    feeds = np.asarray([f.feeds_map for f in flags], dtype=bool)
    groups = np.asarray([f.group_base for f in flags], dtype=np.int64)
    return KeyedRows(group_base=groups[which], offset=offset, key_hi=key_hi, key_lo=key_lo,
                     in_map=feeds[which] & (offset >= first_dirty))


def _batch_at(data: bytes, path: str, position: int) -> RecordBatch:
    """The batch at ``position`` of a segment (CRC not checked: the round's header scan
    did).

    Raises:
        CompactorError: no batch can be decoded there.
    """
    for batch in iter_batches(data, path=path, start_position=position, verify_crc=False):
        return batch
    raise TruncatedSegmentError(
        "the segment ends where the round's header scan found a batch (it changed during the "
        "run)", path=path, position=position)


def _batch_rows(batch: RecordBatch, index: int, engine: Engine
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``(offsets, key_hi, key_lo, batch index)`` of one batch's keyed records."""
    read = engine.batch_keys(batch)
    if read is None:
        keyed = [(r.offset, r.key) for r in batch.compiled_records() if r.key is not None]
        offsets = np.fromiter((o for o, _ in keyed), np.int64, len(keyed))
        keys = [key for _, key in keyed]
    else:
        offsets, keys = read
    key_hi, key_lo = key_digests(keys)
    return offsets, key_hi, key_lo, np.full(len(offsets), index, np.int64)


def locally_superseded(rows: KeyedRows) -> np.ndarray:
    """Mask of the rows superseded by a row of the same key among ``rows`` themselves (one
    with ``in_map`` and a larger offset): the map-side combine of the offset map. What a
    group's scan can decide alone never travels through the shuffle; the writer reaches the
    same verdict from the same records (:func:`compactor.cleaner.rebatch.iter_drops`)."""
    return superseded_mask(None, rows.key_hi, rows.key_lo, rows.offset, rows.in_map)


#: an odd 64-bit constant (the golden ratio's): a partition's multiple of it, xored into a
#: digest's high half, spreads the keys of partitions apart in :func:`superseded_mask`'s sort
_PARTITION_MIX = -7046029254386353131


#: at most this many low bits of a sort value give way to the row's index in
#: :func:`packed_order` (more rows: an argsort)
_PACKED_INDEX_BITS = 32


def packed_order(values: np.ndarray, index_bits: int = _PACKED_INDEX_BITS
                 ) -> tuple[np.ndarray, np.ndarray]:
    """An order that puts equal ``values`` next to each other, and which neighbours in it
    share a sort prefix (``values`` with the low bits cleared, at least as coarse as equal
    values): the caller checks those pairs. The low bits of each value are replaced by the
    row's index and the packed values sorted, so no argsort's indirection is paid; rows that
    need more than ``index_bits`` bits are argsorted instead."""
    n = len(values)
    bits = max(1, (n - 1).bit_length())
    if bits > index_bits:
        order = np.argsort(values)
        v = values[order]
        return order, v[1:] == v[:-1]
    low = np.int64((1 << bits) - 1)
    packed = np.sort((values & ~low) | np.arange(n, dtype=np.int64))
    prefix = packed & ~low
    return packed & low, prefix[1:] == prefix[:-1]


def superseded_mask(partition: np.ndarray | None, key_hi: np.ndarray, key_lo: np.ndarray,
                    offset: np.ndarray, in_map: np.ndarray) -> np.ndarray:
    """Mask of the rows with a later row of the same key of the same partition that enters
    the offset map (``in_map``, a larger offset): ``Cleaner.shouldRetainRecord``'s "the map
    holds a later offset for this key", over rows given as columns. It serves a group's own
    rows (:func:`locally_superseded`, ``partition`` None: all of one partition) and a
    shuffle bucket of the distributed offset map, whose rows come from many partitions
    (:func:`compactor.spark.transforms.superseded_records`)."""
    n = len(offset)
    if n == 0:
        return np.zeros(0, dtype=bool)
    # grouping the rows by key is all that matters (the verdict compares each row with the
    # largest offset of its key): one sort on the digest's high half, the partition mixed in,
    # does it unless two different keys share a sort prefix (then the full sort on every
    # column). The sort is of values, not an argsort: each row's index replaces the low bits
    # of its value, so sorting the packed values (40 ms for 610 K rows against argsort's 65)
    # also gives the order
    columns: tuple[np.ndarray, ...] = (key_hi,) if partition is None else (key_hi, partition)
    sort_value = key_hi if partition is None else key_hi ^ (
        partition.astype(np.int64) * np.int64(_PARTITION_MIX))
    order, tied = packed_order(sort_value)
    same = tied.copy()
    for column in (*columns, key_lo):
        c = column[order]
        same &= c[1:] == c[:-1]
    if np.any(tied & ~same):
        order = np.lexsort((key_lo, *columns))
        same = np.ones(n - 1, dtype=bool)
        for column in (key_lo, *columns):
            c = column[order]
            same &= c[1:] == c[:-1]
    ordered = offset[order]
    new_key = np.empty(n, dtype=bool)
    new_key[0] = True
    np.logical_not(same, out=new_key[1:])
    starts = np.flatnonzero(new_key)
    latest = np.maximum.reduceat(np.where(in_map[order], ordered, -1), starts)
    superseded = np.empty(n, dtype=bool)
    superseded[order] = ordered < np.repeat(latest, np.diff(np.append(starts, n)))
    return superseded


def concat_rows(parts: Sequence[KeyedRows]) -> KeyedRows:
    """The rows of several segments, in order, as one set of columns."""
    if len(parts) == 1:
        return parts[0]
    if not parts:
        empty = np.zeros(0, dtype=np.int64)
        return KeyedRows(group_base=empty, offset=empty, key_hi=empty, key_lo=empty,
                         in_map=np.zeros(0, dtype=bool))
    return KeyedRows(*(np.concatenate([getattr(p, f) for p in parts])
                       for f in ("group_base", "offset", "key_hi", "key_lo", "in_map")))


def combine_group(rows: KeyedRows, buckets: int, engine: Engine
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The map-side combine of a group's keyed rows (in file order) for an offset map of
    ``buckets`` buckets: the mask of the rows their own group supersedes
    (:func:`locally_superseded`), the indices of the others grouped by bucket (a key's bucket
    is its digest's low half, unsigned, modulo ``buckets``; file order within a bucket), and
    each bucket's count. ``engine`` computes them where it can (the native one by hash table,
    :func:`compactor.native.offsetmap.combine_keys`); this is the reference."""
    found = engine.combine_keys(rows.key_hi, rows.key_lo, rows.offset, rows.in_map, buckets)
    if found is not None:
        return found
    superseded = locally_superseded(rows)
    rest = np.flatnonzero(~superseded)
    which = rows.key_lo[rest].view(np.uint64) % np.uint64(max(1, buckets))
    # a stable sort on bucket numbers: numpy's radix sort when they fit 16 bits (a tenth of
    # the time of its merge sort on int64 over a 64 MiB group's 600 K records)
    narrow = which.astype(np.uint16 if buckets <= 1 << 16 else np.int64)
    order = rest[np.argsort(narrow, kind="stable")]
    return superseded, order, np.bincount(narrow, minlength=max(1, buckets)).astype(np.int64)


def subject_digests(data: bytes, path: str, segment_base: int,
                    header_names: Collection[str], engine: Engine | None = None,
                    keep: DigestProbe | None = None) -> SubjectDigests:
    """The digests of every data record of a segment (:class:`SubjectDigests`) and the
    headers of its batches; control batches hold no user records and are skipped. ``engine``
    (the native kernels) digests the segment where it can, else it is read here, a Python
    object per record (the reference). ``keep`` (the requests' Bloom filter) says which
    entries to keep: the others are dropped as they are read,
    so a segment of millions of records never holds all its digests at once.

    Raises:
        CompactorError: a batch cannot be decoded (with file, position and base offset).
    """
    names = tuple(sorted(header_names))
    if engine is not None:
        found = engine.segment_digests(data, path, segment_base, names, keep)
        if found is not None:
            return found
    index = {n: i for i, n in enumerate(names)}
    position: list[int] = []
    offset: list[int] = []
    header: list[int] = []
    digest: list[bytes] = []
    key_digest: list[bytes] = []
    key_null: list[bool] = []
    bare: list[bool] = []
    headers = []
    batches = records = 0
    sha256 = hashlib.sha256
    nothing = bytes(DIGEST_BYTES)
    try:
        for batch in iter_batches(data, path=path):
            batches += 1
            headers.append(batch_header(batch, segment_base))
            if batch.is_control:
                continue
            start = len(offset)
            for r in batch.compiled_records():
                records += 1
                is_bare = r.value is None and not r.headers
                key = None if r.key is None else sha256(r.key).digest()
                entries = [(-1, key)] if key is not None else []
                if index:
                    entries += [(index[name], sha256(value).digest()) for name, value
                                in r.headers if value is not None and name in index]
                for h, d in entries:
                    position.append(batch.position)
                    offset.append(r.offset)
                    header.append(h)
                    digest.append(d)
                    key_digest.append(key or nothing)
                    key_null.append(key is None)
                    bare.append(is_bare)
            if keep is not None and len(offset) > start:
                mask = keep.might_contain(_digest_rows(digest[start:])).tolist()
                columns: tuple[list[Any], ...] = (position, offset, header, digest, key_digest,
                                                  key_null, bare)
                for column in columns:
                    column[start:] = [v for v, k in zip(column[start:], mask, strict=True)
                                      if k]
    except CompactorError as err:
        raise err.with_location(path=path) from None
    return SubjectDigests(
        position=np.array(position, np.int64), offset=np.array(offset, np.int64),
        header=np.array(header, np.int32), digest=_digest_rows(digest),
        key_digest=_digest_rows(key_digest), key_null=np.array(key_null, bool),
        bare=np.array(bare, bool), names=names, batches=batches, records=records,
        headers=headers)


def _digest_rows(digests: list[bytes]) -> np.ndarray:
    return np.frombuffer(b"".join(digests), np.uint8).reshape(-1, DIGEST_BYTES)


def key_offsets(data: bytes, path: str,
                wanted: Collection[bytes]) -> list[tuple[int, int, bytes]]:
    """``(batch position, offset, key digest)`` of every data record whose key's SHA-256
    digest is in ``wanted`` (the other records of keys an erasure matched, for the
    compacted-topic rule of :func:`compactor.erasure.rules.superseded_by_erased`).

    Raises:
        CompactorError: a batch cannot be decoded (with file, position and base offset).
    """
    out = []
    try:
        for batch in iter_batches(data, path=path):
            if batch.is_control:
                continue
            for r in batch.compiled_records():
                if r.key is not None:
                    digest = hashlib.sha256(r.key).digest()
                    if digest in wanted:
                        out.append((batch.position, r.offset, digest))
    except CompactorError as err:
        raise err.with_location(path=path) from None
    return out
