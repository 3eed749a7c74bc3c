"""Zig-zag base-128 varints as used inside v2 records (Kafka's ``ByteUtils.writeVarint``).

``encode`` writes signed values (protobuf ``sint32``/``sint64``): ``(n << 1) ^ (n >> 63)``, then
7 bits per byte, least-significant group first, high bit set on every byte but the last. ``-1`` is
``0x01``, ``0`` is ``0x00``, ``10`` is ``0x14``. The hot decode path lives in aiokafka's compiled
reader; this module serves the writer, the legacy-free parts of the reader and the tests.
"""

from __future__ import annotations

# A zig-zag varlong needs at most 10 bytes; Kafka rejects longer encodings.
MAX_VARLONG_BYTES = 10


def encode_unsigned(unsigned: int) -> bytes:
    """An unsigned varint, 7 bits a byte, low bits first (Kafka's ``writeUnsignedVarint``:
    the frame and lengths of KRaft metadata records; zig-zag values below)."""
    out = bytearray()
    while unsigned >= 0x80:
        out.append((unsigned & 0x7F) | 0x80)
        unsigned >>= 7
    out.append(unsigned)
    return bytes(out)


# The writer's hot path works 14 bits at a time from two tables: the encodings of the
# zig-zag values below 2**14 (lengths, offset deltas, header counts: one lookup), and the
# two continuation bytes of every 14-bit group (timestamp deltas against a delete horizon).
_SMALL_LIMIT = 1 << 14
_SMALL = [encode_unsigned(u) for u in range(_SMALL_LIMIT)]
_GROUP14 = [bytes(((u & 0x7F) | 0x80, (u >> 7) | 0x80)) for u in range(_SMALL_LIMIT)]
_TWO_GROUPS_LIMIT = 1 << 28

# For callers that inline the commonest case: ``SMALL[n << 1]`` is ``encode(n)`` for
# ``0 <= n < SMALL_NON_NEGATIVE``.
SMALL = _SMALL
SMALL_NON_NEGATIVE = _SMALL_LIMIT >> 1


def encode(value: int) -> bytes:
    """Encode a signed 64-bit integer as a zig-zag varint."""
    unsigned = (value << 1) ^ (value >> 63)
    if 0 <= unsigned < _SMALL_LIMIT:
        return _SMALL[unsigned]
    if 0 <= unsigned < _TWO_GROUPS_LIMIT:  # e.g. timestamp deltas against a delete horizon
        return _GROUP14[unsigned & 0x3FFF] + _SMALL[unsigned >> 14]
    if 0 <= unsigned < 1 << 64:
        parts = []
        while unsigned >= _SMALL_LIMIT:
            parts.append(_GROUP14[unsigned & 0x3FFF])
            unsigned >>= 14
        parts.append(_SMALL[unsigned])
        return b"".join(parts)
    if not -(1 << 63) <= value < (1 << 63):
        raise ValueError(f"varint value {value} does not fit in 64 bits")
    return encode_unsigned(((value << 1) ^ (value >> 63)) & 0xFFFFFFFFFFFFFFFF)


def decode(data: bytes | bytearray | memoryview, pos: int) -> tuple[int, int]:
    """Decode one zig-zag varint starting at ``pos``.

    Returns:
        ``(value, next_pos)``.

    Raises:
        ValueError: the bytes end inside the varint or it is longer than 10 bytes.
    """
    unsigned = 0
    shift = 0
    end = len(data)
    for i in range(MAX_VARLONG_BYTES):
        if pos >= end:
            raise ValueError(f"varint runs past the end of the buffer at byte {pos}")
        byte = data[pos]
        pos += 1
        unsigned |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return (unsigned >> 1) ^ -(unsigned & 1), pos
        shift += 7
        del i
    raise ValueError(f"varint longer than {MAX_VARLONG_BYTES} bytes ending at byte {pos}")
