"""SHA-256 for the numba kernels: OpenSSL's (libcrypto, the library Python's own ``hashlib`` is
built on), called from inside a kernel, so the erasure scan digests every key of a batch
without a Python object per record (:mod:`compactor.native.erasure`).

The kernels call libcrypto's ``EVP_DigestInit_ex2``, ``EVP_DigestUpdate`` and
``EVP_DigestFinal_ex`` by name (numba's ``ExternalFunction``, resolved when the compiled code is
loaded, so numba's disk cache keeps it) with one digest context a process: OpenSSL's one-shot
``SHA256()`` fetches the algorithm on every call, which costs more than the digest of a short
key. With the CPU's SHA extensions a 12-byte key takes about 120 ns here, against 550 ns for a
``hashlib.sha256(key).digest()`` in a Python loop (29 Nov, 2 cores).

:func:`available` says whether libcrypto 3 was found; without it the erasure scan stays on the
pure path (``hashlib``), which is also the reference the tests compare with
(``tests/property/test_sha256.py``).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import threading
from typing import Any

import llvmlite.binding as llvm
import numpy as np
from numba import types

from compactor.native.cache import kernel

DIGEST_BYTES = 32
_SIGNATURE = types.int32(types.intp, types.intp, types.intp)
_LIBRARY = ctypes.util.find_library("crypto")
_lock = threading.Lock()
_context: tuple[int, int] | None = None


def _load() -> ctypes.CDLL | None:
    """libcrypto 3 (the EVP calls the kernels make exist since OpenSSL 3.0), loaded into the
    process for the kernels' symbols; None when it is not there."""
    if _LIBRARY is None:
        return None
    try:
        lib = ctypes.CDLL(_LIBRARY)
        lib.EVP_DigestInit_ex2  # noqa: B018 - an attribute error: not OpenSSL 3
    except (OSError, AttributeError):
        return None
    llvm.load_library_permanently(_LIBRARY)
    return lib


_lib = _load()
# called from kernels only (numba types, which a type checker cannot call)
digest_init: Any = types.ExternalFunction("EVP_DigestInit_ex2", _SIGNATURE)
digest_update: Any = types.ExternalFunction("EVP_DigestUpdate", _SIGNATURE)
digest_final: Any = types.ExternalFunction("EVP_DigestFinal_ex", _SIGNATURE)


def available() -> bool:
    return _lib is not None


def context() -> tuple[int, int]:
    """This process's ``(EVP_MD_CTX*, EVP_MD*)`` for SHA-256, made once; a kernel takes them
    as integers. The kernels run in one thread of a Python worker at a time (the GIL is held
    while they run), so one context serves them all.

    Raises:
        RuntimeError: libcrypto is not available (:func:`available`).
    """
    global _context
    with _lock:
        if _context is None:
            if _lib is None:
                raise RuntimeError("libcrypto (OpenSSL 3) is not available")
            _lib.EVP_MD_fetch.restype = ctypes.c_void_p
            _lib.EVP_MD_fetch.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_char_p]
            _lib.EVP_MD_CTX_new.restype = ctypes.c_void_p
            md = _lib.EVP_MD_fetch(None, b"SHA256", None)
            ctx = _lib.EVP_MD_CTX_new()
            if not md or not ctx:
                raise RuntimeError("libcrypto has no SHA-256")
            _context = (int(ctx), int(md))
        return _context


@kernel(inline="always")
def sha256_into(buf_address: int, start: int, length: int, out_address: int, ctx: int,
                md: int) -> bool:
    """The SHA-256 of the ``length`` bytes at ``buf_address + start`` into the 32 bytes at
    ``out_address``; False when libcrypto reports a failure."""
    return (digest_init(ctx, md, 0) == 1
            and digest_update(ctx, buf_address + start, length) == 1
            and digest_final(ctx, out_address, 0) == 1)


