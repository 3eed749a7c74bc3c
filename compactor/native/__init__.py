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


#: the rows of a ledger check from which the native hasher pays for its start in a fresh
#: process: numba's import, the module and the kernel loaded from numba's cache take 0.6 s
#: there, which ``hashlib`` spends on 1.7 M rows of 200 bytes (0.5 against 0.15 µs a row
#: once loaded; 30 Nov)
NATIVE_CHECK_ROWS = 2_000_000


def integrity_digests(writer: str, rows: int) -> Callable[[Any], Any] | None:
    """The hasher of the ledger's integrity check of ``rows`` rows in a run with ``writer``:
    the kernel's (:func:`compactor.native.sha256.hex_sha256`, libcrypto called from numba)
    where the run is native, libcrypto is there, and the check is large enough to pay for
    the kernel's start (:data:`NATIVE_CHECK_ROWS`) or the kernel is loaded already in this
    process; else ``None``: the check's own ``hashlib``
    (:func:`compactor.erasure.rules.hex_sha256`, the same digests)."""
    import sys

    if writer == "pure" or not available():
        return None
    imported = sys.modules.get("compactor.native.sha256")
    if rows < NATIVE_CHECK_ROWS and not (imported is not None and imported.loaded()):
        return None
    from compactor.native import sha256

    return sha256.hex_sha256 if sha256.available() else None


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
