"""XXH3-128 (seed 0, the default secret) as a numba kernel: the key digest of the offset map
(:func:`compactor.cleaner.scan.key_digest`, which the ``xxhash`` library computes one key at
a time) for keys that are slices of a segment's bytes, so the key scan digests a whole batch
without a Python object per key.

Written from the algorithm's specification (``doc/xxhash_spec.md`` of the xxHash project,
sections "XXH3 algorithm description" for small, medium and large inputs); the property
tests compare it with the ``xxhash`` library byte for byte over every length class
(0, 1-3, 4-8, 9-16, 17-128, 129-240 and more than 240 bytes, several 1 KiB blocks).

numba has no 128-bit integer: :func:`_mul128` multiplies two 64-bit values into their 128-bit
product from 32-bit halves. Every value here is ``uint64`` and wraps as the C code does.
"""

from __future__ import annotations

import numpy as np

from compactor.native.cache import kernel

_SECRET = np.frombuffer(bytes.fromhex(
    "b8fe6c3923a44bbe7c01812cf721ad1cded46de9839097db7240a4a4b7b3671f"
    "cb79e64eccc0e578825ad07dccff7221b8084674f743248ee03590e6813a264c"
    "3c2852bb91c300cb88d0658b1b532ea371644897a20df94e3819ef46a9deacd8"
    "a8fa763fe39c343ff9dcbbc7c70b4f1d8a51e04bcdb45931c89f7ec9d9787364"
    "eac5ac8334d3ebc3c581a0fffa1363eb170ddd51b7f0da49d316552629d4689e"
    "2b16be587d47a1fc8ff8b8d17ad031ce45cb3a8f95160428afd7fbcabb4b407e"), np.uint8)
_SECRET_LEN = 192
_STRIPES_PER_BLOCK = (_SECRET_LEN - 64) // 8  # 16
_BLOCK = 64 * _STRIPES_PER_BLOCK  # 1024 bytes

_P32_1 = np.uint64(0x9E3779B1)
_P32_2 = np.uint64(0x85EBCA77)
_P32_3 = np.uint64(0xC2B2AE3D)
_P64_1 = np.uint64(0x9E3779B185EBCA87)
_P64_2 = np.uint64(0xC2B2AE3D27D4EB4F)
_P64_3 = np.uint64(0x165667B19E3779F9)
_P64_4 = np.uint64(0x85EBCA77C2B2AE63)
_P64_5 = np.uint64(0x27D4EB2F165667C5)
_MX1 = np.uint64(0x165667919E3779F9)
_MX2 = np.uint64(0x9FB21C651E98DF25)
_M32 = np.uint64(0xFFFFFFFF)


@kernel(inline="always")
def _read64(buf: np.ndarray, pos: int) -> np.uint64:
    """A little-endian 64-bit value."""
    v = np.uint64(0)
    for i in range(7, -1, -1):
        v = (v << np.uint64(8)) | np.uint64(buf[pos + i])
    return v


@kernel(inline="always")
def _read32(buf: np.ndarray, pos: int) -> np.uint64:
    """A little-endian 32-bit value."""
    return (np.uint64(buf[pos]) | (np.uint64(buf[pos + 1]) << np.uint64(8))
            | (np.uint64(buf[pos + 2]) << np.uint64(16))
            | (np.uint64(buf[pos + 3]) << np.uint64(24)))


@kernel(inline="always")
def _mul128(a: np.uint64, b: np.uint64) -> tuple[np.uint64, np.uint64]:
    """``(low, high)`` 64-bit halves of the 128-bit product ``a * b``."""
    a_lo, a_hi = a & _M32, a >> np.uint64(32)
    b_lo, b_hi = b & _M32, b >> np.uint64(32)
    lo_lo = a_lo * b_lo
    hi_lo = a_hi * b_lo
    lo_hi = a_lo * b_hi
    hi_hi = a_hi * b_hi
    cross = (lo_lo >> np.uint64(32)) + (hi_lo & _M32) + lo_hi
    upper = (hi_lo >> np.uint64(32)) + (cross >> np.uint64(32)) + hi_hi
    lower = (cross << np.uint64(32)) | (lo_lo & _M32)
    return lower, upper


