"""The kernels' SHA-256 (:mod:`compactor.native.sha256`, OpenSSL's, called from numba) against
``hashlib``: every length around the one- and two-block padding boundaries, and random
values, digested in one kernel call as the erasure scan digests a batch's keys."""

from __future__ import annotations

import hashlib

from hypothesis import given
from hypothesis import strategies as st

from compactor.native import sha256


def test_libcrypto_is_here() -> None:
    assert sha256.available()  # Debian's libssl3, which Python's hashlib links too


def test_every_padding_boundary_equals_hashlib() -> None:
    values = [bytes((i * 131 + n) % 256 for i in range(n))
              for n in (*range(0, 130), 1000, 4096, 100_003)]
    assert sha256.sha256(values) == [hashlib.sha256(v).digest() for v in values]


@given(st.lists(st.binary(max_size=300), max_size=40))
def test_random_values_equal_hashlib(values: list[bytes]) -> None:
    assert sha256.sha256(values) == [hashlib.sha256(v).digest() for v in values]
