"""The erasure scan's native path: the digests of a batch's records
(:class:`compactor.cleaner.rewrite.BatchDigests`) in one kernel call, the keys and the asked
headers' values digested by libcrypto's SHA-256 from inside the kernel
(:mod:`compactor.native.sha256`), with no Python object per record.

The kernel reads the records section with the grammar of
:func:`compactor.native.kernels.parse_layout` (``DefaultRecord.readFrom``). Whatever it cannot
vouch for, it hands back (``None``) and the pure scan (:func:`compactor.cleaner.scan
.subject_digests`) decodes the batch, and raises with the location where the batch is corrupt:
a legacy entry, a malformed record, offset deltas that do not strictly increase from 0 or pass
``lastOffsetDelta``, a record count other than the header's, a header name that is not ASCII
(the pure path matches names as decoded text), a codec that fails. ``tests/property/
test_erasure_digests.py`` compares the two paths entry by entry.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from compactor.cleaner.rewrite import DigestProbe, SubjectDigests
from compactor.codec.compression import CODEC_MASK, DecompressionError, decompress
from compactor.codec.records import ATTRIBUTES_OFFSET, RECORDS_OFFSET
from compactor.erasure import sketch
from compactor.native import sha256
from compactor.native.cache import kernel
from compactor.native.chunks import segment_headers
from compactor.native.kernels import _field, _varint

DIGEST_BYTES = sha256.DIGEST_BYTES
#: kernel results besides an entry count
HAND_BACK = -1  # the pure path decodes the batch
FULL = -2  # more entries than the arrays hold: call again with larger ones


_may_hold = kernel(inline="always")(sketch.may_hold)


@kernel(inline="always")
def _word(digest: np.ndarray, at: int) -> np.uint64:
    """The little-endian 64-bit word of ``digest[at:at + 8]``."""
    word = np.uint64(0)
    for j in range(8):
        word |= np.uint64(digest[at + j]) << np.uint64(8 * j)
    return word


@kernel(inline="always")
def _kept(digest: np.ndarray, filtered: bool, table: np.ndarray, bits: int, hashes: int
          ) -> bool:
    """Whether an entry of ``digest`` (32 bytes) is kept: every entry when not ``filtered``,
    else those the requests' Bloom filter may hold."""
    return not filtered or _may_hold(table, bits, hashes, _word(digest, 0), _word(digest, 8))