@kernel(inline="always")
def _fold(a: np.uint64, b: np.uint64) -> np.uint64:
    lo, hi = _mul128(a, b)
    return lo ^ hi


@kernel(inline="always")
def _swap32(x: np.uint64) -> np.uint64:
    return (((x & np.uint64(0xFF)) << np.uint64(24)) | ((x & np.uint64(0xFF00)) << np.uint64(8))
            | ((x >> np.uint64(8)) & np.uint64(0xFF00)) | ((x >> np.uint64(24)) & np.uint64(0xFF)))


@kernel(inline="always")
def _swap64(x: np.uint64) -> np.uint64:
    return (_swap32(x & _M32) << np.uint64(32)) | _swap32(x >> np.uint64(32))


@kernel(inline="always")
def _avalanche(x: np.uint64) -> np.uint64:
    x ^= x >> np.uint64(37)
    x *= _MX1
    return x ^ (x >> np.uint64(32))


@kernel(inline="always")
def _avalanche64(x: np.uint64) -> np.uint64:
    x ^= x >> np.uint64(33)
    x *= _P64_2
    x ^= x >> np.uint64(29)
    x *= _P64_3
    return x ^ (x >> np.uint64(32))


@kernel(inline="always")
def _mix16(buf: np.ndarray, pos: int, s: int) -> np.uint64:
    """``mixStep`` of 16 input bytes at ``pos`` with the secret at ``s`` (seed 0)."""
    return _fold(_read64(buf, pos) ^ _read64(_SECRET, s),
                 _read64(buf, pos + 8) ^ _read64(_SECRET, s + 8))


@kernel(inline="always")
def _mix32(a0: np.uint64, a1: np.uint64, buf: np.ndarray, p1: int, p2: int,
           s: int) -> tuple[np.uint64, np.uint64]:
    """``mixTwoChunks``: the two accumulators after mixing 16 bytes at ``p1`` and at ``p2``."""
    a0 += _mix16(buf, p1, s)
    a1 += _mix16(buf, p2, s + 16)
    a0 ^= _read64(buf, p2) + _read64(buf, p2 + 8)
    a1 ^= _read64(buf, p1) + _read64(buf, p1 + 8)
    return a0, a1


@kernel
def _long(buf: np.ndarray, pos: int, n: int) -> tuple[np.uint64, np.uint64]:
    """More than 240 bytes: 8 accumulators over 64-byte stripes, 1 KiB blocks."""
    acc = np.empty(8, np.uint64)
    acc[0], acc[1], acc[2], acc[3] = _P32_3, _P64_1, _P64_2, _P64_3
    acc[4], acc[5], acc[6], acc[7] = _P64_4, _P32_2, _P64_5, _P32_1
    blocks = (n - 1) // _BLOCK
    for b in range(blocks):
        for s in range(_STRIPES_PER_BLOCK):
            _accumulate(acc, buf, pos + b * _BLOCK + s * 64, s * 8)
        for i in range(8):
            a = acc[i]
            a ^= a >> np.uint64(47)
            a ^= _read64(_SECRET, _SECRET_LEN - 64 + 8 * i)
            acc[i] = a * _P32_1
    last = pos + blocks * _BLOCK
    stripes = (n - blocks * _BLOCK - 1) // 64
    for s in range(stripes):
        _accumulate(acc, buf, last + s * 64, s * 8)
    _accumulate(acc, buf, pos + n - 64, _SECRET_LEN - 71)
    length = np.uint64(n)
    low = _merge(acc, length * _P64_1, 11)
    high = _merge(acc, ~(length * _P64_2), _SECRET_LEN - 75)
    return low, high


@kernel(inline="always")
def _accumulate(acc: np.ndarray, buf: np.ndarray, pos: int, s: int) -> None:
    for i in range(8):
        lane = _read64(buf, pos + 8 * i)
        value = lane ^ _read64(_SECRET, s + 8 * i)
        acc[i ^ 1] += lane
        acc[i] += (value & _M32) * (value >> np.uint64(32))