@kernel
def _digests(buf: np.ndarray, starts: np.ndarray, lengths: np.ndarray, out: np.ndarray,
             ctx: int, md: int) -> bool:
    data, into = buf.ctypes.data, out.ctypes.data
    for i in range(min(len(starts), len(lengths))):
        if not sha256_into(data, starts[i], lengths[i], into, ctx, md):
            return False
        into += DIGEST_BYTES
    return True


def sha256(values: list[bytes]) -> list[bytes]:
    """The digests of ``values`` through the kernel (for the tests; the scan digests slices of
    a batch from its own kernel)."""
    joined = np.frombuffer(b"".join(values) + b"\0", np.uint8)
    lengths = np.array([len(v) for v in values], np.int64)
    starts = np.cumsum(lengths) - lengths
    out = np.zeros(DIGEST_BYTES * len(values), np.uint8)
    if not _digests(joined, starts, lengths, out, *context()):
        raise RuntimeError("libcrypto's SHA-256 failed")
    return [out[i * DIGEST_BYTES:(i + 1) * DIGEST_BYTES].tobytes() for i in range(len(values))]


#: the hex digits a digest's bytes are written with (lower case, as ``hexdigest()``)
_HEX = np.frombuffer(b"0123456789abcdef", np.uint8)


@kernel
def _hex_digests(buf: np.ndarray, bounds: np.ndarray, out: np.ndarray, hex_digits: np.ndarray,
                 ctx: int, md: int) -> bool:
    digest = np.empty(DIGEST_BYTES, np.uint8)
    data, at = buf.ctypes.data, digest.ctypes.data
    for i in range(len(bounds) - 1):
        if not sha256_into(data, bounds[i], bounds[i + 1] - bounds[i], at, ctx, md):
            return False
        row = i * 2 * DIGEST_BYTES
        for j in range(DIGEST_BYTES):
            out[row + 2 * j] = hex_digits[digest[j] >> 4]
            out[row + 2 * j + 1] = hex_digits[digest[j] & 15]
    return True


def hex_sha256(values: Any) -> Any:
    """The hex SHA-256 of each value of a ``large_binary`` Arrow array, as a ``large_string``
    array, in one kernel call: what :func:`compactor.erasure.rules.hex_sha256` computes with
    ``hashlib`` a value at a time (0.12 against 0.5 µs a short value). The ledger's integrity
    check takes it where it pays (:func:`compactor.native.integrity_digests`).

    Raises:
        RuntimeError: libcrypto is not available, or reported a failure.
    """
    import pyarrow as pa

    n = len(values)
    bounds = np.frombuffer(values.buffers()[1], dtype=np.int64, count=n + 1,
                           offset=values.offset * 8)
    data = values.buffers()[2]
    buf = np.frombuffer(data if data is not None and data.size else b"\0", np.uint8)
    out = np.empty(2 * DIGEST_BYTES * n, np.uint8)
    if not _hex_digests(buf, bounds, out, _HEX, *context()):
        raise RuntimeError("libcrypto's SHA-256 failed")
    offsets = np.arange(0, 2 * DIGEST_BYTES * (n + 1), 2 * DIGEST_BYTES, dtype=np.int64)
    return pa.Array.from_buffers(pa.large_string(), n,
                                 [None, pa.py_buffer(offsets), pa.py_buffer(out)])


def loaded() -> bool:
    """Whether this process has :func:`hex_sha256`'s kernel compiled or loaded already."""
    return bool(_hex_digests.signatures)


def compile_kernels() -> None:
    """Compile (or load from the disk cache) :func:`hex_sha256`'s kernel with the argument
    types it passes (Arrow's buffers are read-only to numpy), on numpy arrays: no Arrow
    allocation, which would start Arrow's allocator in a worker daemon's preload before it
    forks (``tests/spark/test_daemon.py``)."""
    _hex_digests(np.frombuffer(b"\0", np.uint8), np.frombuffer(bytes(16), np.int64),
                 np.empty(2 * DIGEST_BYTES, np.uint8), _HEX, *context())