@kernel
def _scan(buf: np.ndarray, rows: np.ndarray, names: np.ndarray, name_starts: np.ndarray,
          name_lens: np.ndarray, ctx: int, filtered: bool, table: np.ndarray,
          bits: int, hashes: int, position: np.ndarray, offset: np.ndarray,
          header: np.ndarray, digest: np.ndarray, key_digest: np.ndarray, key_null: np.ndarray,
          bare: np.ndarray, key: np.ndarray, resume: np.ndarray) -> int:
    """The entries of the batches ``rows`` (``[start, end, count, lastOffsetDelta,
    baseOffset, position]`` of each batch's records section in ``buf``) into the arrays
    (``key``: 32 bytes of scratch); when ``filtered``, only the entries whose digest the
    Bloom filter (``table``, ``bits``, ``hashes``) may hold. Starts at batch ``resume[0]``
    with ``resume[1]`` entries already in the arrays. Returns how many, or
    :data:`HAND_BACK`, or :data:`FULL` with ``resume`` set to where to start again: the
    batch that did not fit and the entries before it (nothing before it is read twice)."""
    data = buf.ctypes.data
    key_at = key.ctypes.data
    digests = digest.ctypes.data
    capacity = len(offset)
    n = resume[1]
    for b in range(resume[0], rows.shape[0]):
        resume[0], resume[1] = b, n  # where a call with larger arrays starts again
        pos, end, count = rows[b, 0], rows[b, 1], rows[b, 2]
        last_delta, base_offset, batch_position = rows[b, 3], rows[b, 4], rows[b, 5]
        previous = -1
        for _ in range(count):
            length, pos, _minimal = _varint(buf, pos, end, 5)
            if pos < 0 or length < 0 or pos + length > end:
                return HAND_BACK
            record_end = pos + length
            if pos >= record_end:
                return HAND_BACK
            pos += 1  # the record's attributes
            _ts, pos, _minimal = _varint(buf, pos, record_end, 10)
            if pos < 0:
                return HAND_BACK
            delta, pos, _minimal = _varint(buf, pos, record_end, 5)
            if pos < 0 or delta <= previous or delta > last_delta:
                return HAND_BACK
            previous = delta
            key_len, after, _minimal = _field(buf, pos, record_end, True)
            if after < 0:
                return HAND_BACK
            value_len, pos, _minimal = _field(buf, after, record_end, True)
            if pos < 0:
                return HAND_BACK
            headers, pos, _minimal = _varint(buf, pos, record_end, 5)
            if pos < 0 or headers < 0:
                return HAND_BACK
            is_bare = value_len < 0 and headers == 0
            has_key = key_len >= 0
            if has_key:
                if not sha256.sha256_into(data, after - key_len, key_len, key_at, ctx):
                    return HAND_BACK
            if has_key and _kept(key, filtered, table, bits, hashes):
                if n == capacity:
                    return FULL
                position[n] = batch_position
                offset[n] = base_offset + delta
                header[n] = -1
                digest[n, :] = key
                key_digest[n, :] = key
                key_null[n] = False
                bare[n] = is_bare
                n += 1
            for _h in range(headers):
                name_len, after, _minimal = _field(buf, pos, record_end, False)
                if after < 0:
                    return HAND_BACK
                name_pos = after - name_len
                for j in range(name_pos, after):
                    if buf[j] >= 0x80:
                        return HAND_BACK
                value_len, pos, _minimal = _field(buf, after, record_end, True)
                if pos < 0:
                    return HAND_BACK
                if value_len < 0:
                    continue
                for w in range(len(name_starts)):
                    if name_lens[w] != name_len:
                        continue
                    same = True
                    for j in range(name_len):
                        if buf[name_pos + j] != names[name_starts[w] + j]:
                            same = False
                            break
                    if not same:
                        continue
                    if n == capacity:
                        return FULL
                    if not sha256.sha256_into(data, pos - value_len, value_len,
                                              digests + n * DIGEST_BYTES, ctx):
                        return HAND_BACK
                    if not _kept(digest[n], filtered, table, bits, hashes):
                        continue  # the next entry overwrites this digest
                    position[n] = batch_position
                    offset[n] = base_offset + delta
                    header[n] = w
                    if has_key:
                        key_digest[n, :] = key
                    else:
                        key_digest[n, :] = 0
                    key_null[n] = not has_key
                    bare[n] = is_bare
                    n += 1
            if pos != record_end:
                return HAND_BACK
        if pos != end:
            return HAND_BACK
    return n


#: the records sections a kernel call reads at most (decompressed), as the writer's chunks
CHUNK_BYTES = 16 * 1024 * 1024
_ROW = 6