@kernel(inline="always")
def _merge(acc: np.ndarray, start: np.uint64, s: int) -> np.uint64:
    result = start
    for i in range(4):
        result += _fold(acc[2 * i] ^ _read64(_SECRET, s + 16 * i),
                        acc[2 * i + 1] ^ _read64(_SECRET, s + 16 * i + 8))
    return _avalanche(result)


@kernel
def xxh3_128(buf: np.ndarray, pos: int, n: int) -> tuple[np.uint64, np.uint64]:
    """``(low, high)`` 64-bit halves of XXH3-128 of ``buf[pos:pos + n]`` (seed 0)."""
    length = np.uint64(n)
    if n == 0:
        return (_avalanche64(_read64(_SECRET, 64) ^ _read64(_SECRET, 72)),
                _avalanche64(_read64(_SECRET, 80) ^ _read64(_SECRET, 88)))
    if n <= 3:
        combined = (np.uint64(buf[pos + n - 1]) | (length << np.uint64(8))
                    | (np.uint64(buf[pos]) << np.uint64(16))
                    | (np.uint64(buf[pos + (n >> 1)]) << np.uint64(24)))
        swapped = _swap32(combined)
        rotated = ((swapped << np.uint64(13)) | (swapped >> np.uint64(19))) & _M32
        low = (_read32(_SECRET, 0) ^ _read32(_SECRET, 4)) ^ combined
        high = ((_read32(_SECRET, 8) ^ _read32(_SECRET, 12))) ^ rotated
        return _avalanche64(low), _avalanche64(high)
    if n <= 8:
        first = _read32(buf, pos)
        last = _read32(buf, pos + n - 4)
        combined = first | (last << np.uint64(32))
        value = (_read64(_SECRET, 16) ^ _read64(_SECRET, 24)) ^ combined
        low, high = _mul128(value, _P64_1 + (length << np.uint64(2)))
        high += low << np.uint64(1)
        low ^= high >> np.uint64(3)
        low ^= low >> np.uint64(35)
        low *= _MX2
        low ^= low >> np.uint64(28)
        return low, _avalanche(high)
    if n <= 16:
        first = _read64(buf, pos)
        last = _read64(buf, pos + n - 8)
        val1 = (_read64(_SECRET, 32) ^ _read64(_SECRET, 40)) ^ first ^ last
        val2 = (_read64(_SECRET, 48) ^ _read64(_SECRET, 56)) ^ last
        low, high = _mul128(val1, _P64_1)
        low += (length - np.uint64(1)) << np.uint64(54)
        high += val2 + (val2 & _M32) * (_P32_2 - np.uint64(1))
        low ^= _swap64(high)
        low2, high2 = _mul128(low, _P64_2)
        high2 += high * _P64_2
        return _avalanche(low2), _avalanche(high2)
    if n > 240:
        return _long(buf, pos, n)
    a0 = length * _P64_1
    a1 = np.uint64(0)
    if n <= 128:
        for i in range((n - 1) >> 5, -1, -1):
            a0, a1 = _mix32(a0, a1, buf, pos + 16 * i, pos + n - 16 * i - 16, 32 * i)
    else:
        for i in range(4):
            a0, a1 = _mix32(a0, a1, buf, pos + 32 * i, pos + 32 * i + 16, 32 * i)
        a0, a1 = _avalanche(a0), _avalanche(a1)
        for i in range(4, n >> 5):
            a0, a1 = _mix32(a0, a1, buf, pos + 32 * i, pos + 32 * i + 16, 32 * (i - 4) + 3)
        a0, a1 = _mix32(a0, a1, buf, pos + n - 16, pos + n - 32, 103)
    low = a0 + a1
    high = a0 * _P64_1 + a1 * _P64_4 + length * _P64_2
    return _avalanche(low), np.uint64(0) - _avalanche(high)
