"""The lz4 frame we write is the one Kafka's ``Lz4BlockOutputStream`` writes at the default level:
its fast compressor (not LZ4HC), 64 KiB independent blocks, an incompressible block stored raw,
no checksums, an empty end mark. The expected frame is assembled here from lz4's raw block
compressor and the frame format, not by :func:`compress`. The Kafka differential
(``tests/kafka/test_cleaner_differential.py``) checks the same against Kafka's own classes."""

from __future__ import annotations

import os
import random
import struct

import lz4.block
import pytest
import xxhash

from compactor.codec.compression import DEFAULT_LEVELS, Codec, compress, decompress

_WORDS = (b"alpha", b"beta", b"gamma", b"kafka", b"offset", b"segment")
# three blocks, the last one short; lz4's fast compressor and LZ4HC give other bytes for it
_TEXT = b" ".join(random.Random(7).choices(_WORDS, k=30_000))
_FLG_INDEPENDENT_BLOCKS = 0x60  # version 01, block independence, nothing else
_BD_64KB = 0x40


def _kafka_default_frame(data: bytes) -> bytes:
    descriptor = bytes([_FLG_INDEPENDENT_BLOCKS, _BD_64KB])
    checksum = (xxhash.xxh32_intdigest(descriptor) >> 8) & 0xFF
    out = [b"\x04\x22\x4d\x18", descriptor, bytes([checksum])]
    for start in range(0, len(data), 64 * 1024):
        block = data[start:start + 64 * 1024]
        packed = lz4.block.compress(block, mode="default", store_size=False)
        if len(packed) >= len(block):  # stored as is, the high bit set
            out += [struct.pack("<I", len(block) | 0x80000000), block]
        else:
            out += [struct.pack("<I", len(packed)), packed]
    out.append(struct.pack("<I", 0))
    return b"".join(out)


@pytest.mark.parametrize("data", [
    b"",
    b"k" * 200 + b"v" * 300,
    _TEXT,
    os.urandom(70 * 1024),  # incompressible: blocks stored raw
], ids=["empty", "small", "three-blocks", "incompressible"])
def test_lz4_at_kafkas_default_level_is_its_fast_compressors_frame(data: bytes) -> None:
    frame = compress(Codec.LZ4, data)
    assert frame == _kafka_default_frame(data)
    assert frame == compress(Codec.LZ4, data, level=DEFAULT_LEVELS[Codec.LZ4])
    assert decompress(Codec.LZ4, frame) == data


def test_other_lz4_levels_are_lz4hc_and_levels_one_and_two_are_refused() -> None:
    data = _TEXT
    hc = compress(Codec.LZ4, data, level=12)
    assert hc != _kafka_default_frame(data) and len(hc) < len(_kafka_default_frame(data))
    assert decompress(Codec.LZ4, hc) == data
    for level in (1, 2):  # LZ4HC in lz4-java, the fast compressor in python-lz4's frame
        with pytest.raises(ValueError, match="LZ4HC"):
            compress(Codec.LZ4, data, level=level)
