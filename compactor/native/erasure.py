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

import numba
import numpy as np

from compactor.cleaner.rewrite import BatchDigests
from compactor.codec.compression import DecompressionError, decompress
from compactor.codec.records import RECORDS_OFFSET, RecordBatch
from compactor.native import sha256
from compactor.native.kernels import _field, _varint

DIGEST_BYTES = sha256.DIGEST_BYTES
#: kernel results besides an entry count
HAND_BACK = -1  # the pure path decodes the batch
FULL = -2  # more entries than the arrays hold: call again with larger ones


@numba.njit(cache=True)
def _scan(buf: np.ndarray, end: int, count: int, last_delta: int, base_offset: int,
          names: np.ndarray, name_starts: np.ndarray, name_lens: np.ndarray, ctx: int, md: int,
          offset: np.ndarray, header: np.ndarray, digest: np.ndarray, key_digest: np.ndarray,
          key_null: np.ndarray, bare: np.ndarray, key: np.ndarray) -> int:
    """The entries of the ``count`` records in ``buf[:end]`` into the arrays (``key``: 32
    bytes of scratch); returns how many, or :data:`HAND_BACK`, :data:`FULL`."""
    data = buf.ctypes.data
    key_at = key.ctypes.data
    digests = digest.ctypes.data
    capacity = len(offset)
    n = 0
    pos = 0
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
            if not sha256.sha256_into(data, after - key_len, key_len, key_at, ctx, md):
                return HAND_BACK
            if n == capacity:
                return FULL
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
                                          digests + n * DIGEST_BYTES, ctx, md):
                    return HAND_BACK
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


def batch_digests(batch: RecordBatch, names: Sequence[bytes]) -> BatchDigests | None:
    """:class:`BatchDigests` of one v2 data batch, or ``None`` (the pure path's)."""
    if batch.magic < 2 or batch.legacy_records is not None or not sha256.available():
        return None
    section: bytes | memoryview = memoryview(batch.raw)[RECORDS_OFFSET:]
    if batch.compression:
        try:
            section = decompress(batch.compression, section)
        except DecompressionError:
            return None
    buf = np.frombuffer(section, np.uint8)
    joined = np.frombuffer(b"".join(names) + b"\0", np.uint8)
    lens = np.array([len(n) for n in names], np.int64)
    starts = np.cumsum(lens) - lens
    count = batch.records_count
    capacity = max(16, count * (2 if names else 1))
    ctx, md = sha256.context()
    key = np.zeros(DIGEST_BYTES, np.uint8)
    while True:
        offset = np.zeros(capacity, np.int64)
        header = np.zeros(capacity, np.int32)
        digest = np.zeros((capacity, DIGEST_BYTES), np.uint8)
        key_digest = np.zeros((capacity, DIGEST_BYTES), np.uint8)
        key_null = np.zeros(capacity, bool)
        bare = np.zeros(capacity, bool)
        n = _scan(buf, len(buf), count, batch.last_offset_delta, batch.base_offset, joined,
                  starts, lens, ctx, md, offset, header, digest, key_digest, key_null, bare,
                  key)
        if n == FULL:
            capacity *= 4
            continue
        if n == HAND_BACK:
            return None
        return BatchDigests(offset=offset[:n], header=header[:n], digest=digest[:n],
                            key_digest=key_digest[:n], key_null=key_null[:n], bare=bare[:n],
                            records=count)