def segment_digests(data: Any, path: str, segment_base: int, names: Sequence[str],
                    keep: DigestProbe | None = None) -> SubjectDigests | None:
    """:class:`SubjectDigests` of a whole segment, or ``None``: the pure scan reads it
    (``keep``: as :func:`compactor.cleaner.scan.subject_digests`, tested by the kernel as
    it digests, so an entry the filter rules out is never stored). The batch headers come
    from the writer's bulk reader (CRCs checked), the compressed sections are decompressed
    one by one, and the kernel reads up to :data:`CHUNK_BYTES` of sections a call: a chunk
    of uncompressed batches where they lie in the segment, else the chunk's sections joined."""
    if not sha256.available():
        return None
    headers = segment_headers(data, path, segment_base)
    if headers is None or any(h.magic < 2 for h in headers):
        return None
    view = memoryview(data)
    encoded = [n.encode() for n in names]
    joined = np.frombuffer(b"".join(encoded) + b"\0", np.uint8)
    lens = np.array([len(n) for n in encoded], np.int64)
    starts = np.cumsum(lens) - lens
    ctx = sha256.context()
    scratch = np.zeros(DIGEST_BYTES, np.uint8)
    filtered = keep is not None
    bits, table_bits, hashes = (keep.bits, keep.table, keep.hashes) if keep is not None else (
        1, np.zeros(1, np.uint8), 0)
    found: list[tuple[np.ndarray, ...]] = []
    records = 0
    # the segment itself, for a chunk of uncompressed batches: the kernel reads their records
    # where they lie (copying 64 MiB of sections a segment took 15-20 ms of its 100)
    whole = np.frombuffer(data, np.uint8)
    whole.flags.writeable = False  # the kernel is compiled for read-only bytes
    sections: list[bytes | memoryview] = []
    rows: list[tuple[int, ...]] = []
    at = 0
    compressed = False

    def digest_chunk() -> bool:
        nonlocal at, compressed
        if not rows:
            return True
        table = np.array(rows, np.int64).reshape(-1, _ROW)
        if compressed:
            buf = np.frombuffer(b"".join(sections), np.uint8)
        else:  # each row's section where it lies in the segment (its batch position on)
            buf = whole
            table[:, 0:2] += (table[:, 5] + RECORDS_OFFSET - table[:, 0])[:, None]
        entries = int(table[:, 2].sum()) * (2 if encoded else 1)
        # filtered, few entries are kept: room for 1 in 16 (more: 4x the room, the entries
        # so far copied over, and the kernel goes on from the batch that did not fit)
        capacity = max(16, entries // 16 if filtered else entries)
        columns = _entry_arrays(capacity)
        resume = np.zeros(2, np.int64)
        while True:
            n = _scan(buf, table, joined, starts, lens, ctx, filtered, table_bits, bits,
                      hashes, *columns, scratch, resume)
            if n != FULL:
                break
            capacity *= 4
            kept = int(resume[1])
            columns = tuple(_grown(c, capacity, kept) for c in columns)
        if n == HAND_BACK:
            return False
        # a few entries in large arrays: copied, so that the arrays are freed
        found.append(tuple(c[:n].copy() if n < capacity // 2 else c[:n] for c in columns))
        sections.clear()
        rows.clear()
        at = 0
        compressed = False
        return True

    for h in headers:
        if h.is_control:
            continue
        records += h.records_count
        section: bytes | memoryview = view[h.position + RECORDS_OFFSET:
                                           h.position + h.size_in_bytes]
        codec = view[h.position + ATTRIBUTES_OFFSET + 1] & CODEC_MASK
        if codec and h.records_count:
            try:
                section = decompress(codec, section)
            except DecompressionError:
                return None
            compressed = True
        sections.append(section)
        rows.append((at, at + len(section), h.records_count, h.last_offset - h.base_offset,
                     h.base_offset, h.position))
        at += len(section)
        if at >= CHUNK_BYTES and not digest_chunk():
            return None
    if not digest_chunk():
        return None
    empty = (np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int32),
             np.zeros((0, DIGEST_BYTES), np.uint8), np.zeros((0, DIGEST_BYTES), np.uint8),
             np.zeros(0, bool), np.zeros(0, bool))
    merged = [np.concatenate(parts) for parts in zip(*found, strict=True)] if found else empty
    return SubjectDigests(position=merged[0], offset=merged[1], header=merged[2],
                          digest=merged[3], key_digest=merged[4], key_null=merged[5],
                          bare=merged[6], names=tuple(names), batches=len(headers),
                          records=records, headers=headers)


def _entry_arrays(capacity: int) -> tuple[np.ndarray, ...]:
    """The arrays :func:`_scan` fills, room for ``capacity`` entries."""
    return (np.empty(capacity, np.int64), np.empty(capacity, np.int64),
            np.empty(capacity, np.int32), np.empty((capacity, DIGEST_BYTES), np.uint8),
            np.empty((capacity, DIGEST_BYTES), np.uint8), np.empty(capacity, bool),
            np.empty(capacity, bool))


def _grown(column: np.ndarray, capacity: int, kept: int) -> np.ndarray:
    """``column`` with room for ``capacity`` entries, its first ``kept`` copied over."""
    grown = np.empty((capacity, *column.shape[1:]), column.dtype)
    grown[:kept] = column[:kept]
    return grown


def compile_kernels() -> None:
    """Compile (or load from the disk cache) the erasure scan's kernel on empty input, with
    the argument types :func:`segment_digests` passes (its records buffer is always read-only
    bytes; ``filtered`` is a bool either way): a worker's first erasure then starts without
    LLVM. Nothing to do without libcrypto (the scan stays on the pure path)."""
    if not sha256.available():
        return
    ctx = sha256.context()
    names, lens = np.frombuffer(b"\0", np.uint8), np.zeros(0, np.int64)  # as segment_digests
    _scan(np.frombuffer(b"", np.uint8), np.zeros((0, _ROW), np.int64), names, lens, lens, ctx,
          True, np.zeros(8, np.uint8), 8, 1, *_entry_arrays(1), np.zeros(DIGEST_BYTES, np.uint8),
          np.zeros(2, np.int64))
    sha256.compile_kernels()
