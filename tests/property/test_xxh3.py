"""The XXH3-128 kernel (``compactor/native/xxh3.py``) against the ``xxhash`` library, over
every length class of the algorithm, at any position of a buffer."""

from __future__ import annotations

import numpy as np
import xxhash
from hypothesis import example, given, settings
from hypothesis import strategies as st

from compactor.native.xxh3 import xxh3_128

# 0, 1-3, 4-8, 9-16, 17-128, 129-240, then blocks of 1 KiB (stripes of 64 bytes)
BOUNDS = [0, 1, 3, 4, 8, 9, 16, 17, 32, 33, 128, 129, 240, 241, 256, 1023, 1024, 1025, 2048,
          2049, 3100]


def _digest(data: bytes, prefix: int) -> int:
    buf = np.frombuffer(bytes(prefix) + data + b"\xff", np.uint8)
    low, high = xxh3_128(buf, prefix, len(data))
    return (int(high) << 64) | int(low)


@settings(max_examples=400, deadline=None)
@given(data=st.one_of(st.binary(max_size=300), st.binary(min_size=240, max_size=3200)),
       prefix=st.integers(0, 9))
@example(data=b"", prefix=0)
def test_xxh3_128_equals_the_library(data: bytes, prefix: int) -> None:
    assert _digest(data, prefix) == xxhash.xxh3_128_intdigest(data)


def test_every_length_class_boundary() -> None:
    rng = np.random.default_rng(7)
    for n in BOUNDS:
        for fill in (bytes(n), b"\xff" * n, rng.bytes(n)):
            assert _digest(fill, 3) == xxhash.xxh3_128_intdigest(fill), n
