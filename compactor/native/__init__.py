"""The native code of the tool, behind one seam: the writer's numba kernels
(:mod:`compactor.native.fast`, the engine glue, over the key table of
:mod:`compactor.native.keytable`, the chunk kernels of :mod:`compactor.native.chunks`, the
record kernels of :mod:`compactor.native.kernels` and :mod:`compactor.native.xxh3`). This
package is the only importer of numba; nothing here imports it until a native engine is asked
for, so the pure path (``--writer pure``) runs
where numba does not.

The rest of the tool sees the record work through :class:`compactor.cleaner.rewrite.Engine`
and gets one from :func:`engine`.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from compactor.cleaner.rewrite import PURE, Engine, check_writer
from compactor.errors import ConfigError


def available() -> bool:
    """Whether numba can be imported (the native engine can be built)."""
    try:
        import numba  # noqa: F401
    except ImportError:
        return False
    return True


def engine(writer: str) -> Engine:
    """The engine named ``writer`` (one of :data:`compactor.cleaner.rewrite.WRITERS`).

    Raises:
        ConfigError: an unknown name, or ``native`` where numba is not installed.
    """
    check_writer(writer)
    if writer == "pure":
        return PURE
    if not available():
        raise ConfigError("the native writer needs numba, which is not installed",
                          remedy="install the project's dependencies (pip install "
                                 "kafka-compactor), or run with --writer pure")
    from compactor.native.fast import NativeEngine

    return NativeEngine()


#: the rows of a ledger check from which it loads the native hasher in a thread while it
#: starts with ``hashlib``: numba's import, the module and the kernel loaded from numba's cache
#: take 0.6-0.8 s in a fresh process, in which ``hashlib`` checks about 1.2 M rows of 200 bytes
#: (0.5-0.8 against 0.15 µs a row once loaded). Measured on the 1 M-row ledger in a fresh
#: process (30 Nov): the check's pass 1.8-2.2 s with ``hashlib`` alone, 1.34-1.42 s loading the
#: kernel beside it. Below this many rows ``hashlib`` takes under 0.15 s, and the thread would
#: only take a core from the JVM's start that follows.
NATIVE_CHECK_ROWS = 200_000
#: how long a check waits for the kernel its thread is loading before it digests with
#: ``hashlib``: loaded from numba's cache it is there in 0.3-0.8 s, and ``hashlib``, holding the
#: GIL a row at a time, slows the load and the summary's other threads (a fresh process's first
#: 1 M-row summary, its batches checked on both cores: 1.18 s digesting with ``hashlib`` until
#: the kernel is there, 1.00-1.04 s waiting for it; 30 Nov). Compiled from nothing (no disk
#: cache) it takes about 30 s: the check then goes on with ``hashlib``.
KERNEL_WAIT_S = 1.0


def integrity_digests(writer: str, rows: int) -> Callable[[Any], Any] | None:
    """The hasher of the ledger's integrity check of ``rows`` rows in a run with ``writer``:
    the kernel's (:func:`compactor.native.sha256.hex_sha256`, libcrypto called from numba)
    where the run is native, libcrypto is there and the kernel is loaded in this process
    already; for a check of :data:`NATIVE_CHECK_ROWS` rows or more, one that loads it in a
    thread, waits for it a while and digests with ``hashlib`` if it is not there yet
    (:class:`_LoadingHasher`); else
    ``None``: the check's own ``hashlib`` (:func:`compactor.erasure.rules.hex_sha256`, the same
    digests), without importing numba."""
    import sys

    if writer == "pure":
        return None
    imported = sys.modules.get("compactor.native.sha256")
    if imported is not None and imported.loaded():
        return imported.hex_sha256 if imported.available() else None
    if rows < NATIVE_CHECK_ROWS or not available():
        return None
    return _LoadingHasher()


class _LoadingHasher:
    """The hex SHA-256 of an Arrow array (:data:`compactor.erasure.rules.HexSha256`): the
    kernel's once a thread of its own has loaded it; until then each call waits for the load
    until ``wait_s`` after the hasher was made (:data:`KERNEL_WAIT_S`), then digests with
    ``hashlib``, so a large check never waits for a compilation. The thread is not a daemon:
    the interpreter waits for it to finish loading before it exits, never stopping numba
    halfway."""

    def __init__(self, wait_s: float = KERNEL_WAIT_S) -> None:
        self._kernel: Callable[[Any], Any] | None = None
        self._until = time.monotonic() + wait_s
        self._thread = threading.Thread(target=self._load, name="sha256-kernel", daemon=False)
        self._thread.start()

    def _load(self) -> None:
        from compactor.native import sha256

        if sha256.available():
            sha256.compile_kernels()
            self._kernel = sha256.hex_sha256

    @property
    def kernel(self) -> Callable[[Any], Any] | None:
        """The kernel, once loaded (for the tests)."""
        return self._kernel

    def join(self) -> None:
        """Wait for the load (for the tests)."""
        self._thread.join()

    def __call__(self, values: Any) -> Any:
        kernel = self._kernel
        if kernel is None:
            self._thread.join(max(0.0, self._until - time.monotonic()))
            kernel = self._kernel
        if kernel is not None:
            return kernel(values)
        from compactor.erasure.rules import hex_sha256

        return hex_sha256(values)


def compile_kernels() -> None:
    """Compile (or load from numba's disk cache) every kernel; see
    :func:`compactor.native.fast.compile_kernels`,
    :func:`compactor.native.erasure.compile_kernels` and
    :func:`compactor.native.offsetmap.compile_kernels`. Nothing to do without numba."""
    if available():
        from compactor.native import erasure, fast, offsetmap

        fast.compile_kernels()
        erasure.compile_kernels()
        offsetmap.compile_kernels()
