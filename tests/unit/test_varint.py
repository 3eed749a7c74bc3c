from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from compactor.codec import varint
from tests.helpers import varint_size

VECTORS = [
    (0, b"\x00"),
    (-1, b"\x01"),
    (1, b"\x02"),
    (10, b"\x14"),
    (-64, b"\x7f"),
    (64, b"\x80\x01"),
    (300, b"\xd8\x04"),
    (2**31 - 1, b"\xfe\xff\xff\xff\x0f"),
    (-(2**31), b"\xff\xff\xff\xff\x0f"),
    (2**63 - 1, b"\xfe\xff\xff\xff\xff\xff\xff\xff\xff\x01"),
    (-(2**63), b"\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01"),
]


@pytest.mark.parametrize(("value", "encoded"), VECTORS)
def test_vectors(value: int, encoded: bytes) -> None:
    assert varint.encode(value) == encoded
    assert varint_size(value) == len(encoded)
    assert varint.decode(b"\xaa" + encoded + b"\xbb", 1) == (value, 1 + len(encoded))


@given(st.integers(min_value=-(2**63), max_value=2**63 - 1))
def test_roundtrip(value: int) -> None:
    encoded = varint.encode(value)
    assert varint.decode(encoded, 0) == (value, len(encoded))


def test_truncated_and_overlong_are_rejected() -> None:
    with pytest.raises(ValueError, match="past the end"):
        varint.decode(b"\x80\x80", 0)
    with pytest.raises(ValueError, match="longer than 10"):
        varint.decode(b"\x80" * 11, 0)
    with pytest.raises(ValueError, match="64 bits"):
        varint.encode(2**63)


@pytest.mark.parametrize("value", [v + d for v in (1 << 13, -(1 << 13), 1 << 27, -(1 << 27),
                                                   -86_400_000, 1 << 41)
                                   for d in (-1, 0, 1)])
def test_table_boundaries_equal_the_byte_at_a_time_encoding(value: int) -> None:
    unsigned = ((value << 1) ^ (value >> 63)) & 0xFFFFFFFFFFFFFFFF
    expected = bytearray()
    while unsigned >= 0x80:
        expected.append((unsigned & 0x7F) | 0x80)
        unsigned >>= 7
    expected.append(unsigned)
    assert varint.encode(value) == bytes(expected)
    assert varint.decode(varint.encode(value), 0) == (value, len(expected))
