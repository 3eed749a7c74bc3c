"""SHA-256 for the numba kernels: OpenSSL's (libcrypto, the library Python's own ``hashlib`` is
built on), called from inside a kernel, so the erasure scan digests every key of a batch
without a Python object per record (:mod:`compactor.native.erasure`).

The kernels call libcrypto's ``SHA256_Init``, ``SHA256_Update`` and ``SHA256_Final`` by name
(numba's ``ExternalFunction``, resolved when the compiled code is loaded, so numba's disk cache
keeps it) on one ``SHA256_CTX`` a thread: the digest itself, on the CPU's SHA extensions where
it has them, with nothing around it. OpenSSL 3 marks these calls deprecated in favour of its
EVP interface, whose provider dispatch cost more than the digest of a short key: a 12-byte
key took 69 ns through ``EVP_DigestInit_ex2``/``Update``/``Final`` on a fetched SHA-256, 48 ns
this way (30 Nov, 2 cores), and 550 ns as ``hashlib.sha256(key).digest()`` in a Python loop;
OpenSSL's one-shot ``SHA256()`` fetches the algorithm on every call.

:func:`available` says whether libcrypto 3 with these calls was found; without it the
erasure scan stays on the pure path (``hashlib``), which is also the reference the tests
compare with (``tests/property/test_sha256.py``).
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
#: bytes kept for a ``SHA256_CTX`` (112 in OpenSSL 3: eight state words, the bit count, a
#: block, its fill and the digest's length)
_CONTEXT_BYTES = 256
_LIBRARY = ctypes.util.find_library("crypto")
#: each thread's ``SHA256_CTX`` (:func:`context`)
_contexts = threading.local()


def _load() -> ctypes.CDLL | None:
    """libcrypto 3 with the low-level SHA-256 calls the kernels make, loaded into the process
    for the kernels' symbols; None when it is not there (or was built without them)."""
    if _LIBRARY is None:
        return None
    try:
        lib = ctypes.CDLL(_LIBRARY)
        lib.OSSL_PROVIDER_available  # noqa: B018 - an attribute error: not OpenSSL 3
        lib.SHA256_Init  # noqa: B018 - absent from a build without the deprecated calls
    except (OSError, AttributeError):
        return None
    llvm.load_library_permanently(_LIBRARY)
    return lib


_lib = _load()
# called from kernels only (numba types, which a type checker cannot call)
digest_init: Any = types.ExternalFunction("SHA256_Init", types.int32(types.intp))
digest_update: Any = types.ExternalFunction(
    "SHA256_Update", types.int32(types.intp, types.intp, types.intp))
digest_final: Any = types.ExternalFunction("SHA256_Final",
                                           types.int32(types.intp, types.intp))


def available() -> bool:
    return _lib is not None


def context() -> int:
    """The address of the calling thread's ``SHA256_CTX``, made at its first call; a kernel
    takes it as an integer. A context holds a digest's state between its calls, so two
    threads must never share one: :func:`hex_sha256`'s kernel releases the GIL, and the
    ledger's summary digests its batches on a thread a core
    (:func:`compactor.erasure.ledger.pending_summary`).

    Raises:
        RuntimeError: libcrypto is not available (:func:`available`).
    """
    made = getattr(_contexts, "buffer", None)
    if made is None:
        if _lib is None:
            raise RuntimeError("libcrypto (OpenSSL 3) is not available")
        made = _contexts.buffer = ctypes.create_string_buffer(_CONTEXT_BYTES)
    return ctypes.addressof(made)


@kernel(inline="always")
def sha256_into(buf_address: int, start: int, length: int, out_address: int, ctx: int
                ) -> bool:
    """The SHA-256 of the ``length`` bytes at ``buf_address + start`` into the 32 bytes at
    ``out_address``; False when libcrypto reports a failure."""
    return (digest_init(ctx) == 1
            and digest_update(ctx, buf_address + start, length) == 1
            and digest_final(out_address, ctx) == 1)


@kernel
def _digests(buf: np.ndarray, starts: np.ndarray, lengths: np.ndarray, out: np.ndarray,
             ctx: int) -> bool:
    data, into = buf.ctypes.data, out.ctypes.data
    for i in range(min(len(starts), len(lengths))):
        if not sha256_into(data, starts[i], lengths[i], into, ctx):
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
    if not _digests(joined, starts, lengths, out, context()):
        raise RuntimeError("libcrypto's SHA-256 failed")
    return [out[i * DIGEST_BYTES:(i + 1) * DIGEST_BYTES].tobytes() for i in range(len(values))]


#: the hex digits a digest's bytes are written with (lower case, as ``hexdigest()``)
_HEX = np.frombuffer(b"0123456789abcdef", np.uint8)


@kernel(nogil=True)
def _hex_digests(buf: np.ndarray, bounds: np.ndarray, out: np.ndarray, hex_digits: np.ndarray,
                 ctx: int) -> bool:
    digest = np.empty(DIGEST_BYTES, np.uint8)
    data, at = buf.ctypes.data, digest.ctypes.data
    for i in range(len(bounds) - 1):
        if not sha256_into(data, bounds[i], bounds[i + 1] - bounds[i], at, ctx):
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
    if not _hex_digests(buf, bounds, out, _HEX, context()):
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
                 np.empty(2 * DIGEST_BYTES, np.uint8), _HEX, context())
