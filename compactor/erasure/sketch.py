"""A Bloom filter of the pending subjects' SHA-256 digests, so that an erasure scan sends to
the join (:func:`compactor.spark.stages.erasure_matches`) only the records that may match,
instead of one row per record of the log. Built on the driver as the ledger's summary streams
the requests (:func:`compactor.erasure.ledger.pending_summary`), broadcast, and tested by the
scan's kernel a digest at a time (:func:`may_hold`) or by the pure scan a batch at a time
(:class:`Probe`). Its size is ``bits_per_subject`` bits a subject (about 2.4 MB for a million
at a false positive rate of 1 in 10,000), and it holds no digest, only bits. A false positive
costs a row in the join, never a wrong erasure: the join compares the full digests; a false
negative cannot happen (every added digest sets all its bits).

The digests are uniform (SHA-256), so the filter's ``k`` positions come from the digest's
own first two 64-bit words by double hashing (Kirsch and Mitzenmacher, "Less hashing, same
performance", 2006).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

#: the filter's false positive rate: at 10 M records, about 1,000 extra rows in the join
FALSE_POSITIVE_RATE = 1e-4
DIGEST_BYTES = 32


def size_for(subjects: int, rate: float = FALSE_POSITIVE_RATE) -> tuple[int, int]:
    """``(bits, hashes)`` of a filter for ``subjects`` digests at ``rate``: ``-n ln p / ln² 2``
    bits (a multiple of 8, at least 8,192) and ``log2 1/p`` hashes, the optimum for that
    size (a filter made larger by the floor only gets fewer false positives)."""
    n = max(1, subjects)
    bits = max(8192, math.ceil(-n * math.log(rate) / math.log(2) ** 2))
    bits = (bits + 7) // 8 * 8
    hashes = max(1, round(-math.log2(rate)))
    return bits, hashes


def _positions(digests: np.ndarray, bits: int, hashes: int) -> np.ndarray:
    """``(hashes, n)`` bit positions of ``n`` digests (rows of 4 uint64 words): the rule of
    :func:`may_hold`, over arrays."""
    h1 = digests[:, 0] % np.uint64(bits)
    h2 = (digests[:, 1] | np.uint64(1)) % np.uint64(bits)
    i = np.arange(hashes, dtype=np.uint64)[:, None]
    return (h1[None, :] + i * h2[None, :]) % np.uint64(bits)


def may_hold(table: np.ndarray, bits: int, hashes: int, w0: np.uint64, w1: np.uint64) -> bool:
    """Whether the filter whose packed bits are ``table`` (uint8, ``numpy.packbits`` order:
    bit ``p`` is bit ``7 - p % 8`` of byte ``p // 8``) may hold the digest whose first two
    little-endian 64-bit words are ``w0`` and ``w1``: bit ``(h1 + i * h2) % bits`` set for
    every ``i < hashes`` (``h1 = w0 % bits``, ``h2 = (w1 | 1) % bits``), stopping at the
    first clear bit. Scalar, so the native scan (:mod:`compactor.native.erasure`) compiles
    it into its kernel and tests a record's digest as it makes it; ``tests/unit/
    test_sketch.py`` holds it equal to :func:`_positions`' arrays. The bits stay packed: a
    million subjects' filter is 2.4 MB, where one byte a bit (19 MB) missed the CPU's caches
    on almost every lookup and cost a 10 M-record scan 0.7 s (docs/benchmarks-history.md)."""
    size = np.uint64(bits)
    h1 = np.uint64(w0) % size
    h2 = (np.uint64(w1) | np.uint64(1)) % size
    for i in range(hashes):
        p = (h1 + np.uint64(i) * h2) % size
        if (table[p >> np.uint64(3)] >> (np.uint64(7) - (p & np.uint64(7)))) & np.uint8(1) == 0:
            return False
    return True


def _words(digests: Sequence[bytes] | np.ndarray) -> np.ndarray:
    """Rows of 4 uint64 words: from 32-byte digests (bytes, or rows of 32 uint8), or already
    such rows."""
    if isinstance(digests, np.ndarray):
        return digests.view("<u8").reshape(-1, 4) if digests.dtype == np.uint8 else digests
    return np.frombuffer(b"".join(digests), dtype="<u8").reshape(-1, 4)


def hex_digest_text(column: Any) -> str | None:
    """The text of an Arrow string column (``string`` or ``large_string``, one chunk) whose
    every value is 64 characters and none null, read from its data buffer at once; ``None``
    when some value is null or of another length, or the text is not ASCII."""
    import pyarrow as pa

    large = pa.types.is_large_string(column.type)
    if column.null_count or not (large or pa.types.is_string(column.type)):
        return None
    if len(column) == 0:
        return ""
    offsets = np.frombuffer(column.buffers()[1], dtype=np.int64 if large else np.int32)[
        column.offset:column.offset + len(column) + 1]
    if not np.all(np.diff(offsets) == 2 * DIGEST_BYTES):
        return None
    try:
        return str(memoryview(column.buffers()[2])[int(offsets[0]):int(offsets[-1])], "ascii")
    except UnicodeDecodeError:
        return None


def hex_digest_words(column: Any) -> np.ndarray:
    """The values of an Arrow string column of SHA-256 digests in hex (64 lower-case hex
    digits each, as the ledger keeps them, checked before) as rows of 4 uint64 words, decoded
    from its data buffer at once (:func:`hex_digest_text`; no Python object per digest).

    Raises:
        ValueError: a value is null or not 64 hex digits.
    """
    import pyarrow as pa

    values = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    text = hex_digest_text(values)
    if text is None:
        raise ValueError("a digest is null or not 64 hex digits")
    return np.frombuffer(bytes.fromhex(text), dtype="<u8").reshape(-1, 4)


@dataclass(frozen=True, slots=True)
class DigestFilter:
    """The filter: ``packed`` holds ``bits`` bits (``numpy.packbits`` order)."""

    packed: bytes
    bits: int
    hashes: int

    @classmethod
    def empty(cls, subjects: int) -> DigestFilter:
        bits, hashes = size_for(subjects)
        return cls(bytes(bits // 8), bits, hashes)

    def adding(self, digests: Sequence[bytes] | np.ndarray) -> DigestFilter:
        """This filter with ``digests`` (32 bytes each, or rows of :func:`hex_digest_words`)
        added."""
        builder = self.building()
        builder.add(digests)
        return builder.done()

    def building(self) -> FilterBuilder:
        """A builder that adds many batches of digests to this filter, unpacked once."""
        return FilterBuilder(self.table(), self.bits, self.hashes)

    def table(self) -> np.ndarray:
        """One byte per bit, for lookups over many batches."""
        return np.unpackbits(np.frombuffer(self.packed, dtype=np.uint8))

    def probe(self) -> Probe:
        """This filter's packed bits, for the lookups of a whole scan: a writable array (the
        type the native scan's kernel is compiled for ahead of time; a read-only view of the
        bytes compiled it again in every worker)."""
        return Probe(np.frombuffer(bytearray(self.packed), dtype=np.uint8), self.bits,
                     self.hashes)

    def might_contain(self, digests: Sequence[bytes] | np.ndarray) -> np.ndarray:
        """Per digest (32 bytes each, or rows of :func:`hex_digest_words`), whether it may be in
        the filter (``False``: certainly not)."""
        return self.probe().might_contain(digests)


@dataclass(frozen=True, slots=True)
class Probe:
    """A :class:`DigestFilter` for lookups: ``table`` holds its packed bits (uint8). The
    pure scan asks :meth:`might_contain` of a batch's digests at once; the native scan reads
    ``table``, ``bits`` and ``hashes`` into its kernel (:func:`may_hold`)."""

    table: np.ndarray
    bits: int
    hashes: int

    def might_contain(self, digests: Sequence[bytes] | np.ndarray) -> np.ndarray:
        """Per digest (32 bytes each, or rows of 4 uint64 words), whether it may be in the
        filter."""
        if len(digests) == 0:
            return np.zeros(0, dtype=bool)
        at = _positions(_words(digests), self.bits, self.hashes)
        found = (self.table[at >> np.uint64(3)] >> (np.uint64(7) - (at & np.uint64(7)))) & 1
        return np.all(found == 1, axis=0)


class FilterBuilder:
    """A :class:`DigestFilter` being built: its bits one byte each until :meth:`done` packs
    them (a filter sized for a million subjects is 2.4 MB packed, 19 MB unpacked: unpacked
    once, not once a batch)."""

    def __init__(self, table: np.ndarray, bits: int, hashes: int) -> None:
        self._table, self._bits, self._hashes = table, bits, hashes

    def add(self, digests: Sequence[bytes] | np.ndarray) -> None:
        """Set the bits of ``digests``. Threads may add at once: each only ever stores 1 into
        bytes of the unpacked table, so no store undoes another's."""
        if len(digests):
            self._table[_positions(_words(digests), self._bits, self._hashes).ravel()] = 1

    def done(self) -> DigestFilter:
        return DigestFilter(np.packbits(self._table).tobytes(), self._bits, self._hashes)
